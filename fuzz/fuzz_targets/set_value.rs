//! Any lines as `--set KEY=VALUE` arguments over a preset: parsing and applying them answer
//! (a device or an error naming the key), never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvarray_model::overrides::parse_assignment;
use nvarray_model::presets::preset;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines();
    let name = ["moneta", "dram", "optane", "z-nand", "dc-express-gen3x8"]
        [lines.next().map_or(0, str::len) % 5];
    let overrides: Vec<(String, String)> = lines.filter_map(|l| parse_assignment(l).ok()).collect();
    let _ = preset(name).expect("a built-in preset").load(&overrides);
});
