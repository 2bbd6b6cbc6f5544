//! The jobs `nvarray fit collect` runs on a real device: a grid over the axes that identify
//! the timing model's parameters, ordered so that a time budget's prefix identifies as much
//! as it can, and the fio arguments of each.
//!
//! Which job identifies what (the model's parameters, `nvarray presets show`):
//! - 4 KiB and 512 B random reads at queue depth 1: the media read latency, the controller's
//!   and firmware's times, the link's latency (the sum the host sees, split by size);
//! - random reads from queue depth 1 to 128: the parallelism (channels, dies) and the tags;
//! - large sequential reads at depth: the link's and the channels' bandwidth;
//! - writes likewise, for the program latency, the write buffer and its bandwidth;
//! - a 70/30 mix: how reads and writes share the dies.

use std::time::Duration;

/// What a job does, in fio's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Pattern {
    RandRead,
    RandWrite,
    Read,
    Write,
    /// Random, 70 % reads.
    RandMix70,
}

impl Pattern {
    pub const ALL: [Pattern; 5] = [
        Pattern::RandRead,
        Pattern::RandWrite,
        Pattern::Read,
        Pattern::Write,
        Pattern::RandMix70,
    ];

    /// fio's `rw=` value.
    pub fn rw(self) -> &'static str {
        match self {
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::RandMix70 => "randrw",
        }
    }

    pub fn writes(self) -> bool {
        !matches!(self, Pattern::RandRead | Pattern::Read)
    }
}

/// Request sizes of the grid: 512 B to 1 MiB.
pub const SIZES: [u32; 6] = [512, 4096, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
/// Queue depths of the grid: 1 to 128.
pub const DEPTHS: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// One fio job of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Job {
    pub pattern: Pattern,
    pub bs: u32,
    pub iodepth: u32,
}

impl Job {
    /// A name fio and the results directory use: `randread-4k-qd1`.
    pub fn name(&self) -> String {
        let bs = match self.bs {
            b if b >= 1 << 20 => format!("{}m", b >> 20),
            b if b >= 1 << 10 => format!("{}k", b >> 10),
            b => b.to_string(),
        };
        format!("{}-{bs}-qd{}", self.pattern.rw(), self.iodepth)
    }

    /// fio's arguments for this job on `target`: direct I/O, measured for `runtime` after
    /// `ramp`, over the first `span_bytes`, JSON+ out with the total latency's bins.
    pub fn fio_args(
        &self,
        target: &str,
        span_bytes: u64,
        runtime: Duration,
        ramp: Duration,
    ) -> Vec<String> {
        let mut args = direct_io_args(
            &self.name(),
            target,
            self.pattern.rw(),
            self.bs,
            self.iodepth,
            span_bytes,
        );
        args.extend([
            "--time_based=1".to_string(),
            format!("--runtime={}ms", runtime.as_millis().max(1)),
            "--randrepeat=0".to_string(),
            "--norandommap=1".to_string(),
            format!("--ramp_time={}ms", ramp.as_millis()),
            "--lat_percentiles=1".to_string(),
            "--output-format=json+".to_string(),
        ]);
        if self.pattern == Pattern::RandMix70 {
            args.push("--rwmixread=70".to_string());
        }
        args
    }
}

/// fio's arguments for a job called `name` of `rw` in requests of `bs` bytes at depth
/// `iodepth` over the first `span_bytes` of `target`, by libaio with direct I/O: what every
/// run `collect` makes shares.
pub fn direct_io_args(
    name: &str,
    target: &str,
    rw: &str,
    bs: u32,
    iodepth: u32,
    span_bytes: u64,
) -> Vec<String> {
    vec![
        format!("--name={name}"),
        format!("--filename={target}"),
        "--ioengine=libaio".to_string(),
        "--direct=1".to_string(),
        format!("--rw={rw}"),
        format!("--bs={bs}"),
        format!("--iodepth={iodepth}"),
        format!("--size={span_bytes}"),
    ]
}

/// Every job of the grid, in the order a budget takes them (`by_priority`).
pub fn full_grid() -> Vec<Job> {
    let mut jobs = Vec::new();
    for pattern in Pattern::ALL {
        for bs in SIZES {
            for iodepth in DEPTHS {
                jobs.push(Job {
                    pattern,
                    bs,
                    iodepth,
                });
            }
        }
    }
    by_priority(jobs)
}

/// `jobs` ordered so that every prefix identifies as much as a prefix can: first the jobs
/// that pin each group of parameters (small reads and writes at depth 1, the depth ladder of
/// 4 KiB random reads, large sequential reads and writes at depth, the mix), then the rest,
/// spread over the patterns, sizes and depths in turn.
pub fn by_priority(mut jobs: Vec<Job>) -> Vec<Job> {
    let key = |j: &Job| -> (u32, u32) {
        let small = j.bs <= 4096;
        let large = j.bs >= 256 << 10;
        let tier = match (j.pattern, j.bs, j.iodepth) {
            (Pattern::RandRead, 4096, 1) | (Pattern::RandWrite, 4096, 1) => 0,
            (Pattern::RandRead, 512, 1) | (Pattern::Read, 1048576, 32) => 1,
            (Pattern::RandRead, 4096, _) | (Pattern::Write, 1048576, 32) => 2,
            (Pattern::RandWrite, 4096, _) | (Pattern::RandMix70, 4096, 16) => 3,
            (_, _, 1) if small => 4,
            (Pattern::Read | Pattern::Write, _, 32) if large => 4,
            _ => 5,
        };
        // Within a tier, spread: the depth ladder low to high, then sizes.
        let spread = DEPTHS.iter().position(|&d| d == j.iodepth).unwrap_or(0) as u32 * 16
            + SIZES.iter().position(|&s| s == j.bs).unwrap_or(0) as u32;
        (tier, spread)
    };
    jobs.sort_by_key(|j| (key(j), Pattern::ALL.iter().position(|&p| p == j.pattern)));
    jobs
}

/// The jobs a budget allows and those it leaves out.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub jobs: Vec<Job>,
    pub left_out: Vec<Job>,
    /// Each job's time on the device, ramp included.
    pub per_job: Duration,
}

/// The prefix of `jobs` (in priority order) that runs within `budget` at `per_job` each.
pub fn plan(jobs: Vec<Job>, budget: Duration, per_job: Duration) -> Plan {
    let fit = (budget.as_secs_f64() / per_job.as_secs_f64().max(1e-9)).floor() as usize;
    let mut jobs = jobs;
    let left_out = jobs.split_off(fit.min(jobs.len()));
    Plan {
        jobs,
        left_out,
        per_job,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_covers_every_pattern_size_and_depth_once() {
        let jobs = full_grid();
        assert_eq!(jobs.len(), Pattern::ALL.len() * SIZES.len() * DEPTHS.len());
        let names: std::collections::HashSet<String> = jobs.iter().map(Job::name).collect();
        assert_eq!(names.len(), jobs.len(), "names are unique");
        assert!(names.contains("randread-4k-qd1") && names.contains("write-1m-qd128"));
    }

    #[test]
    fn a_small_budget_takes_the_jobs_that_pin_each_parameter_group_first() {
        let p = plan(
            full_grid(),
            Duration::from_secs(60),
            Duration::from_secs(10),
        );
        let names: Vec<String> = p.jobs.iter().map(Job::name).collect();
        assert_eq!(names.len(), 6);
        assert_eq!(&names[..2], ["randread-4k-qd1", "randwrite-4k-qd1"]);
        assert!(names.contains(&"read-1m-qd32".to_string()), "{names:?}");
        assert_eq!(p.jobs.len() + p.left_out.len(), 240);
    }

    #[test]
    fn fio_arguments_ask_for_direct_io_and_json_plus() {
        let j = Job {
            pattern: Pattern::RandMix70,
            bs: 16 << 10,
            iodepth: 4,
        };
        let a = j.fio_args(
            "/dev/loop0",
            1 << 30,
            Duration::from_secs(5),
            Duration::from_millis(500),
        );
        for want in [
            "--direct=1",
            "--output-format=json+",
            "--rw=randrw",
            "--rwmixread=70",
            "--bs=16384",
            "--runtime=5000ms",
            "--name=randrw-16k-qd4",
            "--ramp_time=500ms",
            "--lat_percentiles=1",
        ] {
            assert!(a.contains(&want.to_string()), "{want} in {a:?}");
        }
    }
}
