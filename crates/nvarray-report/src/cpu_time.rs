//! The one measurement both engines take the same way: CPU time from `getrusage`, of the whole
//! process (so emulator device threads count) or of the calling thread (its cost per GB is
//! `enough::cpu_seconds_per_gb`).

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

#[cfg(test)]
mod tests {
    use super::*;

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
