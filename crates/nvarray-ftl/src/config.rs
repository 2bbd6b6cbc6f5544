//! The FTL's settings, as a device description's `[ftl]` section states them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How the garbage collector picks the line (superblock) it reclaims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VictimPolicy {
    /// The full line with the fewest valid pages (least copying now).
    #[default]
    Greedy,
    /// The line with the highest `(1 - u) * age / (1 + u)`, u its valid fraction and age the
    /// host writes since it filled (Rosenblum and Ousterhout's LFS cleaner, SOSP 1991).
    CostBenefit,
    /// A full line drawn uniformly at random.
    Random,
    /// The line that filled first (a log's tail: Desnoyers' FIFO/LRU).
    Fifo,
    /// The fewest valid pages among `d_choices` lines drawn at random (d-choices, as in
    /// Van Houdt, "A mean field model for a class of garbage collection algorithms in flash-based
    /// solid state drives", SIGMETRICS 2013).
    DChoice,
}

impl VictimPolicy {
    pub const ALL: [VictimPolicy; 5] = [
        VictimPolicy::Greedy,
        VictimPolicy::CostBenefit,
        VictimPolicy::Random,
        VictimPolicy::Fifo,
        VictimPolicy::DChoice,
    ];

    /// The name a description and the command line use.
    pub fn name(self) -> &'static str {
        match self {
            VictimPolicy::Greedy => "greedy",
            VictimPolicy::CostBenefit => "cost-benefit",
            VictimPolicy::Random => "random",
            VictimPolicy::Fifo => "fifo",
            VictimPolicy::DChoice => "d-choice",
        }
    }
}

/// The `[ftl]` section. Off by default: a device without it (or with `enabled = false`)
/// charges its media as an array of rows, and a flash device charges erases at a fixed rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FtlConfig {
    #[serde(default)]
    pub enabled: bool,
    /// The mapping unit: every `page_bytes` of the logical space maps to one flash page slot.
    #[serde(default = "default_page_bytes")]
    pub page_bytes: u32,
    /// Over-provisioning as `(physical - logical) / logical`: 0.07 is a 7 % spare area over
    /// the logical capacity (the report also prints the spare factor,
    /// `(physical - logical) / physical`).
    #[serde(default = "default_over_provisioning")]
    pub over_provisioning: f64,
    #[serde(default)]
    pub victim: VictimPolicy,
    /// Lines sampled by `victim = "d-choice"`.
    #[serde(default = "default_d_choices")]
    pub d_choices: u32,
    /// Background collection starts when this few lines are free: one victim per host write
    /// that finds the free lines at or below it, booked on the dies without holding that write.
    #[serde(default = "default_gc_background_free_lines")]
    pub gc_background_free_lines: u32,
    /// Forced collection: at or below this many free lines a host write waits until the
    /// collector has freed lines above it.
    #[serde(default = "default_gc_forced_free_lines")]
    pub gc_forced_free_lines: u32,
    /// Flexible Data Placement's reclaim unit handles: a host write names one (0 without
    /// placement) and each has its own open line; collected pages stay with their handle's
    /// lines (persistently isolated).
    #[serde(default = "one")]
    pub placement_handles: u32,
    /// The seed of the random and d-choice victim draws and of preconditioning's writes.
    #[serde(default = "one_u64")]
    pub seed: u64,
    /// What the device holds when a run starts: `none` (a new drive), `fill`, or `random:N`
    /// (the fill, then N drive-writes of uniform random pages); written untimed when the
    /// model is built (`nvarray bench --precondition`).
    #[serde(default)]
    pub precondition: Precondition,
    /// A DRAM write buffer in front of the flash, in bytes (0, the default: none). A write is
    /// acknowledged once its pages are in it; a flush (or a FUA write's flush) waits until
    /// every buffered page is programmed. A multiple of `page_bytes`.
    #[serde(default)]
    pub write_buffer_bytes: u64,
    /// The mapping-table cache in the drive's DRAM, in bytes (0, the default: the whole map
    /// is in DRAM and a lookup costs nothing). With one, the map lives in flash in translation
    /// pages of `page_bytes / 4` entries and the cache holds `map_cache_bytes / page_bytes` of
    /// them: a lookup that misses reads its translation page from flash first, and changed
    /// pages are written back (`map_cache.rs`). A multiple of `page_bytes`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub map_cache_bytes: u64,
    /// The most host memory the simulator's maps of this FTL may take, in bytes (default
    /// 8 GiB): preconditioning writes the map in bulk when page by page would not fit, and a
    /// run whose writes grow the maps past it stops with an error naming it. A limit of the
    /// machine running nvarray, not a property of the drive.
    #[serde(
        default = "default_map_budget_bytes",
        skip_serializing_if = "is_default_map_budget"
    )]
    pub map_budget_bytes: u64,
}

/// `ftl.map_budget_bytes`'s default: 8 GiB.
pub const MAP_BUDGET_BYTES_DEFAULT: u64 = 8 << 30;

fn default_map_budget_bytes() -> u64 {
    MAP_BUDGET_BYTES_DEFAULT
}

fn is_default_map_budget(n: &u64) -> bool {
    *n == MAP_BUDGET_BYTES_DEFAULT
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn default_page_bytes() -> u32 {
    4096
}
fn default_over_provisioning() -> f64 {
    0.07
}
fn default_d_choices() -> u32 {
    8
}
fn default_gc_background_free_lines() -> u32 {
    3
}
fn default_gc_forced_free_lines() -> u32 {
    1
}
fn one() -> u32 {
    1
}
fn one_u64() -> u64 {
    1
}

impl FtlConfig {
    /// Whether writes go through a DRAM write buffer, so a flush has work to wait for.
    pub fn write_buffered(&self) -> bool {
        self.enabled && self.write_buffer_bytes > 0
    }

    /// Translation pages the mapping-table cache holds (0 without one).
    pub fn map_cache_pages(&self) -> u64 {
        self.map_cache_bytes / u64::from(self.page_bytes.max(1))
    }
}

impl Default for FtlConfig {
    fn default() -> Self {
        FtlConfig {
            enabled: false,
            page_bytes: default_page_bytes(),
            over_provisioning: default_over_provisioning(),
            victim: VictimPolicy::default(),
            d_choices: default_d_choices(),
            gc_background_free_lines: default_gc_background_free_lines(),
            gc_forced_free_lines: default_gc_forced_free_lines(),
            placement_handles: 1,
            seed: 1,
            precondition: Precondition::None,
            write_buffer_bytes: 0,
            map_cache_bytes: 0,
            map_budget_bytes: MAP_BUDGET_BYTES_DEFAULT,
        }
    }
}

/// What to write before the measured run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Precondition {
    /// Nothing: every page unmapped, every line free (a new drive).
    #[default]
    None,
    /// Every logical page written once, in order.
    Fill,
    /// The fill, then `drive_writes` times the logical space in uniform random 1-page writes.
    Random { drive_writes: f64 },
}

impl FromStr for Precondition {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Precondition::None),
            "fill" => Ok(Precondition::Fill),
            _ => {
                let n = s.strip_prefix("random:").ok_or_else(|| {
                    format!("expected `none`, `fill` or `random:N` (N drive-writes), found `{s}`")
                })?;
                let drive_writes: f64 = n.parse().map_err(|_| {
                    format!("expected a number of drive-writes after `random:`, found `{n}`")
                })?;
                if !(0.0..=1000.0).contains(&drive_writes) {
                    return Err(format!(
                        "expected from 0 to 1000 drive-writes in `random:N`, found {n}"
                    ));
                }
                Ok(Precondition::Random { drive_writes })
            }
        }
    }
}

impl fmt::Display for Precondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Precondition::None => write!(f, "none"),
            Precondition::Fill => write!(f, "fill"),
            Precondition::Random { drive_writes } => write!(f, "random:{drive_writes}"),
        }
    }
}

impl serde::Serialize for Precondition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Precondition {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
