//! `nvarray-pm`: a transactional, virtualised NVM library shared between processes, after
//! vNVML (Chou, Jung, Reddy, Gratz, Voigt, 2019; `reference/seeds/vnvml-2019-slides.txt`).
//!
//! A pool is a backing file of any size on ordinary storage, read through a shared mapping
//! (the kernel's page cache is the DRAM read cache) and changed only by transactions:
//!
//! ```no_run
//! use nvarray_pm::{Pool, PoolOptions};
//! let pool = Pool::open("/tmp/data.pool", 1 << 30, &PoolOptions::default())?;
//! let mut tx = pool.begin()?;
//! tx.write(0, b"hello")?;
//! tx.write(4096, &42u64.to_le_bytes())?;
//! tx.commit()?; // durable and visible to every process when this returns
//! let mut buf = [0u8; 5];
//! pool.read(0, &mut buf)?;
//! assert_eq!(&buf, b"hello");
//! # Ok::<(), nvarray_pm::PmError>(())
//! ```
//!
//! Tiers (slides 12–17): commits append a redo record to a log on the NVM tier (a directory
//! on /dev/shm or a DAX file system) behind a persist barrier that costs the configured
//! memory technology's write latency (`nvarray-model` presets); an applier thread moves
//! committed records into an NVM write cache; a write-back thread writes dirty cache pages to
//! the backing file when more than 30 % are dirty. So the pool can be far larger than the NVM.
//!
//! The NVM tier of a pool (its *state*) is sized to the pool, exists while the pool is open
//! or needs recovery, and belongs to the pool's file, not its path (`file_identity`): a crashed
//! pool's commits are never applied to another file. `list_state_files` and
//! `remove_state_file` find and remove the states no pool needs (`nvarray pm list|clean`).
//!
//! Isolation, recovery and multi-process rules are on `Pool`; the C ABI (the seed's
//! `nv_allocate`, `nv_txbegin`, `nv_write`, `nv_commit`, `nv_abort`, `nv_free`) is in `ffi`
//! with its header in `include/nvarray_pm.h`. `bench` is the harness behind `nvarray pm-bench`
//! (transactions per second, vNVML's page microbenchmark, YCSB against unlogged writes).

mod append;
mod background;
pub mod bench;
mod cache;
mod coord;
pub mod error;
pub mod ffi;
pub mod ffi_sim;
mod file_identity;
mod identity;
mod layout;
mod log;
mod media;
pub mod options;
mod pool;
mod pool_state;
mod recovery;
mod reports;
pub mod sim;
mod sim_session;
mod space;
mod state_files;
mod state_key;
mod state_names;
mod tx;

pub use error::{PmError, Result};
pub use identity::Identity;
pub use layout::PAGE;
pub use options::PoolOptions;
pub use pool::{nvm_file_path, Pool, MAX_POOL};
pub use reports::{RecoveryReport, Stats};
pub use state_files::{list_state_files, remove_state_file, state_file, StateFile, StateStatus};
pub use tx::Tx;
