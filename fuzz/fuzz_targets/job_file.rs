//! Any text as an fio job file: the parser answers (a workload or an error naming the line),
//! never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvarray_workload::parse_job_file;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse_job_file(&text);
});
