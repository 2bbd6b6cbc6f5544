//! How much a run must measure before a figure means anything: a percentile or a rate over
//! fewer than `REQUESTS_FEW` requests, or a cost per GB over less than `BYTES_FEW`, says more
//! about chance and fixed costs than about the device or the software. The report says so in
//! their place (`RunReport::require_enough_requests`, `set_cpu_seconds`).

/// A run that completed fewer requests than this measured nothing worth a percentile or a
/// rate: it is reported, but not called faithful (the emulator) or measured (the simulator).
pub const REQUESTS_FEW: u64 = 10;

/// Below this much data moved, a figure per GB says more about the process's fixed costs
/// (its threads, its setup, a daemon idling between clients) than about moving data: a
/// channel daemon's report once read 89,241 s per GB after 12 KB.
pub const BYTES_FEW: u64 = 1 << 20;

/// CPU seconds per GB (1e9 bytes) moved, or `None` when too little moved for one to mean
/// anything: less than `BYTES_FEW`, or fewer than `REQUESTS_FEW` requests.
pub fn cpu_seconds_per_gb(cpu_seconds: f64, bytes: u64, requests: u64) -> Option<f64> {
    if bytes < BYTES_FEW || requests < REQUESTS_FEW {
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
}
