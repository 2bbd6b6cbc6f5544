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

use nvarray_model::config::DiskConfig;

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
