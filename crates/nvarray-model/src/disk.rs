//! A hard disk's position-dependent service time, for the `hdd` preset (the Moneta slides'
//! "Future of Storage" row). Each memory controller is one disk with one actuator.
//!
//! An access costs a fixed command overhead (`memory.read_latency_ns` or `write_latency_ns`),
//! a seek that grows with the distance the head moves, the rotation until the first sector
//! comes under the head, and the transfer at the media rate (one track per revolution).
//!
//! - Seek: 0 on the same track; else `track_to_track + (full_stroke − track_to_track) ·
//!   √(distance / tracks)`, the square-root law of short seeks (Ruemmler and Wilkes, "An
//!   introduction to disk drive modeling", IEEE Computer 1994). Over uniformly random pairs
//!   of tracks the mean of √d is 8/15, so the average seek is about
//!   `track_to_track + 0.53 · (full_stroke − track_to_track)`.
//! - Rotation: the platter turns at `rpm` from time 0, so where it is at any instant is known
//!   and the wait is exact for the modelled clock (the mean over random targets is half a
//!   revolution).
//!
//! Simplified away, and said so in the preset: zoned recording (every track holds
//! `track_bytes`), head and track switches inside a transfer, the drive's read-ahead cache
//! (so sequential requests that arrive after their sector passed wait most of a
//! revolution), and command queueing (requests are served in arrival order, no reordering to
//! shorten seeks).

use crate::config::DiskConfig;

/// One disk's timing and where its head is.
#[derive(Clone, Debug)]
pub struct Disk {
    revolution_ns: u64,
    track_bytes: u64,
    tracks: u64,
    track_to_track_ns: u64,
    full_stroke_ns: u64,
    head_track: u64,
}

impl Disk {
    /// A disk of `capacity_bytes` with its head on track 0.
    pub fn new(cfg: &DiskConfig, capacity_bytes: u64) -> Disk {
        debug_assert!(cfg.rpm > 0, "expected a spinning disk, found rpm=0");
        debug_assert!(
            cfg.track_bytes > 0,
            "expected tracks that hold data, found track_bytes=0"
        );
        debug_assert!(
            cfg.seek_full_stroke_ns >= cfg.seek_track_to_track_ns,
            "expected a full-stroke seek at least as long as a track-to-track one, found {} < {}",
            cfg.seek_full_stroke_ns,
            cfg.seek_track_to_track_ns
        );
        let track_bytes = u64::from(cfg.track_bytes);
        Disk {
            revolution_ns: 60_000_000_000 / u64::from(cfg.rpm),
            track_bytes,
            tracks: capacity_bytes.div_ceil(track_bytes).max(1),
            track_to_track_ns: cfg.seek_track_to_track_ns,
            full_stroke_ns: cfg.seek_full_stroke_ns,
            head_track: 0,
        }
    }

    /// Time to serve `len_bytes` at disk offset `offset_bytes` when the disk starts on it at
    /// `start_ns` after `overhead_ns` of command processing; moves the head.
    pub fn service_ns(
        &mut self,
        start_ns: u64,
        overhead_ns: u64,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> u64 {
        let track = offset_bytes / self.track_bytes;
        debug_assert!(
            track < self.tracks,
            "disk access past the last track: expected track < {}, found {track} (offset \
             {offset_bytes})",
            self.tracks
        );
        let seek = self.seek_ns(track.abs_diff(self.head_track));
        let on_track_ns = start_ns + overhead_ns + seek;
        let revolution = self.revolution_ns;
        // Where the first sector is, and where the platter is, as ns into a revolution.
        let sector_at = (offset_bytes % self.track_bytes) * revolution / self.track_bytes;
        let platter_at = on_track_ns % revolution;
        let rotation = (sector_at + revolution - platter_at) % revolution;
        // Rounded down, so a request that continues where the last one ended finds its first
        // sector just arriving, never just passed (which would cost a whole revolution).
        let transfer = (len_bytes * revolution / self.track_bytes).max(1);
        self.head_track = (offset_bytes + len_bytes.max(1) - 1) / self.track_bytes;
        debug_assert!(
            self.head_track < self.tracks,
            "disk access ends past the last track: expected track < {}, found {} (offset \
             {offset_bytes}, len {len_bytes})",
            self.tracks,
            self.head_track
        );
        debug_assert!(
            rotation < revolution,
            "waited a whole revolution or more: expected rotation < {revolution}, found {rotation}"
        );
        debug_assert!(
            seek <= self.full_stroke_ns,
            "seek longer than a full stroke: expected <= {}, found {seek}",
            self.full_stroke_ns
        );
        overhead_ns + seek + rotation + transfer
    }

    fn seek_ns(&self, distance_tracks: u64) -> u64 {
        if distance_tracks == 0 {
            return 0;
        }
        let fraction = distance_tracks as f64 / self.tracks as f64;
        let span = self.full_stroke_ns.saturating_sub(self.track_to_track_ns) as f64;
        self.track_to_track_ns + (span * fraction.sqrt()).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk() -> Disk {
        // 10,000 rpm: 6 ms per revolution; 1 MB tracks; 1,000 tracks.
        Disk::new(
            &DiskConfig {
                rpm: 10_000,
                track_bytes: 1_000_000,
                seek_track_to_track_ns: 500_000,
                seek_full_stroke_ns: 8_500_000,
            },
            1_000_000_000,
        )
    }

    #[test]
    fn seek_grows_with_the_square_root_of_distance() {
        let d = disk();
        assert_eq!(d.seek_ns(0), 0);
        assert_eq!(d.seek_ns(1000), 8_500_000, "full stroke");
        assert_eq!(
            d.seek_ns(250),
            500_000 + 4_000_000,
            "a quarter of the way: half the span"
        );
    }

    #[test]
    fn rotation_waits_for_the_sector_to_come_round() {
        let mut d = disk();
        // Head on track 0, platter at angle 0 at t = 0: sector 0 is under the head now.
        assert_eq!(
            d.service_ns(0, 0, 0, 0),
            1,
            "the transfer takes at least 1 ns"
        );
        // Half-way round the same track: half a revolution (3 ms) plus the transfer.
        let mut d2 = disk();
        assert_eq!(d2.service_ns(0, 0, 500_000, 100_000), 3_000_000 + 600_000);
        // Just missed sector 0: nearly a whole revolution.
        assert_eq!(d.service_ns(1, 0, 0, 0), 6_000_000 - 1 + 1);
        // Continuing where the last access ended costs no rotation.
        let mut d3 = disk();
        let first = d3.service_ns(0, 0, 0, 4096);
        assert_eq!(d3.service_ns(first, 0, 4096, 4096), first);
    }

    /// The disk holds 1,000 tracks of 1 MB: offset 1e9 is on track 1,000, past the last.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "disk access past the last track: expected track < 1000, found 1000")]
    fn an_access_past_the_last_track_is_caught() {
        disk().service_ns(0, 0, 1_000_000_000, 4096);
    }

    #[test]
    fn random_accesses_average_seek_plus_half_a_revolution() {
        let mut d = disk();
        let mut t = 0u64;
        let mut total = 0u64;
        let n = 20_000u64;
        let mut x = 12345u64;
        for _ in 0..n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let offset = (x >> 20) % 1_000_000_000 / 4096 * 4096;
            let s = d.service_ns(t, 0, offset, 4096);
            t += s + 7_919;
            total += s;
        }
        let mean_ms = total as f64 / n as f64 / 1e6;
        // 0.5 + 8/15 * 8 = 4.77 ms of seek, 3 ms of rotation, 0.02 ms of transfer.
        assert!((7.5..8.1).contains(&mean_ms), "{mean_ms} ms");
    }
}
