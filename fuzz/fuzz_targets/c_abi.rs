//! Any sequence of C ABI calls on one pool (begin, write anywhere, commit, abort, with ids and
//! addresses right and wrong): every call returns a code, none panics or crashes, and a
//! committed write reads back through the mapping.
#![no_main]

use std::ffi::{c_void, CString};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nvarray_pm::ffi::*;

const POOL_BYTES: usize = 1 << 20;

/// One pool per fuzzing process, in a scratch directory on /dev/shm.
fn pool() -> usize {
    static POOL: OnceLock<usize> = OnceLock::new();
    *POOL.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("nvarray-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::env::set_var("NVARRAY_PM_NVM_DIR", &dir);
        std::env::set_var("NVARRAY_PM_LOG_SIZE", "256k");
        std::env::set_var("NVARRAY_PM_CACHE_SIZE", "256k");
        let path = CString::new(dir.join("pool").to_str().unwrap()).unwrap();
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        let p = unsafe { nv_allocate(path.as_ptr(), POOL_BYTES as u64, NV_CREATE) };
        assert!(!p.is_null(), "nv_allocate failed");
        p as usize
    })
}

fuzz_target!(|data: &[u8]| {
    let base = pool();
    let mut tids: Vec<i64> = Vec::new();
    for op in data.chunks(8) {
        let word = op.iter().fold(0u64, |w, &b| w << 8 | u64::from(b));
        let pick = |n: usize| if n == 0 { 0 } else { (word >> 8) as usize % n };
        match op[0] % 6 {
            0 if tids.len() < 64 => {
                let t = nv_txbegin();
                if t >= 0 {
                    tids.push(t);
                }
            }
            1 | 2 => {
                // A live id, or any id at all.
                let tid = if op[0] % 6 == 1 && !tids.is_empty() {
                    tids[pick(tids.len())]
                } else {
                    (word >> 16) as i64
                };
                let len = (word >> 40) as usize % 300;
                // Mostly inside the pool, sometimes around or past its ends.
                let at = if word & 0x80 == 0 {
                    base + (word >> 20) as usize % POOL_BYTES
                } else {
                    base.wrapping_add((word as i64 >> 24) as usize)
                };
                let src = vec![op[0]; len.max(1)];
                // SAFETY: `src` holds at least `len` readable bytes; `at` is only an address
                // for nv_write to check, never dereferenced here.
                let _ =
                    unsafe { nv_write(tid, at as *mut c_void, src.as_ptr() as *const c_void, len) };
            }
            3 if !tids.is_empty() => {
                let tid = tids.swap_remove(pick(tids.len()));
                let _ = nv_commit(tid);
            }
            4 if !tids.is_empty() => {
                let tid = tids.swap_remove(pick(tids.len()));
                let _ = nv_abort(tid);
            }
            _ => {
                // An id that was never handed out, or a finished one.
                assert!(nv_commit(i64::MIN + (word >> 1) as i64) != NV_OK);
            }
        }
    }
    // One write, committed, reads back through the mapping.
    let tid = nv_txbegin();
    if tid >= 0 {
        let byte = data.first().copied().unwrap_or(7);
        let at = base + POOL_BYTES - 1;
        // SAFETY: one readable byte at `&byte`; `at` is the pool's last byte.
        let rc = unsafe {
            nv_write(
                tid,
                at as *mut c_void,
                &byte as *const u8 as *const c_void,
                1,
            )
        };
        if rc == NV_OK && nv_commit(tid) == NV_OK {
            // SAFETY: `at` is inside the mapping nv_allocate returned, which stays mapped.
            assert_eq!(unsafe { *(at as *const u8) }, byte);
        } else {
            let _ = nv_abort(tid);
        }
    }
    for tid in tids {
        let _ = nv_abort(tid);
    }
});
