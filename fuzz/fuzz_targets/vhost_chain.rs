//! Any bytes as a guest's virtqueue (descriptor table, available ring, headers): every chain
//! is taken and judged as the vhost-user-blk back end does it, and what is accepted must lie
//! inside the guest's memory and the disk (`nvarray_vhost::descriptor_table` asserts it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvarray_vhost::descriptor_table::Tables;

fuzz_target!(|data: &[u8]| {
    thread_local! {
        static TABLES: std::cell::RefCell<Tables> = std::cell::RefCell::new(Tables::new());
    }
    TABLES.with(|t| {
        t.borrow_mut().judge(data);
    });
});
