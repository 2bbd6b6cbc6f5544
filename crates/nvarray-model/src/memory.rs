//! The memory array: controllers on the ring, banks per controller, media timing, erase, and
//! the start-gap remapping of each controller.
//!
//! Address layout: the device address space is striped over the controllers in
//! `stripe_bytes` pieces; inside a controller, addresses are grouped in wear-levelling lines
//! that start-gap remaps; rows (the media's access unit) of a physical line are interleaved
//! over the controller's banks, so one request keeps several banks busy at once. A bank
//! serves one row access at a time: `latency + row / bank bandwidth`.

use crate::config::MemoryConfig;
use crate::config::WearConfig;
use crate::disk::Disk;
use crate::link::{bytes_to_ns, fs_per_byte};
use crate::timeline::Timeline;
use crate::wear::StartGap;

mod booking;
mod flash_translation;
mod write_buffer;

pub use booking::Access;
use booking::Booking;
use flash_translation::{FlashCosts, FlashTranslation};
pub use flash_translation::{FtlSample, FtlStats, MapCacheStats};

/// Wear statistics across all controllers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WearStats {
    /// Most writes any physical line received.
    pub line_writes_max: u64,
    /// Mean writes per physical line.
    pub line_writes_mean: f64,
    /// Line copies made by gap moves (the levelling's own write overhead).
    pub gap_moves: u64,
}

#[derive(Clone, Debug)]
pub struct Memory {
    controllers: u32,
    banks_per_controller: u32,
    stripe_bytes: u64,
    row_bytes: u64,
    line_bytes: u64,
    rows_per_line: u64,
    read_latency_ns: u64,
    write_latency_ns: u64,
    erase_latency_ns: u64,
    erase_block_bytes: u64,
    bank_fs_per_byte: u64,
    /// Cost of one whole row on one bank: latency plus transfer.
    row_read_ns: u64,
    row_write_ns: u64,
    banks: Vec<Timeline>,
    /// Per controller: every access so far gave each of its banks the same work, so their
    /// timelines are identical and the first bank's stands for all (see `add_rows`).
    lockstep: Vec<bool>,
    /// Every access so far gave every controller the same work at the same times (whole
    /// stripes, the same number on each, with no write that start-gap records): their
    /// timelines are identical, so the first controller's first bank stands for every bank
    /// of the array (see `access_uniform`). Implies `lockstep` of every controller.
    controllers_lockstep: bool,
    /// Whole-stripe accesses keep the controllers in lockstep: a stripe is one piece (no
    /// longer than a line) of whole rows that spread evenly over a controller's banks.
    stripes_spread_evenly: bool,
    /// A stripe on every controller (`access_uniform`'s unit), and what one such round costs
    /// each bank (one per bank: read, write).
    round_bytes: u64,
    round_read_ns: u64,
    round_write_ns: u64,
    /// Busy time of the banks that a lockstep controller's first bank stood for (and, in
    /// `controllers_lockstep`, the other controllers' banks).
    lockstep_busy_ns: u64,
    bank_bytes_since_erase: Vec<u64>,
    wear: Option<Vec<StartGap>>,
    /// Time each bank is asked for by the piece being booked; reused, so no allocation per piece.
    /// The access being booked: its ready time, the engine's now, and the span of bank time
    /// booked so far (first start, last end).
    booking: Booking,
    erases: u64,
    /// One per controller when the media is a hard disk (`[memory.disk]`).
    disks: Option<Vec<Disk>>,
    /// Bytes addressable (`memory.capacity_bytes`); every access lies inside (checked in
    /// debug builds; last, so the hot fields keep their places).
    capacity_bytes: u64,
    /// Flash behind a page-mapping FTL (`[ftl]`): every access goes through it.
    ftl: Option<Box<FlashTranslation>>,
}

/// What the address arithmetic of `Memory::access` relies on, checked in debug builds
/// (`DeviceConfig::validate` checks each; a `Memory` built from an unchecked config would book
/// the wrong banks).
fn debug_check_geometry(
    cfg: &MemoryConfig,
    wear: &WearConfig,
    line_bytes: u64,
    lines_per_controller: u64,
) {
    debug_assert!(
        cfg.controllers >= 1,
        "expected at least one controller, found {}",
        cfg.controllers
    );
    debug_assert!(
        cfg.banks_per_controller >= 1,
        "expected at least one bank per controller, found {}",
        cfg.banks_per_controller
    );
    debug_assert!(
        cfg.stripe_bytes.is_power_of_two(),
        "expected a power-of-two stripe, found {}",
        cfg.stripe_bytes
    );
    debug_assert!(
        cfg.row_bytes.is_power_of_two(),
        "expected a power-of-two row, found {}",
        cfg.row_bytes
    );
    debug_assert!(
        line_bytes.is_power_of_two(),
        "expected a power-of-two line, found {line_bytes}"
    );
    debug_assert!(
        line_bytes >= u64::from(cfg.row_bytes),
        "expected a line of at least one row, found line={line_bytes} row={}",
        cfg.row_bytes
    );
    debug_assert!(
        cfg.capacity_bytes > 0,
        "expected a non-empty memory, found capacity 0"
    );
    debug_assert!(
        cfg.capacity_bytes.is_multiple_of(
            u64::from(cfg.controllers) * line_bytes.max(u64::from(cfg.stripe_bytes))
        ),
        "expected a capacity that is a multiple of controllers x max(stripe, line) ({} x {}), \
         found {}",
        cfg.controllers,
        line_bytes.max(u64::from(cfg.stripe_bytes)),
        cfg.capacity_bytes
    );
    debug_assert!(
        cfg.erase_latency_ns == 0 || cfg.erase_block_bytes > 0,
        "expected an erase block when erases cost time, found erase_block_bytes=0 with \
         erase_latency_ns={}",
        cfg.erase_latency_ns
    );
    debug_assert!(
        !wear.enabled || lines_per_controller <= u64::from(u32::MAX - 1),
        "expected at most {} start-gap lines per controller, found {lines_per_controller}",
        u32::MAX - 1
    );
    debug_assert!(
        cfg.disk.is_none() || cfg.banks_per_controller == 1,
        "expected one bank (one actuator) per disk, found {}",
        cfg.banks_per_controller
    );
}

/// The FTL `ftl` lays over the flash `cfg` describes, with the flash's costs per page.
fn flash_translation(cfg: &MemoryConfig, ftl: &nvarray_ftl::FtlConfig) -> Box<FlashTranslation> {
    let page = u64::from(ftl.page_bytes);
    let fs = fs_per_byte(cfg.bank_bandwidth_bytes_per_s as f64);
    let costs = FlashCosts {
        read_latency_ns: cfg.read_latency_ns,
        erase_ns: cfg.erase_latency_ns,
        bank_fs_per_byte: fs,
        read_page_ns: cfg.read_latency_ns + bytes_to_ns(page, fs),
        program_page_ns: cfg.write_latency_ns + bytes_to_ns(page, fs),
    };
    Box::new(FlashTranslation::new(
        ftl,
        cfg.ftl_geometry(ftl.page_bytes),
        (cfg.controllers, cfg.banks_per_controller),
        costs,
    ))
}

/// Whether a stripe gives every bank of its controller the same number of rows: it fits in
/// a line, holds whole rows, and those divide evenly over the banks.
fn stripes_spread_evenly(cfg: &MemoryConfig, line_bytes: u64) -> bool {
    let (stripe, row) = (u64::from(cfg.stripe_bytes), u64::from(cfg.row_bytes));
    stripe <= line_bytes
        && stripe >= row
        && (stripe / row).is_multiple_of(u64::from(cfg.banks_per_controller))
}

impl Memory {
    /// The array `cfg` describes, with start-gap per `wear` and an FTL per `ftl` (both
    /// validated with it: `DeviceConfig::validate`).
    pub fn new(cfg: &MemoryConfig, wear: &WearConfig, ftl: &nvarray_ftl::FtlConfig) -> Self {
        let banks = (cfg.controllers * cfg.banks_per_controller) as usize;
        // A disk is not wear-levelled (validated): its pieces split only at stripe ends.
        let line_bytes = if cfg.disk.is_some() {
            u64::from(cfg.stripe_bytes)
        } else {
            u64::from(wear.line_bytes)
        };
        let lines_per_controller = cfg.capacity_bytes / u64::from(cfg.controllers) / line_bytes;
        debug_check_geometry(cfg, wear, line_bytes, lines_per_controller);
        let rows_per_bank_per_stripe =
            u64::from(cfg.stripe_bytes / cfg.row_bytes / cfg.banks_per_controller);
        let row_transfer_ns = bytes_to_ns(
            u64::from(cfg.row_bytes),
            fs_per_byte(cfg.bank_bandwidth_bytes_per_s as f64),
        );
        let ftl = ftl.enabled.then(|| flash_translation(cfg, ftl));
        let shared_banks = ftl.is_none();
        Memory {
            ftl,
            capacity_bytes: cfg.capacity_bytes,
            controllers: cfg.controllers,
            banks_per_controller: cfg.banks_per_controller,
            stripe_bytes: u64::from(cfg.stripe_bytes),
            row_bytes: u64::from(cfg.row_bytes),
            line_bytes,
            rows_per_line: (line_bytes / u64::from(cfg.row_bytes)).max(1),
            read_latency_ns: cfg.read_latency_ns,
            write_latency_ns: cfg.write_latency_ns,
            erase_latency_ns: cfg.erase_latency_ns,
            erase_block_bytes: cfg.erase_block_bytes,
            bank_fs_per_byte: fs_per_byte(cfg.bank_bandwidth_bytes_per_s as f64),
            row_read_ns: cfg.read_latency_ns + row_transfer_ns,
            row_write_ns: cfg.write_latency_ns + row_transfer_ns,
            banks: vec![Timeline::new(); banks],
            lockstep: vec![
                shared_banks && cfg.erase_latency_ns == 0 && cfg.banks_per_controller > 1;
                cfg.controllers as usize
            ],
            controllers_lockstep: shared_banks
                && cfg.erase_latency_ns == 0
                && cfg.banks_per_controller > 1
                && cfg.controllers > 1
                && cfg.disk.is_none(),
            stripes_spread_evenly: stripes_spread_evenly(cfg, line_bytes),
            round_bytes: u64::from(cfg.stripe_bytes) * u64::from(cfg.controllers),
            round_read_ns: rows_per_bank_per_stripe * (cfg.read_latency_ns + row_transfer_ns),
            round_write_ns: rows_per_bank_per_stripe * (cfg.write_latency_ns + row_transfer_ns),
            lockstep_busy_ns: 0,
            bank_bytes_since_erase: vec![0; banks],
            wear: wear.enabled.then(|| {
                (0..cfg.controllers)
                    .map(|_| StartGap::new(lines_per_controller as u32, wear.gap_interval_writes))
                    .collect()
            }),
            booking: Booking::default(),
            erases: 0,
            disks: cfg.disk.as_ref().map(|d| {
                let per_disk = cfg.capacity_bytes / u64::from(cfg.controllers);
                vec![Disk::new(d, per_disk); cfg.controllers as usize]
            }),
        }
    }

    /// `access` of `[offset, offset + len)` with a placement handle: flash behind an FTL
    /// writes its pages through that reclaim unit handle (`ftl.placement_handles`); every
    /// other memory ignores it.
    #[inline]
    pub fn access_placed(
        &mut self,
        now_ns: u64,
        ready_ns: u64,
        access: Access,
        (offset_bytes, len_bytes): (u64, u64),
        placement: u16,
    ) -> (u64, u64) {
        if self.ftl.is_some() {
            let range = (offset_bytes, len_bytes);
            return self.access_through_ftl(now_ns, ready_ns, access, range, placement);
        }
        self.access(now_ns, ready_ns, access, offset_bytes, len_bytes)
    }

    /// Books the media for `access` of `[offset, offset + len)` once `ready_ns`; returns
    /// `(first bank start, last bank end)`. The access is not empty and lies inside the
    /// capacity (the device checks every command first).
    pub fn access(
        &mut self,
        now_ns: u64,
        ready_ns: u64,
        access: Access,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> (u64, u64) {
        debug_assert!(
            len_bytes > 0,
            "empty media access: expected len > 0, found len=0 at offset {offset_bytes}"
        );
        debug_assert!(
            offset_bytes
                .checked_add(len_bytes)
                .is_some_and(|end| end <= self.capacity_bytes),
            "media access past the end: expected offset + len <= {}, found offset={offset_bytes} \
             len={len_bytes}",
            self.capacity_bytes
        );
        debug_assert!(
            ready_ns >= now_ns,
            "media access ready in the past: expected ready >= now, found ready={ready_ns} \
             now={now_ns}"
        );
        if self.ftl.is_some() {
            return self.access_through_ftl(now_ns, ready_ns, access, (offset_bytes, len_bytes), 0);
        }
        if self.controllers_lockstep {
            if let Some(span) =
                self.access_uniform(now_ns, ready_ns, access, offset_bytes, len_bytes)
            {
                return span;
            }
            self.part_controllers();
        }
        if let Some(span) =
            self.access_whole_rows(now_ns, ready_ns, access, offset_bytes, len_bytes)
        {
            return span;
        }
        self.booking = Booking::start(now_ns, ready_ns);
        self.add_pieces(access, offset_bytes, len_bytes);
        let b = self.booking;
        debug_assert!(
            b.first_start_ns != u64::MAX,
            "a media access booked no bank: expected at least one booking for offset \
             {offset_bytes} len {len_bytes}"
        );
        debug_assert!(
            b.first_start_ns >= ready_ns,
            "media started before the access was ready: expected first start >= {ready_ns}, \
             found {}",
            b.first_start_ns
        );
        debug_assert!(
            b.last_end_ns > b.first_start_ns,
            "media access took no time: expected last end > first start {}, found {}",
            b.first_start_ns,
            b.last_end_ns
        );
        (b.first_start_ns.min(b.last_end_ns), b.last_end_ns)
    }

    /// Cuts `[offset, offset + len)` into pieces, each inside one stripe and one line, and
    /// books each on its controller (`add_piece`) into the current booking.
    #[inline]
    fn add_pieces(&mut self, access: Access, offset_bytes: u64, len_bytes: u64) {
        // Stripe, line and row sizes are powers of two (validated), so the address arithmetic
        // is shifts and masks; the controller count need not be, so it is divided once (a
        // shift when it is a power of two, as in most presets) and then stepped.
        let stripe_shift = self.stripe_bytes.trailing_zeros();
        let stripe_mask = self.stripe_bytes - 1;
        let controllers = u64::from(self.controllers);
        let stripe = offset_bytes >> stripe_shift;
        let (mut controller, mut group) = if controllers.is_power_of_two() {
            let shift = controllers.trailing_zeros();
            ((stripe & (controllers - 1)) as u32, stripe >> shift)
        } else {
            ((stripe % controllers) as u32, stripe / controllers)
        };
        let mut in_stripe = offset_bytes & stripe_mask;
        let mut left = len_bytes;
        while left > 0 {
            let local = (group << stripe_shift) + in_stripe;
            // A piece ends at the stripe's end and, because lines are remapped one by one,
            // at the line's end.
            let line_left = self.line_bytes - (local & (self.line_bytes - 1));
            let piece = left.min(self.stripe_bytes - in_stripe).min(line_left);
            #[cfg(debug_assertions)]
            self.check_piece(offset_bytes + (len_bytes - left), controller, local, piece);
            self.add_piece(controller, local, piece, access);
            left -= piece;
            in_stripe += piece;
            if in_stripe == self.stripe_bytes {
                in_stripe = 0;
                controller += 1;
                if controller == self.controllers {
                    controller = 0;
                    group += 1;
                }
            }
        }
    }

    /// `access` on flash behind an FTL (`flash_translation.rs`).
    fn access_through_ftl(
        &mut self,
        now_ns: u64,
        ready_ns: u64,
        access: Access,
        range: (u64, u64),
        placement: u16,
    ) -> (u64, u64) {
        let t = self.ftl.as_deref_mut().expect("flash behind an FTL");
        self.booking = Booking::start(now_ns, ready_ns);
        let bookings = (&mut self.banks[..], &mut self.booking);
        t.access(bookings, &mut self.erases, access, range, placement);
        let b = self.booking;
        // A read of nothing but unmapped pages touched no flash: its media time is nil.
        (b.first_start_ns.min(b.last_end_ns), b.last_end_ns)
    }

    /// The access in `controllers_lockstep`, if it keeps the controllers in lockstep: whole
    /// stripes from a stripe boundary, as many on every controller (a 4 KiB read on Moneta's
    /// four controllers of 1 KiB stripes), and nothing start-gap records (a read, or no wear
    /// levelling). Each stripe would book its controller's first bank for `rows / banks` rows
    /// at `ready_ns` (`add_rows`, lockstep, no leftover rows), every controller in the same
    /// order, so the controllers' timelines stay identical and booking the first controller's
    /// first bank once per round of stripes is exact. Returns `None`, having changed nothing,
    /// for any other access.
    #[inline]
    fn access_uniform(
        &mut self,
        now_ns: u64,
        ready_ns: u64,
        access: Access,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Option<(u64, u64)> {
        let records_writes = access == Access::Write && self.wear.is_some();
        if !self.stripes_spread_evenly
            || records_writes
            || offset_bytes & (self.stripe_bytes - 1) != 0
        {
            return None;
        }
        let rounds = len_bytes / self.round_bytes;
        if rounds * self.round_bytes != len_bytes {
            return None;
        }
        #[cfg(debug_assertions)]
        self.check_controllers_lockstep();
        let ns = match access {
            Access::Read => self.round_read_ns,
            Access::Write => self.round_write_ns,
        };
        let (mut first_start, mut last_end) = (u64::MAX, ready_ns);
        for _ in 0..rounds {
            let start = self.banks[0].reserve(now_ns, ready_ns, ns);
            first_start = first_start.min(start);
            last_end = last_end.max(start + ns);
        }
        // The other banks of the array, booked alike.
        self.lockstep_busy_ns += rounds * ns * (self.banks.len() as u64 - 1);
        Some((first_start.min(last_end), last_end))
    }

    /// The access if it is whole rows inside one stripe of a controller in lockstep whose
    /// banks they spread over evenly, with nothing for start-gap to record (a read, or no wear
    /// levelling): a dram or Moneta read of 512 B. `add_piece` and `add_rows` would book the
    /// controller's first bank once for `rows / banks` rows at `ready_ns`, whatever line the
    /// rows are remapped to (the lockstep case with no leftover rows); this books it directly.
    /// Returns `None`, having changed nothing, for any other access.
    #[inline]
    fn access_whole_rows(
        &mut self,
        now_ns: u64,
        ready_ns: u64,
        access: Access,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Option<(u64, u64)> {
        let in_stripe = offset_bytes & (self.stripe_bytes - 1);
        let banks = u64::from(self.banks_per_controller);
        if !self.stripes_spread_evenly
            || !banks.is_power_of_two()
            || (access == Access::Write && self.wear.is_some())
            || (offset_bytes | len_bytes) & (self.row_bytes - 1) != 0
            || in_stripe + len_bytes > self.stripe_bytes
        {
            return None;
        }
        let rows = len_bytes >> self.row_bytes.trailing_zeros();
        if rows & (banks - 1) != 0 {
            return None;
        }
        let stripe = offset_bytes >> self.stripe_bytes.trailing_zeros();
        let controllers = u64::from(self.controllers);
        let controller = if controllers.is_power_of_two() {
            stripe & (controllers - 1)
        } else {
            stripe % controllers
        } as usize;
        if !self.lockstep[controller] {
            return None;
        }
        #[cfg(debug_assertions)]
        self.check_lockstep(controller as u32);
        let row_ns = match access {
            Access::Read => self.row_read_ns,
            Access::Write => self.row_write_ns,
        };
        let ns = (rows >> banks.trailing_zeros()) * row_ns;
        let bank = controller * self.banks_per_controller as usize;
        let start = self.banks[bank].reserve(now_ns, ready_ns, ns);
        self.lockstep_busy_ns += ns * (banks - 1);
        Some((start, start + ns))
    }

    /// Ends `controllers_lockstep`: every controller's first bank takes the shared schedule
    /// (each controller's banks stay in lockstep with its first).
    fn part_controllers(&mut self) {
        #[cfg(debug_assertions)]
        self.check_controllers_lockstep();
        let banks = self.banks_per_controller as usize;
        for c in 1..self.controllers as usize {
            self.banks[c * banks] = self.banks[0].schedule_copy();
        }
        self.controllers_lockstep = false;
    }

    /// What lets the array in `controllers_lockstep` book only the first bank: every
    /// controller is in lockstep and no bank but the first was ever booked.
    #[cfg(debug_assertions)]
    fn check_controllers_lockstep(&self) {
        assert!(
            self.lockstep.iter().all(|&l| l),
            "controllers in lockstep with a controller whose banks parted: expected every \
             controller in lockstep, found {:?}",
            self.lockstep
        );
        let banks = self.banks_per_controller as usize;
        for (i, bank) in self.banks.iter().enumerate().skip(1) {
            assert!(
                bank.busy_until_ns() == 0 && bank.busy_ns_total() == 0,
                "bank {} of controller {} booked while in lockstep (the controllers' too): \
                 expected an untouched timeline",
                i % banks,
                i / banks
            );
        }
    }

    /// Checks one piece of an access against the address layout, computed directly from the
    /// piece's device address `global_bytes` rather than stepped as `access` does: the right
    /// controller and controller-local address for the striping, inside one stripe and one
    /// line, inside the controller's share of the capacity.
    #[cfg(debug_assertions)]
    fn check_piece(&self, global_bytes: u64, controller: u32, local_bytes: u64, len_bytes: u64) {
        let controllers = u64::from(self.controllers);
        let stripe = global_bytes / self.stripe_bytes;
        let in_stripe = global_bytes % self.stripe_bytes;
        assert_eq!(
            u64::from(controller),
            stripe % controllers,
            "address {global_bytes} on the wrong controller: expected stripe {stripe} mod \
             {controllers}, found controller {controller}"
        );
        assert_eq!(
            local_bytes,
            stripe / controllers * self.stripe_bytes + in_stripe,
            "address {global_bytes} at the wrong controller-local address: expected stripe \
             {stripe} / {controllers} x {} + {in_stripe}, found {local_bytes}",
            self.stripe_bytes
        );
        assert!(
            len_bytes > 0,
            "empty piece at address {global_bytes}: expected len > 0, found 0"
        );
        assert!(
            in_stripe + len_bytes <= self.stripe_bytes,
            "piece crosses a stripe: expected {in_stripe} + {len_bytes} <= {}",
            self.stripe_bytes
        );
        let in_line = local_bytes % self.line_bytes;
        assert!(
            in_line + len_bytes <= self.line_bytes,
            "piece crosses a line: expected {in_line} + {len_bytes} <= {}",
            self.line_bytes
        );
        let per_controller = self.capacity_bytes / controllers;
        assert!(
            local_bytes + len_bytes <= per_controller,
            "piece past the controller's end: expected {local_bytes} + {len_bytes} <= \
             {per_controller}"
        );
    }

    #[inline]
    fn add_piece(&mut self, controller: u32, local_bytes: u64, len_bytes: u64, access: Access) {
        if self.disks.is_some() {
            self.add_disk_piece(controller, local_bytes, len_bytes, access);
            return;
        }
        let line_shift = self.line_bytes.trailing_zeros();
        let row_shift = self.row_bytes.trailing_zeros();
        let logical_line = local_bytes >> line_shift;
        let mut gap_move = None;
        let physical_line = match &mut self.wear {
            Some(wear) => {
                let sg = &mut wear[controller as usize];
                let p = sg.physical(logical_line as u32);
                if access == Access::Write {
                    gap_move = sg.record_write(logical_line as u32);
                }
                u64::from(p)
            }
            None => logical_line,
        };
        let in_line = local_bytes & (self.line_bytes - 1);
        let line_first_row = physical_line * self.rows_per_line;
        let first_row = line_first_row + (in_line >> row_shift);
        let last_row = line_first_row + ((in_line + len_bytes - 1) >> row_shift);
        #[cfg(debug_assertions)]
        self.debug_check_piece(logical_line, physical_line, first_row, last_row, gap_move);
        self.add_rows(
            controller,
            first_row,
            last_row - first_row + 1,
            len_bytes,
            access,
        );
        if let Some(mv) = gap_move {
            // The copy reads the source line and writes it into the gap.
            let rows = self.rows_per_line;
            self.add_rows(
                controller,
                u64::from(mv.from) * rows,
                rows,
                self.line_bytes,
                Access::Read,
            );
            self.add_rows(
                controller,
                u64::from(mv.to) * rows,
                rows,
                self.line_bytes,
                Access::Write,
            );
        }
    }

    /// A piece on a hard disk (`[memory.disk]`), one per controller: booked strictly in order.
    fn add_disk_piece(
        &mut self,
        controller: u32,
        local_bytes: u64,
        len_bytes: u64,
        access: Access,
    ) {
        let disks = self.disks.as_mut().expect("a memory of disks");
        // A disk serves accesses one after another in the order they are booked: its
        // head position and the platter's angle depend on what it did just before, so no
        // booking may fill a gap before an earlier one.
        let b = &mut self.booking;
        let bank = &mut self.banks[controller as usize];
        let start = b.ready_ns.max(bank.busy_until_ns());
        let overhead = match access {
            Access::Read => self.read_latency_ns,
            Access::Write => self.write_latency_ns,
        };
        let ns = disks[controller as usize].service_ns(start, overhead, local_bytes, len_bytes);
        let booked = bank.reserve(b.now_ns, start, ns);
        debug_assert_eq!(
            booked, start,
            "a disk booking filled a gap: expected it to start after the last one, at \
             {start}, found {booked}"
        );
        let start = booked;
        b.first_start_ns = b.first_start_ns.min(start);
        b.last_end_ns = b.last_end_ns.max(start + ns);
    }

    /// What a piece's mapping must give (debug builds): its logical and physical lines inside
    /// the controller (start-gap keeps one spare), its rows in order and inside its line, a
    /// gap move's lines inside too.
    #[cfg(debug_assertions)]
    fn debug_check_piece(
        &self,
        logical_line: u64,
        physical_line: u64,
        first_row: u64,
        last_row: u64,
        gap_move: Option<crate::wear::GapMove>,
    ) {
        let line_first_row = physical_line * self.rows_per_line;
        // Start-gap keeps one spare physical line per controller.
        let lines = self.capacity_bytes / u64::from(self.controllers) / self.line_bytes;
        let physical_lines = lines + u64::from(self.wear.is_some());
        assert!(
            logical_line < lines,
            "logical line out of range: expected < {lines}, found {logical_line}"
        );
        assert!(
            physical_line < physical_lines,
            "start-gap mapped line {logical_line} out of range: expected < \
             {physical_lines}, found {physical_line}"
        );
        assert!(
            first_row <= last_row,
            "piece's rows reversed: expected first row {first_row} <= last row {last_row}"
        );
        assert!(
            last_row < line_first_row + self.rows_per_line,
            "piece's rows leave its line: expected last row < {}, found {last_row}",
            line_first_row + self.rows_per_line
        );
        if let Some(mv) = gap_move {
            assert!(
                u64::from(mv.from) < physical_lines,
                "gap move from a line out of range: expected < {physical_lines}, found {mv:?}"
            );
            assert!(
                u64::from(mv.to) < physical_lines,
                "gap move to a line out of range: expected < {physical_lines}, found {mv:?}"
            );
        }
    }

    /// Spreads `rows` consecutive rows over the controller's banks (row r on bank r mod banks).
    #[inline]
    fn add_rows(&mut self, controller: u32, first_row: u64, rows: u64, bytes: u64, access: Access) {
        let banks = u64::from(self.banks_per_controller);
        let base = (controller * self.banks_per_controller) as usize;
        // Divisions are a large share of the simulator's time; bank counts are usually powers
        // of two and pieces usually whole rows, so take the shift-and-mask path when we can.
        let (per_bank, extra, first_bank) = if banks.is_power_of_two() {
            let shift = banks.trailing_zeros();
            (rows >> shift, rows & (banks - 1), first_row & (banks - 1))
        } else {
            (rows / banks, rows % banks, first_row % banks)
        };
        #[cfg(debug_assertions)]
        self.debug_check_rows(controller, rows, bytes, (per_bank, extra, first_bank));
        let (bytes_per_row, row_ns) = self.row_cost(rows, bytes, access);
        if self.lockstep[controller as usize] {
            #[cfg(debug_assertions)]
            self.check_lockstep(controller);
            if extra == 0 {
                // Every bank gets `per_bank` rows, ready at the same time: the banks' timelines
                // stay identical, so booking the first one is exact and 1/banks of the work.
                let ns = per_bank * row_ns;
                let b = &mut self.booking;
                let start = self.banks[base].reserve(b.now_ns, b.ready_ns, ns);
                b.first_start_ns = b.first_start_ns.min(start);
                b.last_end_ns = b.last_end_ns.max(start + ns);
                self.lockstep_busy_ns += ns * (banks - 1);
                return;
            }
            // Uneven work: the banks part ways here; give each the shared schedule.
            self.part_banks(controller);
        }
        let erase = access == Access::Write && self.erase_latency_ns > 0;
        let mut bank = first_bank as usize;
        for i in 0..banks.min(rows) {
            let n = per_bank + u64::from(i < extra);
            let mut ns = n * row_ns;
            let index = base + bank;
            debug_assert!(
                bank < banks as usize,
                "bank out of range: expected < {banks}, found {bank}"
            );
            if erase {
                ns += self.erase_ns(index, (n * bytes_per_row).min(bytes));
            }
            // Booking each piece as it comes is the same as summing per bank first: two
            // bookings ready at the same time land back to back (or fill gaps, which is better).
            let b = &mut self.booking;
            let start = self.banks[index].reserve(b.now_ns, b.ready_ns, ns);
            b.first_start_ns = b.first_start_ns.min(start);
            b.last_end_ns = b.last_end_ns.max(start + ns);
            bank += 1;
            if bank as u64 == banks {
                bank = 0;
            }
        }
    }

    /// Ends a controller's lockstep: each of its banks takes the first bank's schedule.
    #[inline]
    fn part_banks(&mut self, controller: u32) {
        let banks = self.banks_per_controller as usize;
        let base = (controller * self.banks_per_controller) as usize;
        for i in 1..banks {
            self.banks[base + i] = self.banks[base].schedule_copy();
        }
        self.lockstep[controller as usize] = false;
        debug_assert!(
            self.banks[base..base + banks]
                .iter()
                .all(|t| t.busy_until_ns() == self.banks[base].busy_until_ns()),
            "banks parting from lockstep do not share the first bank's schedule: expected \
             every bank busy until {}",
            self.banks[base].busy_until_ns()
        );
    }

    /// Counts `bytes` more written to bank `index` since its last erase; returns the time of
    /// the erases that filling its erase blocks costs (each counted in `erases`).
    #[inline]
    fn erase_ns(&mut self, index: usize, bytes: u64) -> u64 {
        let mut ns = 0;
        let written = &mut self.bank_bytes_since_erase[index];
        *written += bytes;
        while *written >= self.erase_block_bytes {
            *written -= self.erase_block_bytes;
            ns += self.erase_latency_ns;
            self.erases += 1;
        }
        debug_assert!(
            *written < self.erase_block_bytes,
            "bank written past an erase block without erasing: expected < {}, found {}",
            self.erase_block_bytes,
            *written
        );
        ns
    }

    /// What each of `rows` rows moving `bytes` costs a bank: its bytes and its time (one
    /// access latency plus the bytes at the bank's rate; every row the same).
    #[inline(always)]
    fn row_cost(&self, rows: u64, bytes: u64, access: Access) -> (u64, u64) {
        if bytes == rows * self.row_bytes {
            let ns = match access {
                Access::Read => self.row_read_ns,
                Access::Write => self.row_write_ns,
            };
            (self.row_bytes, ns)
        } else {
            let latency = match access {
                Access::Read => self.read_latency_ns,
                Access::Write => self.write_latency_ns,
            };
            let per_row = bytes.div_ceil(rows);
            (
                per_row,
                latency + bytes_to_ns(per_row, self.bank_fs_per_byte),
            )
        }
    }

    /// What `add_rows` relies on (debug builds): a controller in range, rows that hold the
    /// bytes, and their split over the banks (`per bank x banks + extra = rows`).
    #[cfg(debug_assertions)]
    fn debug_check_rows(&self, controller: u32, rows: u64, bytes: u64, split: (u64, u64, u64)) {
        let (per_bank, extra, first_bank) = split;
        let banks = u64::from(self.banks_per_controller);
        debug_assert!(
            controller < self.controllers,
            "controller out of range: expected < {}, found {controller}",
            self.controllers
        );
        debug_assert!(
            rows >= 1,
            "no rows to book: expected rows >= 1, found 0 ({bytes} bytes)"
        );
        debug_assert!(bytes >= 1, "no bytes to book: expected bytes >= 1, found 0");
        debug_assert!(
            bytes <= rows * self.row_bytes,
            "bytes do not fit their rows: expected bytes <= {rows} x {}, found {bytes}",
            self.row_bytes
        );
        debug_assert_eq!(
            per_bank * banks + extra,
            rows,
            "rows split wrongly over {banks} banks: expected per bank x banks + extra = rows, \
         found per bank {per_bank}, extra {extra}"
        );
        debug_assert!(
            extra < banks,
            "leftover rows out of range: expected < {banks}, found {extra}"
        );
        debug_assert!(
            first_bank < banks,
            "first bank out of range: expected < {banks}, found {first_bank}"
        );
    }

    /// What lets a lockstep controller book only its first bank: the media has no erase
    /// (whose per-bank counters would diverge) and the other banks were never booked, so the
    /// first bank's timeline is every bank's (they get a copy of it when they part).
    #[cfg(debug_assertions)]
    fn check_lockstep(&self, controller: u32) {
        assert_eq!(
            self.erase_latency_ns, 0,
            "controller {controller} in lockstep on media with erases: expected erase latency \
             0, found {}",
            self.erase_latency_ns
        );
        let base = (controller * self.banks_per_controller) as usize;
        for i in 1..self.banks_per_controller as usize {
            let bank = &self.banks[base + i];
            assert_eq!(
                bank.busy_until_ns(),
                0,
                "bank {i} of controller {controller} booked while in lockstep: expected an \
                 untouched timeline, found one busy until the time shown"
            );
            assert_eq!(
                bank.busy_ns_total(),
                0,
                "bank {i} of controller {controller} booked while in lockstep: expected no busy \
                 time, found the time shown"
            );
        }
    }

    pub fn wear_stats(&self) -> Option<WearStats> {
        let wear = self.wear.as_ref()?;
        let total: u64 = wear.iter().map(StartGap::writes_total).sum();
        let lines: u64 = wear.iter().map(StartGap::physical_lines).sum();
        Some(WearStats {
            line_writes_max: wear
                .iter()
                .map(|w| u64::from(w.write_count_max()))
                .max()
                .unwrap_or(0),
            line_writes_mean: total as f64 / lines as f64,
            gap_moves: wear.iter().map(StartGap::gap_moves).sum(),
        })
    }

    /// Busy time summed over all banks, and the bank count (for utilisation).
    pub fn bank_busy_ns_total(&self) -> (u64, usize) {
        (
            self.banks.iter().map(Timeline::busy_ns_total).sum::<u64>() + self.lockstep_busy_ns,
            self.banks.len(),
        )
    }

    pub fn erases(&self) -> u64 {
        self.erases
    }

    /// Deallocates `[offset, offset + len)`: the pages wholly inside it, on flash behind an
    /// FTL (`FlashTranslation::deallocate`); nothing on other memories, which keep no map.
    /// Returns the pages unmapped.
    pub fn deallocate(&mut self, offset_bytes: u64, len_bytes: u64) -> u64 {
        self.ftl
            .as_deref_mut()
            .map_or(0, |t| t.deallocate(offset_bytes, len_bytes))
    }

    /// When a flush issued at `now_ns` is done: flash behind an FTL with a write buffer
    /// waits for every buffered page's program; any other memory is done at once.
    pub fn drained_ns(&self, now_ns: u64) -> u64 {
        self.ftl.as_deref().map_or(now_ns, |t| t.drained_ns(now_ns))
    }

    /// Whether the FTL has deferred map moves left to run (`Ftl::run_deferred`).
    pub fn has_deferred(&self) -> bool {
        self.ftl.as_ref().is_some_and(|t| t.has_deferred())
    }

    /// Pages whose map entries the FTL has moved so far (0 without one).
    pub fn map_moves(&self) -> u64 {
        self.ftl.as_ref().map_or(0, |t| t.map_moves())
    }

    /// Runs up to `pages` of the FTL's deferred map moves; returns whether any are left.
    pub fn run_deferred(&mut self, pages: u32) -> bool {
        self.ftl.as_mut().is_some_and(|t| t.run_deferred(pages))
    }

    /// What the FTL did, if the memory has one.
    pub fn ftl_stats(&self) -> Option<FtlStats> {
        self.ftl.as_ref().map(|t| t.stats())
    }

    /// Whether the FTL's maps (if any) are within `ftl.map_budget_bytes`; why not otherwise.
    pub fn check_ftl_map_budget(&self) -> Result<(), String> {
        self.ftl.as_ref().map_or(Ok(()), |t| t.check_map_budget())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(controllers: u32, banks: u32, wear: bool) -> Memory {
        memory_of(1 << 24, controllers, banks, wear)
    }

    fn memory_of(capacity_bytes: u64, controllers: u32, banks: u32, wear: bool) -> Memory {
        let cfg = MemoryConfig {
            technology: "test".into(),
            capacity_bytes,
            controllers,
            banks_per_controller: banks,
            stripe_bytes: 1024,
            row_bytes: 64,
            read_latency_ns: 100,
            write_latency_ns: 300,
            bank_bandwidth_bytes_per_s: 1_000_000_000,
            erase_latency_ns: 0,
            erase_block_bytes: 0,
            disk: None,
        };
        Memory::new(
            &cfg,
            &WearConfig {
                enabled: wear,
                line_bytes: 4096,
                gap_interval_writes: 100,
            },
            &nvarray_ftl::FtlConfig::default(),
        )
    }

    /// Booking a controller's banks in lockstep gives exactly what booking each bank gives,
    /// including after the banks part ways: while a controller is in lockstep, every one of
    /// its banks booked one by one has the first bank's timeline; once they part, each bank
    /// has its own twin's. The same holds for the controllers in lockstep (whole-stripe
    /// accesses, as many stripes on each): every bank has the first controller's first
    /// bank's timeline until they part.
    #[test]
    fn lockstep_booking_is_exact() {
        use proptest::prelude::*;
        // Some accesses are whole rounds of stripes (1 KiB on each controller from a stripe
        // boundary: the controllers' lockstep); the others are at 64-byte granularity, so
        // some pieces split unevenly over the banks.
        let access = prop_oneof![
            (
                0u64..2000,
                0u64..3000,
                any::<bool>(),
                0u64..4096,
                1u64..40,
                Just(false)
            ),
            (
                0u64..2000,
                0u64..3000,
                any::<bool>(),
                0u64..64,
                1u64..4,
                Just(true)
            ),
        ];
        let accesses = proptest::collection::vec(access, 1..150);
        let shape = (
            1u32..6,
            prop_oneof![Just(2u32), Just(4), 2u32..7],
            any::<bool>(),
        );
        proptest!(ProptestConfig::with_cases(300), |((controllers, banks, wear) in shape, ops in accesses)| {
            let capacity = u64::from(controllers) << 22;
            let mut fast = memory_of(capacity, controllers, banks, wear);
            let mut exact = memory_of(capacity, controllers, banks, wear);
            exact.lockstep.iter_mut().for_each(|l| *l = false);
            exact.controllers_lockstep = false;
            let mut now = 0;
            for (advance, delay, read, block, blocks, whole_stripes) in ops {
                now += advance;
                let access = if read { Access::Read } else { Access::Write };
                let (offset, len) = if whole_stripes {
                    (block * 1024, blocks * 1024 * u64::from(controllers))
                } else {
                    (block * 64, blocks * 64)
                };
                if offset + len > capacity {
                    continue;
                }
                let a = fast.access(now, now + delay, access, offset, len);
                let b = exact.access(now, now + delay, access, offset, len);
                prop_assert_eq!(a, b);
                for c in 0..controllers as usize {
                    let base = c * banks as usize;
                    for i in 0..banks as usize {
                        let twin = if fast.controllers_lockstep {
                            0
                        } else if fast.lockstep[c] {
                            base
                        } else {
                            base + i
                        };
                        // What is still booked from `now` on: bookings that ended may be
                        // forgotten at different times by the two (forgetting is lazy).
                        let future = |t: &Timeline| -> Vec<(u64, u64)> {
                            t.intervals().into_iter().filter(|&(_, e)| e > now).collect()
                        };
                        prop_assert_eq!(
                            future(&fast.banks[twin]),
                            future(&exact.banks[base + i]),
                            "controller {} bank {} (lockstep {})", c, i, fast.lockstep[c]
                        );
                    }
                }
            }
            prop_assert_eq!(fast.bank_busy_ns_total(), exact.bank_busy_ns_total());
        });
    }

    #[test]
    fn a_read_spreads_over_controllers_and_banks() {
        // 4 KiB over 4 controllers of 4 banks: 1 KiB = 16 rows per controller, 4 per bank,
        // each 100 ns + 64 ns of transfer.
        let mut m = memory(4, 4, false);
        assert_eq!(m.access(0, 0, Access::Read, 0, 4096), (0, 4 * 164));
        // One controller with one bank does all 64 rows in sequence.
        let mut m = memory(1, 1, false);
        assert_eq!(m.access(0, 0, Access::Read, 0, 4096), (0, 64 * 164));
    }

    #[test]
    fn accesses_to_the_same_bank_queue() {
        let mut m = memory(1, 1, false);
        let (_, end1) = m.access(0, 0, Access::Write, 0, 64);
        let (start2, _) = m.access(0, 0, Access::Write, 64, 64);
        assert_eq!(end1, 300 + 64);
        assert_eq!(start2, end1);
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "media access past the end: expected offset + len <= 16777216")]
    fn an_access_past_the_capacity_is_caught() {
        memory(4, 4, false).access(0, 0, Access::Read, (1 << 24) - 64, 128);
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "empty media access")]
    fn an_empty_access_is_caught() {
        memory(4, 4, false).access(0, 0, Access::Read, 0, 0);
    }

    /// Address 1024 is stripe 1, which lives on controller 1 of 4.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "address 1024 on the wrong controller")]
    fn a_piece_on_the_wrong_controller_is_caught() {
        memory(4, 4, false).check_piece(1024, 0, 0, 64);
    }

    /// A bank that a lockstep controller's first bank stands for must not carry bookings of
    /// its own: they would be lost when the banks part.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "bank 1 of controller 0 booked while in lockstep")]
    fn a_bank_booked_behind_lockstep_is_caught() {
        read_after_booking_bank(1);
    }

    /// ... nor a bank of another controller while the controllers are in lockstep.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "bank 0 of controller 1 booked while in lockstep")]
    fn a_controller_booked_behind_the_controllers_lockstep_is_caught() {
        read_after_booking_bank(4);
    }

    /// Books `bank` of 4 controllers x 4 banks directly, then reads 4 KiB (every controller).
    #[cfg(debug_assertions)]
    fn read_after_booking_bank(bank: usize) {
        let mut m = memory(4, 4, false);
        m.banks[bank].reserve(0, 0, 10);
        m.access(0, 0, Access::Read, 0, 4096);
    }

    /// Whole rounds of stripes keep the controllers in lockstep; an access to one controller
    /// parts them, and each controller's first bank carries on from the shared schedule.
    #[test]
    fn whole_stripes_keep_the_controllers_in_lockstep_until_one_is_not() {
        // 164 ns a row (`memory`), 4 rows per bank for each 1 KiB stripe.
        let stripe_ns = 4 * 164;
        let mut m = memory(4, 4, false);
        assert_eq!(m.access(0, 0, Access::Read, 0, 4096), (0, stripe_ns));
        assert_eq!(
            m.access(0, 0, Access::Read, 8192, 8192),
            (stripe_ns, 3 * stripe_ns)
        );
        assert!(m.controllers_lockstep);
        assert_eq!(m.bank_busy_ns_total(), (3 * stripe_ns * 16, 16));
        // One stripe, on controller 1: its banks queue behind the shared schedule.
        assert_eq!(
            m.access(0, 0, Access::Read, 1024, 1024),
            (3 * stripe_ns, 4 * stripe_ns)
        );
        assert!(!m.controllers_lockstep);
        assert_eq!(m.banks[4].busy_until_ns(), 4 * stripe_ns);
        assert_eq!(m.banks[8].busy_until_ns(), 3 * stripe_ns);
        assert_eq!(m.banks[0].busy_until_ns(), 3 * stripe_ns);
        assert_eq!(
            m.bank_busy_ns_total(),
            (4 * stripe_ns * 16 - 3 * stripe_ns * 4, 16)
        );
    }

    #[test]
    fn wear_levelling_counts_writes_and_moves_the_gap() {
        let mut m = memory(1, 4, true);
        for _ in 0..1000 {
            m.access(0, 0, Access::Write, 0, 512);
        }
        let w = m.wear_stats().unwrap();
        assert_eq!(w.gap_moves, 10, "one move per 100 writes");
        assert!(w.line_writes_max <= 1000);
    }
}
