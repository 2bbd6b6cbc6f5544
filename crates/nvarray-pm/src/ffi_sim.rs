//! Power cuts through the C ABI: `nv_sim_*`, the C face of `sim_session.rs`, for programs
//! that reach the library only through `nv_*` calls, such as SQLite through the VFS
//! (`native/sqlite-vfs`, tested in `tests/sqlite_vfs.rs`). Declared in `include/nvarray_pm.h`.
//!
//! ```c
//! nv_sim_start(seed, NV_SIM_NEVER, 1);   // dry run: count the operations
//! run_workload();  uint64_t total = nv_sim_ops();
//! nv_sim_start(seed, some_point_below_total, 1);
//! run_workload_until(nv_sim_crashed());  // the pool keeps running after the cut
//! close_everything();
//! nv_sim_recover();                      // the next nv_allocate opens the crash image
//! reopen_and_check();
//! nv_sim_stop();
//! ```

use std::ffi::c_int;

use crate::ffi::{guarded, open_pools, set_error, NV_ERROR, NV_OK};
use crate::sim_session;

/// `crash_at` of `nv_sim_start` that never cuts power (the dry run).
pub const NV_SIM_NEVER: u64 = u64::MAX;

/// Pools are open: a session may not start, recover or stop under them.
fn refuse_with_pools_open(what: &str) -> Option<c_int> {
    let open = open_pools();
    (open > 0).then(|| {
        set_error(format!(
            "{what}: {open} pool(s) are open; nv_free them first"
        ));
        NV_ERROR
    })
}

/// Starts a session: from now on `nv_allocate` opens simulated pools, each cutting power
/// before its operation `crash_at` (counted from the pool's first `nv_allocate`;
/// `NV_SIM_NEVER`: never). `seed` drives the keep-or-drop coins; `tear_lines` non-zero lets
/// pending lines tear. Forgets the simulated pools of an earlier session. Refused while pools
/// are open.
#[no_mangle]
pub extern "C" fn nv_sim_start(seed: u64, crash_at: u64, tear_lines: c_int) -> c_int {
    guarded(NV_ERROR, || {
        if let Some(rc) = refuse_with_pools_open("nv_sim_start") {
            return rc;
        }
        sim_session::start(
            seed,
            (crash_at != NV_SIM_NEVER).then_some(crash_at),
            tear_lines != 0,
        );
        NV_OK
    })
}

/// 1 while a session runs (`nv_allocate` opens simulated pools), else 0. A program that
/// reads a pool's file itself (the SQLite VFS looks at a file's header before it opens it)
/// must look through the mapping instead then: a simulated pool's file holds none of its
/// bytes.
#[no_mangle]
pub extern "C" fn nv_sim_active() -> c_int {
    guarded(0, || c_int::from(sim_session::active()))
}

/// Operations (writes, flushes, fences, syncs) the session's simulated pools have performed.
#[no_mangle]
pub extern "C" fn nv_sim_ops() -> u64 {
    guarded(0, sim_session::ops)
}

/// 1 once a simulated pool of the session has lost power, else 0.
#[no_mangle]
pub extern "C" fn nv_sim_crashed() -> c_int {
    guarded(0, || c_int::from(sim_session::crashed()))
}

/// Replaces every simulated pool that lost power by the image the cut left, never to cut
/// again: the next `nv_allocate` of its path recovers it. Returns how many were replaced, or
/// `NV_ERROR` outside a session or while pools are open.
#[no_mangle]
pub extern "C" fn nv_sim_recover() -> c_int {
    guarded(NV_ERROR, || {
        if let Some(rc) = refuse_with_pools_open("nv_sim_recover") {
            return rc;
        }
        match sim_session::recover() {
            Some(replaced) => c_int::try_from(replaced).unwrap_or(c_int::MAX),
            None => {
                set_error("nv_sim_recover: no session (nv_sim_start)");
                NV_ERROR
            }
        }
    })
}

/// Pools the session opened with a recovery (after a cut), so a test can tell that it
/// reopened the crash image and not a cleanly closed pool.
#[no_mangle]
pub extern "C" fn nv_sim_recoveries() -> u64 {
    guarded(0, sim_session::recoveries)
}

/// Ends the session: `nv_allocate` opens file pools again, and the simulated ones are gone.
/// Refused while pools are open.
#[no_mangle]
pub extern "C" fn nv_sim_stop() -> c_int {
    guarded(NV_ERROR, || {
        if let Some(rc) = refuse_with_pools_open("nv_sim_stop") {
            return rc;
        }
        sim_session::stop();
        NV_OK
    })
}
