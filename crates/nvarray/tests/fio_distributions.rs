//! `random_distribution` against real fio (issue 43): the same job run by fio 3.33 on its null
//! engine with `write_iolog`, and by nvarray's request generator, 10^6 requests each. The
//! offset histograms (64 buckets over the file) agree within 1 % of the requests in every
//! bucket; `pareto` and `normal`, which nvarray draws as fio does, agree request for request.

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
    for (name, keys) in jobs {
        text += &format!(
            "[{name}]\n{keys}write_iolog={}\n",
            dir.join(format!("{name}.iolog")).display()
        );
    }
    let job_file = dir.join("job.fio");
    std::fs::write(&job_file, text).unwrap();
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
fn pareto_and_normal_give_fios_offsets_request_for_request() {
    for distribution in [
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
