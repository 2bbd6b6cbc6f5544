//! The device a deterministic simulation runs on (issue 58): the `null` preset, whose every
//! command completes at once, so wall time changes nothing; driven inline (no device thread),
//! so one thread runs everything; on a durable file whose operations fail as a
//! `BackingFaults` plan draws them. The channel daemon's simulation and the NBD server's open
//! it, and `pattern` gives their writes contents a read can be checked against.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::options::{BackingFaults, BackingKind, Options};
use crate::{Device, HostError};

/// The simulation's device.
#[derive(Clone, Debug)]
pub struct SimulatedDevice {
    pub size_bytes: u64,
    /// Device tags (commands in flight at once, over every queue pair); `None`: the preset's.
    pub tags: Option<u32>,
    /// The largest command: a DMA buffer's bytes.
    pub command_bytes: u32,
}

impl SimulatedDevice {
    /// Opens it on the file `path` (created if need be; reopened as it is), `faults`
    /// injected into its reads, writes, msyncs and fsyncs.
    pub fn open(&self, path: &Path, faults: &Arc<BackingFaults>) -> Result<Device, HostError> {
        let mut config = nvarray_model::presets::preset("null")
            .and_then(|p| p.load(&[]))
            .expect("the null preset is built in and loads");
        config.memory.capacity_bytes = self.size_bytes;
        if let Some(tags) = self.tags {
            config.controller.tags = tags;
        }
        let options = Options {
            backing: BackingKind::File {
                path: path.to_path_buf(),
                durable: true,
                read_only: false,
                sparse: false,
            },
            backing_faults: Some(Arc::clone(faults)),
            device_threads: 0,
            buffer_bytes: Some(self.command_bytes),
            ..Options::default()
        };
        Device::open(&config, &options)
    }
}

/// The `unit_bytes` bytes write `id` leaves in unit (sector, block) `unit`: different for
/// every write and every unit, so a read shows which write each unit holds. Write 0 is
/// zeroes: never written, or written with zeroes.
pub fn pattern(id: u32, unit: u64, unit_bytes: u64) -> Vec<u8> {
    // The contents are whole 8-byte words: any other size would come out shorter.
    assert!(
        unit_bytes.is_multiple_of(8),
        "a unit of {unit_bytes} bytes is not whole 8-byte words"
    );
    if id == 0 {
        return vec![0; unit_bytes as usize];
    }
    (u64::from(id) << 32 | unit)
        .to_le_bytes()
        .repeat((unit_bytes / 8) as usize)
}

/// Which seeds a simulation runs, and how many steps each: `NVARRAY_SIM_FIRST_SEED` (default
/// 1), `NVARRAY_SIM_SEEDS` and `NVARRAY_SIM_STEPS` (defaults the caller's; `_` may group
/// digits), so a campaign runs a million seeds and a failure's replay command runs one.
#[derive(Clone, Copy, Debug)]
pub struct Seeds {
    pub first: u64,
    pub count: u64,
    pub steps: u64,
}

impl Seeds {
    /// From the environment, `count` seeds of `steps` steps unless it says otherwise.
    pub fn from_env(count: u64, steps: u64) -> Seeds {
        let var = |name: &str, default: u64| {
            std::env::var(name).map_or(default, |v| {
                v.replace('_', "")
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
            })
        };
        Seeds {
            first: var("NVARRAY_SIM_FIRST_SEED", 1),
            count: var("NVARRAY_SIM_SEEDS", count),
            steps: var("NVARRAY_SIM_STEPS", steps),
        }
    }

    /// What a failure at `step` of `seed` says, with the command that replays it (the test
    /// `test` of the package `package`, run to that step).
    pub fn failure(seed: u64, step: u64, what: &str, package: &str, test: &str) -> String {
        format!(
            "seed {seed}, step {step}: {what}\nreplay: NVARRAY_SIM_FIRST_SEED={seed} \
             NVARRAY_SIM_SEEDS=1 NVARRAY_SIM_STEPS={} cargo test --release -p {package} --test \
             {test}",
            step + 1
        )
    }

    /// Runs `simulate(seed, steps)` for every seed (each panics, naming its seed, where an
    /// invariant breaks), checks that the first seed replays exactly (the same counts twice),
    /// prints `NAME: seeds A..B, N steps each, 0 invariants broken` and the counts summed, and
    /// returns them.
    pub fn run(
        &self,
        name: &str,
        simulate: impl Fn(u64, u64) -> BTreeMap<&'static str, u64>,
    ) -> BTreeMap<&'static str, u64> {
        let started = std::time::Instant::now();
        let mut total: BTreeMap<&'static str, u64> = BTreeMap::new();
        let end = self.first + self.count;
        for seed in self.first..end {
            for (k, v) in simulate(seed, self.steps) {
                *total.entry(k).or_default() += v;
            }
        }
        if self.count > 0 {
            assert_eq!(
                simulate(self.first, self.steps),
                simulate(self.first, self.steps),
                "seed {} ran differently twice: the simulation is not deterministic",
                self.first
            );
        }
        println!(
            "{name}: seeds {}..{end}, {} steps each, 0 invariants broken ({:.1} s)",
            self.first,
            self.steps,
            started.elapsed().as_secs_f64()
        );
        for (k, v) in &total {
            println!("  {k}: {v}");
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_command_that_replays_it() {
        let message = Seeds::failure(7, 3, "it broke", "nvarray-nbd", "simulation");
        assert_eq!(
            message,
            "seed 7, step 3: it broke\nreplay: NVARRAY_SIM_FIRST_SEED=7 NVARRAY_SIM_SEEDS=1 \
             NVARRAY_SIM_STEPS=4 cargo test --release -p nvarray-nbd --test simulation"
        );
    }

    #[test]
    fn patterns_differ_by_write_and_by_unit() {
        assert_eq!(pattern(0, 3, 512), vec![0; 512]);
        assert_ne!(pattern(1, 3, 512), pattern(2, 3, 512));
        assert_ne!(pattern(1, 3, 512), pattern(1, 4, 512));
        assert_eq!(pattern(1, 3, 512).len(), 512);
    }
}
