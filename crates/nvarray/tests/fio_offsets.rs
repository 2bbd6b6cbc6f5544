//! Offsets against real fio (issue 43): the same job run by fio 3.33 on its null engine with
//! `write_iolog`, and by nvarray's request generator.
//!
//! - `random_distribution`, 10^6 requests each: the offset histograms (64 buckets over the
//!   file) agree within 1 % of the requests in every bucket; `zipf`, `pareto` and `normal`,
//!   which nvarray draws as fio does, agree request for request.
//! - `rw=...:N` and `rw_sequencer`: sequential gaps and backward reads give fio's offsets
//!   exactly; random runs have fio's shape (a jump every N requests, continuations between).

use std::path::Path;
use std::process::Command;

use nvarray_workload::{parse_job_file, RequestGen};

const REQUESTS: usize = 1_000_000;
const FILE_BYTES: u64 = 1 << 30;
const BUCKETS: usize = 64;

/// The offsets fio's write_iolog records for each of `jobs` (one section per name, in order),
/// run together on the null engine over a 1 GiB file: each job logs to a file of its own
/// (fio's jobs are processes, and a shared log interleaves their lines).
fn fio_offsets(dir: &Path, jobs: &[(&str, String)]) -> Vec<Vec<u64>> {
    let mut text = format!(
        "[global]\nioengine=null\nsize=1g\nio_size=4000m\nbs=4k\nrw=randread\n\
         number_ios={REQUESTS}\n"
    );
    fio_offsets_of(dir, &mut text, jobs)
}

/// `fio_offsets` with the global section `text` of the caller's.
fn fio_offsets_of(dir: &Path, text: &mut String, jobs: &[(&str, String)]) -> Vec<Vec<u64>> {
    for (name, keys) in jobs {
        *text += &format!(
            "[{name}]\n{keys}write_iolog={}\n",
            dir.join(format!("{name}.iolog")).display()
        );
    }
    let job_file = dir.join("job.fio");
    std::fs::write(&job_file, &text).unwrap();
    let out = Command::new("fio")
        .current_dir(dir)
        .arg(&job_file)
        .output()
        .expect("fio runs (the test command installs it)");
    assert!(
        out.status.success(),
        "fio: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    jobs.iter()
        .map(|(name, _)| {
            let log = std::fs::read_to_string(dir.join(format!("{name}.iolog"))).unwrap();
            // iolog version 3: `TIME FILE ACTION OFFSET LENGTH` per request.
            log.lines()
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    (f.len() == 5 && (f[2] == "read" || f[2] == "write"))
                        .then(|| f[3].parse().unwrap())
                })
                .collect()
        })
        .collect()
}

/// The offsets nvarray's generator gives job `index` of the same jobs, thread 0.
fn nvarray_offsets(jobs: &[(&str, String)], index: usize) -> Vec<u64> {
    let mut text = "[global]\nsize=1g\nbs=4k\nrw=randread\n".to_string();
    for (name, keys) in jobs {
        text += &format!("[{name}]\n{keys}");
    }
    let workload = parse_job_file(&text).unwrap();
    let mut gen = RequestGen::new(&workload.jobs[index], 0, FILE_BYTES, 512).unwrap();
    (0..REQUESTS)
        .map(|_| gen.next_request().offset_bytes)
        .collect()
}

fn histogram(offsets: impl Iterator<Item = u64>) -> Vec<usize> {
    let mut h = vec![0; BUCKETS];
    for o in offsets {
        h[(o * BUCKETS as u64 / FILE_BYTES) as usize] += 1;
    }
    h
}

/// Asserts every bucket within 1 % of the requests; returns the largest difference.
fn histograms_agree(what: &str, fio: &[u64], ours: &[u64]) -> usize {
    assert_eq!(
        fio.len(),
        REQUESTS,
        "{what}: fio issued {} requests",
        fio.len()
    );
    let (a, b) = (
        histogram(fio.iter().copied()),
        histogram(ours.iter().copied()),
    );
    let worst = a.iter().zip(&b).map(|(x, y)| x.abs_diff(*y)).max().unwrap();
    assert!(
        worst <= REQUESTS / 100,
        "{what}: a bucket differs by {worst} requests (more than 1 %)\nfio    {a:?}\nnvarray {b:?}"
    );
    worst
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn zoned_and_zoned_abs_spread_requests_as_fio_does() {
    for distribution in [
        // examples/rand-zones.fio: the last zone's size left to fio.
        "zoned:50/5:30/15:20/",
        "zoned:60/10:30/20:8/30:2/40",
        // Sizes that leave the tail untouched.
        "zoned:50/5:50/5",
        "zoned_abs:60/64m:30/256m:10/512m",
    ] {
        let dir = scratch();
        let jobs = [("j", format!("random_distribution={distribution}\n"))];
        let fio = fio_offsets(dir.path(), &jobs);
        let ours = nvarray_offsets(&jobs, 0);
        let worst = histograms_agree(distribution, &fio[0], &ours);
        println!("{distribution}: worst bucket {worst} requests apart");
    }
}

#[test]
fn zipf_pareto_and_normal_give_fios_offsets_request_for_request() {
    for distribution in [
        "zipf:1.2",
        "zipf:0.8",
        "zipf:2.5:0.5",
        "pareto:0.2",
        "pareto:0.9",
        "normal",
        "normal:5",
        "pareto:0.3:0.25",
    ] {
        let dir = scratch();
        // The file's name seeds fio's stream: given for the first job, left to fio's default
        // (`JOB.0.0`) for the second, which is also fio's thread 2.
        let jobs = [
            (
                "first",
                format!(
                    "filename={}\nrandom_distribution={distribution}\n",
                    dir.path().join("data").display()
                ),
            ),
            ("second", format!("random_distribution={distribution}\n")),
        ];
        let logged = fio_offsets(dir.path(), &jobs);
        for (index, fio) in logged.iter().enumerate() {
            let ours = nvarray_offsets(&jobs, index);
            let first_difference = fio.iter().zip(&ours).position(|(a, b)| a != b);
            assert_eq!(
                first_difference, None,
                "{distribution}, job {index}: request {first_difference:?} differs"
            );
            let worst = histograms_agree(distribution, fio, &ours);
            assert_eq!(
                worst, 0,
                "{distribution}: the same requests, the same histogram"
            );
        }
    }
}

/// fio's `rw=read:-8k` (examples/backwards-read.fio) and `rw=write:112k`
/// (examples/cross-stripe-verify.fio's stride): every offset as fio issues it.
#[test]
fn sequential_gaps_and_backward_reads_give_fios_offsets() {
    for (rw, size) in [("read:-8k", "1m"), ("write:112k", "4m"), ("read:4k", "1m")] {
        let dir = scratch();
        let mut text = format!("[global]\nioengine=null\nsize={size}\nbs=4k\nnumber_ios=1000\n");
        let jobs = [("j", format!("rw={rw}\nio_size=100m\n"))];
        let fio = &fio_offsets_of(dir.path(), &mut text, &jobs)[0];
        let workload =
            parse_job_file(&format!("[global]\nsize={size}\nbs=4k\n[j]\nrw={rw}\n")).unwrap();
        let job = &workload.jobs[0];
        let mut gen = RequestGen::new(job, 0, FILE_BYTES, 512).unwrap();
        let ours: Vec<u64> = (0..fio.len())
            .map(|_| gen.next_request().offset_bytes)
            .collect();
        assert_eq!(fio.len(), 1000, "{rw}");
        assert_eq!(&ours, fio, "{rw}: nvarray's offsets against fio's");
    }
}

/// `rw=randread:N`: a random jump every N requests, the ones between continuing from the
/// previous one (or, with `rw_sequencer=identical`, repeating it), as fio's log shows.
#[test]
fn random_runs_jump_every_n_requests_as_fio_does() {
    for (modifier, sequencer) in [
        ("4", "sequential"),
        ("8k", "sequential"),
        ("3", "identical"),
    ] {
        let run: usize = modifier.trim_end_matches('k').parse().unwrap();
        let keys = format!("rw=randread:{modifier}\nrw_sequencer={sequencer}\nnorandommap\n");
        let dir = scratch();
        let mut text = "[global]\nioengine=null\nsize=1g\nbs=4k\nnumber_ios=4000\n".to_string();
        let fio = &fio_offsets_of(dir.path(), &mut text, &[("j", keys.clone())])[0];
        let workload = parse_job_file(&format!("[global]\nsize=1g\nbs=4k\n[j]\n{keys}")).unwrap();
        let mut gen = RequestGen::new(&workload.jobs[0], 0, FILE_BYTES, 512).unwrap();
        let ours: Vec<u64> = (0..fio.len())
            .map(|_| gen.next_request().offset_bytes)
            .collect();
        // The step from each request to the next: within a run, 4 KiB (or 0 when identical);
        // at a jump, anything. Both logs have the same steps at the same places.
        let shape = |offsets: &[u64]| -> Vec<Option<i64>> {
            offsets
                .windows(2)
                .map(|w| {
                    let step = w[1] as i64 - w[0] as i64;
                    (step == 0 || step == 4096).then_some(step)
                })
                .collect()
        };
        let (a, b) = (shape(fio), shape(&ours));
        let jumps = |s: &[Option<i64>]| {
            s.iter()
                .enumerate()
                .filter(|(_, x)| x.is_none())
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        // A random jump may land exactly one block on (rarely): compare where runs end.
        let (ja, jb) = (jumps(&a), jumps(&b));
        let every_nth = |j: &[usize]| j.iter().all(|&i| (i + 1) % run == 0);
        assert!(
            every_nth(&ja) && every_nth(&jb),
            "{modifier}/{sequencer}: jumps off the run\nfio {ja:?}\nnvarray {jb:?}"
        );
        assert!(
            ja.len() * run + run >= fio.len() - 1 && jb.len() * run + run >= fio.len() - 1,
            "{modifier}: too few jumps"
        );
        let within = if sequencer == "identical" { 0 } else { 4096 };
        for s in [&a, &b] {
            assert!(
                s.iter().flatten().all(|&x| x == within),
                "{modifier}/{sequencer}: steps inside runs"
            );
        }
    }
}

/// `random_distribution=sequence` (fio after 3.33; Debian's 3.33 lacks it, so this checks
/// fio's own example, examples/sequence-distribution.fio, against the blocks its comments and
/// fio's t/sequence.py expect): fixed blocks repeated, or striding by the list's length.
#[test]
fn a_block_sequence_repeats_or_strides_as_fios_example_says() {
    let example = "[global]\nioengine=null\nrw=randread\nbs=4k\nsize=48k\nio_size=24k\n\
                   [repeating_sequence]\nrandom_distribution=sequence:2,0,1\n\
                   random_sequence_stride=0\n\
                   [strided_sequence]\nstonewall\nrandom_distribution=sequence:2,0,1\n\
                   random_sequence_stride=1\n";
    let workload = parse_job_file(example).unwrap();
    for (job, want) in workload
        .jobs
        .iter()
        .zip([[2, 0, 1, 2, 0, 1], [2, 0, 1, 5, 3, 4]])
    {
        let mut gen = RequestGen::new(job, 0, 48 << 10, 512).unwrap();
        let blocks: Vec<u64> = (0..6)
            .map(|_| gen.next_request().offset_bytes / 4096)
            .collect();
        assert_eq!(blocks, want, "{}", job.name);
    }
    // A block past the region is refused, naming it.
    let bad =
        parse_job_file("[j]\nrw=randread\nsize=48k\nrandom_distribution=sequence:0,12\n").unwrap();
    let e = RequestGen::new(&bad.jobs[0], 0, 48 << 10, 512)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("block 12 is past the job's region of 12 blocks"),
        "{e}"
    );
}

/// `zonemode=strided`: `zonesize` bytes in each zone of `zonerange`, then `zoneskip` on,
/// wrapping at the region's end; a zone smaller than `zonesize` is worked over again. Every
/// offset as fio 3.33 issues it.
#[test]
fn strided_zones_give_fios_offsets() {
    for zones in [
        "zonesize=8k\nzonerange=16k\nzoneskip=16k",
        "zonesize=32k\nzonerange=16k",
        "zonesize=64k\nzoneskip=2z",
    ] {
        let dir = scratch();
        let mut text = "[global]\nioengine=null\nsize=256k\nbs=4k\nnumber_ios=500\n".to_string();
        let keys = format!("rw=read\nzonemode=strided\n{zones}\nio_size=100m\n");
        let fio = &fio_offsets_of(dir.path(), &mut text, &[("j", keys.clone())])[0];
        let workload = parse_job_file(&format!("[global]\nsize=256k\nbs=4k\n[j]\n{keys}")).unwrap();
        let mut gen = RequestGen::new(&workload.jobs[0], 0, FILE_BYTES, 512).unwrap();
        let ours: Vec<u64> = (0..fio.len())
            .map(|_| gen.next_request().offset_bytes)
            .collect();
        assert_eq!(fio.len(), 500, "{zones}");
        assert_eq!(&ours, fio, "{zones}: nvarray's offsets against fio's");
    }
}
