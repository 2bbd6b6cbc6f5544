//! Where everything lives in the NVM-tier file, and its header.
//!
//! ```text
//! page 0     header (persistent): magic, version, sizes, backing file and its identity
//!            (`identity.rs`), log head, clean flag
//! page 1..   shared volatile area: locks, log tail, counters, process and transaction slots,
//!            page-lock table, cache index. Rebuilt by the first process to open the pool.
//! directory  16 bytes per cache page (persistent): page number and state, and which of its
//!            64-byte lines the cache holds
//! log        the redo log ring (persistent)
//! cache      the NVM write cache, 4 KiB pages (persistent)
//! ```
//!
//! Each shared word sits on its own cache line, so processes spinning on one do not slow
//! writers of another (the log lock and tail, always used together, share one). The commit
//! path touches as few shared lines as it can: its own transaction slot's line, the log
//! lock's, the durable prefix's and its page locks'; commit counters live in the slot.

use std::path::Path;

use crate::error::{PmError, Result};
use crate::identity::Identity;
use crate::media::Media;

pub const PAGE: usize = 4096;
/// Bytes of one write-cache directory entry: state word, line mask word.
pub const DIR_BYTES: usize = 16;
/// `NVPMPOOL`: also how a device recognises a state and refuses to overwrite it
/// (`nvarray-owner`).
pub const MAGIC: &[u8; 8] = nvarray_owner::STATE_MAGIC;
/// 2: the write cache holds lines, not whole pages (a line mask per directory entry).
/// 3: the header records the backing file's identity (`H_IDENTITY`).
pub const VERSION: u32 = 3;

/// Process slots per pool (processes attached at once).
pub const PROCS: usize = 64;
/// The number the process attaching acts under while it reaps a dead process's slot to take
/// it (`pool.rs`, `claim_process_slot`): a liveness byte of its own after the slots', so
/// that while it holds locks every other process sees their holder alive. Only one process
/// attaches at a time (the open lock).
pub const ATTACHER: usize = PROCS;
// `nvarray-owner` names a state's holder by these bytes: it must know every one.
const _: () = assert!(ATTACHER + 1 == nvarray_owner::STATE_LIVENESS_SLOTS as usize);
/// Transaction slots per pool (transactions open at once, over all processes).
pub const TX_SLOTS: usize = 256;
/// Page-lock words. Pages hash onto them; a collision only serialises more than needed.
pub const LOCK_WORDS: usize = 1 << 16;

// Header fields (page 0).
pub const H_MAGIC: usize = 0;
pub const H_VERSION: usize = 8;
pub const H_POOL_SIZE: usize = 16;
pub const H_LOG_SIZE: usize = 24;
pub const H_CACHE_PAGES: usize = 32;
pub const H_BACKING_ID: usize = 40;
pub const H_CRC: usize = 48;
pub const H_FIXED_END: usize = 56;
/// Oldest log position not yet applied to the write cache (persistent, 8-byte atomic).
pub const H_LOG_HEAD: usize = 64;
/// 1 after a clean close (everything written back), 0 while in use or after a crash.
pub const H_CLEAN: usize = 128;
/// The backing file's state generation this state was made with (`file_identity.rs`,
/// `next_generation`; 0: made before generations, or on a file system without extended
/// attributes). Written once, when the state is made; outside the checksum, so the states
/// of earlier versions of this layout stay readable.
pub const H_GENERATION: usize = 136;
/// The backing file's identity (`identity::Identity`): pool id (16 bytes), inode, birth time.
/// Written once, when the state is made; covered by the header checksum.
pub const H_IDENTITY: usize = 160;
pub const H_IDENTITY_END: usize = H_IDENTITY + 32;
pub const H_PATH_LEN: usize = 192;
pub const H_PATH: usize = 256;
pub const MAX_PATH: usize = PAGE - H_PATH;

// Volatile area (page 1 on), one line per word.
const V: usize = PAGE;
pub const V_LOG_LOCK: usize = V;
/// The log tail shares the lock's line on purpose: a reservation reads and writes both.
pub const V_LOG_TAIL: usize = V + 8;
pub const V_MAINT_LOCK: usize = V + 64;
pub const V_DIRTY: usize = V + 320;
pub const V_CLOCK_HAND: usize = V + 384;
/// The durable prefix of the log: every record below it is written, flushed and fenced
/// (`append.rs`). Only records below it are acknowledged or applied.
pub const V_LOG_DURABLE: usize = V + 448;
/// Shared counters, eight to a line (they are statistics, not coordination).
pub const V_COUNTERS: usize = V + 512;
pub const COUNTERS: usize = 16;
/// Process slots: state word, pid.
pub const V_PROCS: usize = V + 1024;
pub const PROC_BYTES: usize = 64;
/// Transaction slots, one line each; the fields are the `TX_*` word indices below.
pub const V_TX: usize = V_PROCS + PROCS * PROC_BYTES;
pub const TX_BYTES: usize = 64;
/// Owner process slot + 1 (0: free).
pub const TX_OWNER: usize = 0;
/// Start time in ns of `CLOCK_MONOTONIC`, one clock for every process (wait-die age; ties go
/// to the lower slot).
pub const TX_SEQ: usize = 1;
/// Log position + 1 of the record being committed (0 when none): `PoolState::tx_lsn`.
pub const TX_LSN: usize = 2;
/// The log bytes reserved for that record, padding included: start and end (end 0: none).
pub const TX_RES_START: usize = 3;
pub const TX_RES_END: usize = 4;
/// Commits and log bytes of the transactions run in this slot (summed by `Pool::stats`).
pub const TX_COMMITS: usize = 5;
pub const TX_BYTES_LOGGED: usize = 6;
/// Where the committer of that reservation is: `append::RES_*` (reserved, writing, fenced).
pub const TX_RES_STATE: usize = 7;
pub const V_LOCKS: usize = V_TX + TX_SLOTS * TX_BYTES;

// The log head and the clean flag change while the pool is in use, so they lie outside what the
// header checksum covers (`header_crc`: the fixed fields, the identity, the path).
const _: () = assert!(H_LOG_HEAD >= H_FIXED_END, "the log head is not checksummed");
const _: () = assert!(
    H_LOG_HEAD + 8 <= H_CLEAN,
    "the log head and clean flag are apart"
);
const _: () = assert!(
    H_CLEAN + 8 <= H_GENERATION && H_GENERATION + 8 <= H_IDENTITY,
    "the clean flag and the generation are not checksummed"
);
const _: () = assert!(
    H_IDENTITY_END <= H_PATH_LEN,
    "the identity ends before the path"
);
// Every shared coordination word on its own cache line (the log tail shares the log lock's on
// purpose); counters and slots after them, each table inside its own range.
const _: () = {
    let words = [
        V_LOG_LOCK,
        V_MAINT_LOCK,
        V_DIRTY,
        V_CLOCK_HAND,
        V_LOG_DURABLE,
        V_COUNTERS,
    ];
    let mut i = 0;
    while i < words.len() {
        assert!(
            words[i].is_multiple_of(64),
            "a shared word starts its own line"
        );
        i += 1;
    }
};
const _: () = assert!(
    V_LOG_DURABLE + 64 <= V_COUNTERS,
    "the prefix's line holds no counter"
);
const _: () = assert!(
    V_COUNTERS + COUNTERS * 8 <= V_PROCS,
    "counters end before the procs"
);
// `TX_RES_STATE` is the last field.
const _: () = assert!(TX_RES_STATE < TX_BYTES / 8, "a slot's fields fit its line");

/// Log record and cache geometry of one pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub pool_size_bytes: u64,
    pub log_size_bytes: u64,
    pub cache_pages: u64,
    /// Cache index slots (a power of two, at least twice the cache pages).
    pub index_slots: u64,
    pub index: usize,
    pub directory: usize,
    pub log: usize,
    pub cache: usize,
    pub file_len: usize,
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

impl Layout {
    pub fn new(pool_size_bytes: u64, log_size_bytes: u64, cache_size_bytes: u64) -> Layout {
        let log_size_bytes = log_size_bytes / PAGE as u64 * PAGE as u64;
        let cache_pages = cache_size_bytes / PAGE as u64;
        let index_slots = (cache_pages * 2).next_power_of_two();
        let index = V_LOCKS + LOCK_WORDS * 8;
        let directory = round_up(index + index_slots as usize * 8, PAGE);
        let log = round_up(directory + cache_pages as usize * DIR_BYTES, PAGE);
        let cache = log + log_size_bytes as usize;
        let file_len = cache + cache_pages as usize * PAGE;
        Layout {
            pool_size_bytes,
            log_size_bytes,
            cache_pages,
            index_slots,
            index,
            directory,
            log,
            cache,
            file_len,
        }
    }

    /// The layout recorded in an existing header; errors name `path`.
    pub fn from_header(nvm: &Media, path: &Path) -> Result<Layout> {
        let corrupt = |what: String| PmError::Corrupt {
            path: path.to_path_buf(),
            what,
        };
        if nvm.len() < 2 * PAGE {
            return Err(corrupt(format!(
                "only {} bytes: too short for an nvarray-pm NVM file",
                nvm.len()
            )));
        }
        let mut head = [0u8; H_FIXED_END];
        nvm.read(0, &mut head);
        if &head[H_MAGIC..H_MAGIC + 8] != MAGIC {
            return Err(corrupt("not an nvarray-pm NVM file (bad magic)".into()));
        }
        let word = |off: usize| u64::from_le_bytes(head[off..off + 8].try_into().expect("8"));
        let version = word(H_VERSION) as u32;
        if version != VERSION {
            return Err(PmError::WrongVersion {
                path: path.to_path_buf(),
                found: version,
                expected: VERSION,
            });
        }
        let stored_crc = word(H_CRC) as u32;
        if header_crc(nvm) != stored_crc {
            return Err(corrupt(
                "header checksum mismatch: the header is damaged".into(),
            ));
        }
        let l = Layout::new(
            word(H_POOL_SIZE),
            word(H_LOG_SIZE),
            word(H_CACHE_PAGES) * PAGE as u64,
        );
        if l.file_len != nvm.len() {
            return Err(corrupt(format!(
                "file is {} bytes but its header describes {} bytes",
                nvm.len(),
                l.file_len
            )));
        }
        Ok(l)
    }

    /// Writes a fresh header for this layout (persistent) and an empty log and cache, for the
    /// backing file at `backing`, whose key is `key` (`state_key.rs`) and identity `identity`,
    /// as its state of `generation` (`H_GENERATION`).
    pub fn format(
        &self,
        nvm: &Media,
        backing: &Path,
        key: &str,
        identity: &Identity,
        generation: u64,
    ) -> Result<()> {
        let path = backing.as_os_str().as_encoded_bytes();
        if path.len() > MAX_PATH {
            return Err(PmError::BadOption(format!(
                "backing path longer than {MAX_PATH} bytes"
            )));
        }
        let mut h = vec![0u8; PAGE];
        h[H_MAGIC..H_MAGIC + 8].copy_from_slice(MAGIC);
        let mut put = |off: usize, v: u64| h[off..off + 8].copy_from_slice(&v.to_le_bytes());
        put(H_VERSION, VERSION as u64);
        put(H_POOL_SIZE, self.pool_size_bytes);
        put(H_LOG_SIZE, self.log_size_bytes);
        put(H_CACHE_PAGES, self.cache_pages);
        put(H_BACKING_ID, backing_id(key));
        put(H_GENERATION, generation);
        put(H_IDENTITY + 16, identity.inode);
        put(H_IDENTITY + 24, identity.birth_ns);
        put(H_PATH_LEN, path.len() as u64);
        h[H_IDENTITY..H_IDENTITY + 16].copy_from_slice(&identity.pool_id.to_le_bytes());
        h[H_PATH..H_PATH + path.len()].copy_from_slice(path);
        nvm.write(0, &h);
        let crc = header_crc(nvm);
        nvm.store_word(H_CRC, crc as u64);
        nvm.persist(0, PAGE);
        Ok(())
    }
}

/// Checksum of the fixed header fields, the backing file's identity and its path.
pub fn header_crc(nvm: &Media) -> u32 {
    let mut fixed = [0u8; H_CRC];
    nvm.read(0, &mut fixed);
    let mut identity = [0u8; H_IDENTITY_END - H_IDENTITY];
    nvm.read(H_IDENTITY, &mut identity);
    let mut path = vec![0u8; MAX_PATH];
    nvm.read(H_PATH, &mut path);
    let mut len = [0u8; 8];
    nvm.read(H_PATH_LEN, &mut len);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&fixed), &identity);
    crc32c::crc32c_append(crc32c::crc32c_append(crc, &len), &path)
}

/// The backing file's identity recorded in the header.
pub fn identity(nvm: &Media) -> Identity {
    let mut id = [0u8; 16];
    nvm.read(H_IDENTITY, &mut id);
    Identity {
        pool_id: u128::from_le_bytes(id),
        inode: nvm.load_word(H_IDENTITY + 16),
        birth_ns: nvm.load_word(H_IDENTITY + 24),
    }
}

/// The backing path recorded in the header.
pub fn backing_path(nvm: &Media) -> String {
    let len = (nvm.load_word(H_PATH_LEN) as usize).min(MAX_PATH);
    let mut path = vec![0u8; len];
    nvm.read(H_PATH, &mut path);
    String::from_utf8_lossy(&path).into_owned()
}

/// FNV-1a of the backing file's key (`state_key.rs`; states made before it, of the canonical
/// backing path): names the NVM file and ties it to its backing file. (Written out because
/// std's hasher is not stable across Rust releases.)
pub fn backing_id(key: &str) -> u64 {
    key.as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        })
}
