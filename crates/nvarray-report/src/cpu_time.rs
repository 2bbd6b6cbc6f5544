//! The one measurement both engines take the same way: CPU time from `getrusage`, of the whole
//! process (so emulator device threads count) or of the calling thread, and its cost per GB.

/// CPU seconds (user + system) this process has used so far, every thread included.
pub fn process_cpu_seconds() -> f64 {
    rusage_cpu_seconds(libc::RUSAGE_SELF)
}

/// CPU time (user + system) of the calling thread, in seconds: what one simulation cost when
/// others run beside it in the same process (a parallel sweep).
pub fn thread_cpu_seconds() -> f64 {
    rusage_cpu_seconds(libc::RUSAGE_THREAD)
}

fn rusage_cpu_seconds(who: libc::c_int) -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `usage` is a valid, writable `rusage`; RUSAGE_SELF and RUSAGE_THREAD cannot fail
    // with a valid pointer, and the result is checked before the value is read.
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage({who}) failed");
    // SAFETY: getrusage returned 0, so it filled `usage`.
    let usage = unsafe { usage.assume_init() };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// Below this much data moved, a figure per GB says more about the process's fixed costs
/// (its threads, its setup, a daemon idling between clients) than about moving data: a
/// channel daemon's report once read 89,241 s per GB after 12 KB.
pub const BYTES_FEW: u64 = 1 << 20;

/// CPU seconds per GB (1e9 bytes) moved, or `None` when too little moved for one to mean
/// anything: less than `BYTES_FEW`, or fewer than `REQUESTS_FEW` requests.
pub fn cpu_seconds_per_gb(cpu_seconds: f64, bytes: u64, requests: u64) -> Option<f64> {
    if bytes < BYTES_FEW || requests < crate::REQUESTS_FEW {
        return None;
    }
    Some(cpu_seconds / (bytes as f64 / 1e9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_per_gb_divides_by_gigabytes() {
        assert_eq!(cpu_seconds_per_gb(2.0, 0, 0), None);
        assert_eq!(cpu_seconds_per_gb(2.0, 1_000_000_000, 10), Some(2.0));
        assert_eq!(cpu_seconds_per_gb(1.0, 4_000_000_000, 1000), Some(0.25));
        // Too little moved, or in too few requests: no figure (12 KB once gave 89,241 s/GB).
        assert_eq!(cpu_seconds_per_gb(1.07, 12 << 10, 3), None);
        assert_eq!(cpu_seconds_per_gb(1.0, BYTES_FEW - 1, 1000), None);
        assert_eq!(cpu_seconds_per_gb(1.0, 1 << 30, 9), None);
        assert!(cpu_seconds_per_gb(1.0, BYTES_FEW, 10).is_some());
    }

    #[test]
    fn process_cpu_time_grows_with_work() {
        let before = process_cpu_seconds();
        let mut x = 0u64;
        let end = std::time::Instant::now() + std::time::Duration::from_millis(50);
        while std::time::Instant::now() < end {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = process_cpu_seconds();
        assert!(after > before, "{before} -> {after}");
    }
}
