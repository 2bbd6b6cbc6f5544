//! A page-mapping flash translation layer, as the timing model's flash devices run it: the
//! logical-to-physical map, lines (superblocks) written by a host and a collector write
//! pointer per placement handle, garbage collection from a free-line threshold with five
//! victim policies, TRIM, write-amplification counters, the mapping-table cache a drive keeps
//! in DRAM (`map_cache`), preconditioning, and the closed forms its write amplification is
//! checked against (`analysis`); and zoned namespaces' state machine (`zones`).
//!
//! It keeps state only; it knows no time. The timing model (`nvarray-model`'s memory) asks
//! it where each page goes and books the flash operations it reports (`GcWork`) on the dies.

pub mod analysis;
mod config;
mod counters;
mod error;
mod fluid;
mod ftl;
mod map_cache;
mod moves;
mod paged_map;
mod pool;
mod precondition;
mod steady_state;
mod victims;
mod work;
pub mod zones;

pub use config::{FtlConfig, Precondition, VictimPolicy};
pub use counters::{EraseSpread, FtlCounters, MapCounters};
pub use error::FtlError;
pub use ftl::{Ftl, Geometry};
pub use map_cache::{MapLookup, MAP_ENTRY_BYTES};
pub use precondition::{precondition, Preconditioned};
pub use steady_state::{one_die_ftl, steady_write_amplification, Workload};
pub use work::{DieWork, GcWork};
