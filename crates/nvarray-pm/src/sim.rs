//! Simulated persistence, for crash tests: both tiers live in memory, and the world records
//! which bytes are durable.
//!
//! * NVM tier, per 64-byte line: a store leaves the line *pending*; `flush` marks it; `fence`
//!   makes every flushed line durable with its content at that instant.
//! * Storage tier, per 4 KiB page: a store leaves the page pending; a sync makes it durable.
//!
//! Every write, flush, fence and sync is one *operation*. At the chosen operation the world
//! cuts power: it keeps every durable unit and, for each pending one, flips a seeded coin to
//! keep its current content or its last durable content (a line or page the hardware may or
//! may not have written back on its own); with `tear_lines`, a pending NVM line may also be
//! torn, any mix of its old and new 8-byte words. The pool keeps running afterwards; the test reads
//! the images that were taken at the crash and reopens a pool over them.

use std::collections::BTreeSet;
use std::sync::Mutex;

use memmap2::MmapMut;

/// Cache-line size of the persistence model: the NVM tier's unit of flush and durability.
pub const LINE: usize = 64;

/// Which tier a media region is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    Nvm,
    Storage,
}

impl Tier {
    fn index(self) -> usize {
        self as usize
    }
    fn unit(self) -> usize {
        match self {
            Tier::Nvm => LINE,
            Tier::Storage => 4096,
        }
    }
}

/// The images of both tiers at the moment power was cut.
#[derive(Clone)]
pub struct CrashImage {
    pub nvm: Vec<u8>,
    pub storage: Vec<u8>,
}

pub struct SimWorld {
    regions: [(usize, usize); 2],
    // Keeps the two regions alive; never touched after construction except through `regions`.
    _maps: [MmapMut; 2],
    state: Mutex<State>,
}

struct State {
    ops: u64,
    crash_at: Option<u64>,
    rng: u64,
    durable: [Vec<u8>; 2],
    pending: [BTreeSet<usize>; 2],
    flushed: [BTreeSet<usize>; 2],
    crash: Option<CrashImage>,
    /// Whether a pending NVM line may also be torn (`tear_lines`).
    tear: bool,
}

impl SimWorld {
    /// A world whose tiers start as `nvm` and `storage` (both durable), cutting power before
    /// operation `crash_at` (never if `None`). `seed` drives the keep-or-drop coin.
    pub fn new(nvm: &[u8], storage: &[u8], crash_at: Option<u64>, seed: u64) -> SimWorld {
        let mut maps = [anon(nvm), anon(storage)];
        let regions = [
            (maps[0].as_mut_ptr() as usize, maps[0].len()),
            (maps[1].as_mut_ptr() as usize, maps[1].len()),
        ];
        SimWorld {
            regions,
            _maps: maps,
            state: Mutex::new(State {
                ops: 0,
                crash_at,
                rng: seed ^ 0x9e37_79b9_7f4a_7c15,
                durable: [nvm.to_vec(), storage.to_vec()],
                pending: Default::default(),
                flushed: Default::default(),
                crash: None,
                tear: false,
            }),
        }
    }

    pub(crate) fn region(&self, tier: Tier) -> (*mut u8, usize) {
        let (base, len) = self.regions[tier.index()];
        (base as *mut u8, len)
    }

    fn current(&self, tier: Tier) -> &[u8] {
        let (base, len) = self.regions[tier.index()];
        // SAFETY: the region is owned by `_maps` for the life of `self`; the crash tests are
        // single-threaded, so nothing writes it while this slice is alive.
        unsafe { std::slice::from_raw_parts(base as *const u8, len) }
    }

    /// Cuts power before operation `at` (counted from the world's creation).
    /// Lets a pending NVM line be torn at the crash, any mix of its old and new 8-byte words,
    /// as the CPU guarantees only 8-byte stores reach NVM whole (pmreorder's torn-write
    /// mode). Off unless asked for; the crash tests ask for it.
    pub fn tear_lines(&self, on: bool) {
        self.lock().tear = on;
    }

    pub fn arm(&self, at: u64) {
        self.lock().crash_at = Some(at);
    }

    /// Operations performed so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// The images taken when power was cut, if it has been.
    pub fn crash_image(&self) -> Option<CrashImage> {
        self.lock().crash.clone()
    }

    pub fn crashed(&self) -> bool {
        self.lock().crash.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one operation and cuts power first if this is the chosen one.
    pub(crate) fn before_op(&self) {
        let mut s = self.lock();
        if s.crash.is_none() && s.crash_at == Some(s.ops) {
            let image = CrashImage {
                nvm: self.image(&mut s, Tier::Nvm),
                storage: self.image(&mut s, Tier::Storage),
            };
            s.crash = Some(image);
        }
        s.ops += 1;
    }

    fn image(&self, s: &mut State, tier: Tier) -> Vec<u8> {
        let t = tier.index();
        let unit = tier.unit();
        let mut img = s.durable[t].clone();
        let current = self.current(tier);
        let pending: Vec<usize> = s.pending[t].iter().copied().collect();
        for u in pending {
            let range = u * unit..((u + 1) * unit).min(img.len());
            if next_coin(&mut s.rng) {
                img[range.clone()].copy_from_slice(&current[range]);
            } else if s.tear && tier == Tier::Nvm && next_coin(&mut s.rng) {
                // Torn (`tear_lines`).
                for w in range.step_by(8) {
                    if next_coin(&mut s.rng) {
                        img[w..w + 8].copy_from_slice(&current[w..w + 8]);
                    }
                }
            }
        }
        img
    }

    pub(crate) fn wrote(&self, tier: Tier, off: usize, len: usize) {
        let mut s = self.lock();
        let unit = tier.unit();
        for u in off / unit..(off + len).div_ceil(unit) {
            s.pending[tier.index()].insert(u);
            s.flushed[tier.index()].remove(&u);
        }
    }

    pub(crate) fn flushed(&self, tier: Tier, off: usize, len: usize) {
        let mut s = self.lock();
        let unit = tier.unit();
        let t = tier.index();
        for u in off / unit..(off + len).div_ceil(unit) {
            if s.pending[t].contains(&u) {
                s.flushed[t].insert(u);
            }
        }
    }

    pub(crate) fn fenced(&self, tier: Tier) {
        let mut s = self.lock();
        let t = tier.index();
        let unit = tier.unit();
        let flushed = std::mem::take(&mut s.flushed[t]);
        let current = self.current(tier);
        for u in flushed {
            let range = u * unit..((u + 1) * unit).min(current.len());
            s.durable[t][range.clone()].copy_from_slice(&current[range]);
            s.pending[t].remove(&u);
        }
    }
}

fn anon(content: &[u8]) -> MmapMut {
    let mut map = MmapMut::map_anon(content.len().max(1)).expect("anonymous mapping for a test");
    map[..content.len()].copy_from_slice(content);
    map
}

/// splitmix64, one bit of it: keep (true) or drop (false) a pending unit.
fn next_coin(state: &mut u64) -> bool {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) & 1 == 1
}
