//! Sweeps beyond one core and one machine (issue 23): a grid over three parameters, split into
//! shards and merged, gives exactly the table and JSON of the whole sweep, locally and as a
//! Slurm job array on a one-node cluster; merging refuses other sweeps' shards and names the
//! missing points; the emulator's points stay serial.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A 3-parameter grid of 2 x 2 x 2 points on the simulator, about 10 ms each.
const SWEEP: [&str; 10] = [
    "sim",
    "sweep",
    "--param",
    "bs=4k,64k",
    "--param",
    "iodepth=1,8",
    "--param",
    "memory.controllers=1,4",
    "--runtime",
    "1ms",
];

fn nvarray(args: &[&str], extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .args(extra)
        .output()
        .expect("run nvarray")
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The table without its last line (which names the files written), and the sweep's JSON
/// without the one figure measured on this machine (CPU seconds per GB).
fn result(stdout: &str, out: &Path) -> (String, Value) {
    let table = stdout
        .lines()
        .filter(|l| !l.starts_with("wrote "))
        .collect::<Vec<_>>()
        .join("\n");
    let mut json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.with_extension("json")).unwrap())
            .unwrap();
    for p in json["points"].as_array_mut().unwrap() {
        let cpu = p["report"]
            .as_object_mut()
            .unwrap()
            .remove("cpu_seconds_per_gb");
        assert!(cpu.is_some(), "{p}");
    }
    (table, json)
}

/// The whole sweep, run in one process on two threads.
fn whole(dir: &Path) -> (String, Value) {
    let out = dir.join("whole");
    let stdout = ok(nvarray(&SWEEP, &["--jobs", "2", "--out", path(&out)]));
    let r = result(&stdout, &out);
    assert_eq!(r.1["points"].as_array().unwrap().len(), 8);
    assert_eq!(r.1["params"].as_array().unwrap().len(), 3);
    r
}

#[test]
fn four_shards_merged_equal_the_whole_sweep_and_merge_checks_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let (table, json) = whole(dir.path());
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    for i in 0..4 {
        let shard = format!("{i}/4");
        let stdout = ok(nvarray(
            &SWEEP,
            &[
                "--shard",
                &shard,
                "--jobs",
                "1",
                "--out",
                path(&shards.join(format!("s{i}"))),
            ],
        ));
        assert!(
            stdout.contains(&format!("shard {shard}: 2 of the sweep's 8 points")),
            "{stdout}"
        );
    }
    // Every line names its point, the sweep and the settings.
    let lines = std::fs::read_to_string(shards.join("s1.jsonl")).unwrap();
    let points: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut indices: Vec<u64> = points
        .iter()
        .map(|p| p["point"].as_u64().unwrap())
        .collect();
    indices.sort();
    assert_eq!(indices, [1, 5], "shard 1/4 holds the points i % 4 == 1");
    assert_eq!(points[0]["sweep"], json["sweep"]);
    assert_eq!(points[0]["settings"].as_object().unwrap().len(), 3);

    let merged = dir.path().join("merged");
    let stdout = ok(nvarray(
        &["sweep", "merge", path(&shards)],
        &["--out", path(&merged)],
    ));
    assert_eq!(result(&stdout, &merged), (table, json));

    // A shard of another sweep (another bs list) is refused, naming both files.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(shards.join("s0.jsonl"), other.join("s0.jsonl")).unwrap();
    let mut foreign = SWEEP.to_vec();
    foreign[3] = "bs=4k,16k";
    ok(nvarray(
        &foreign,
        &["--shard", "1/4", "--out", path(&other.join("s1"))],
    ));
    let o = nvarray(&["sweep", "merge", path(&other)], &["--out", path(&merged)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("another sweep") && err.contains("s1.jsonl"),
        "{err}"
    );

    // Missing shards: every missing point is named with its shard.
    std::fs::remove_file(other.join("s1.jsonl")).unwrap();
    let o = nvarray(&["sweep", "merge", path(&other)], &["--out", path(&merged)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("missing 6 of the sweep's 8 points"), "{err}");
    assert!(
        err.contains("1 (bs=64k iodepth=1 memory.controllers=1, shard 1/4)"),
        "{err}"
    );

    // A line edited out of shape (its grid no longer matches its point count) is refused,
    // not trusted.
    let edited = lines
        .lines()
        .next()
        .unwrap()
        .replacen("\"points\":8", "\"points\":100", 1);
    std::fs::write(other.join("s1.jsonl"), edited).unwrap();
    let o = nvarray(&["sweep", "merge", path(&other)], &["--out", path(&merged)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("was the file edited"), "{err}");

    // A line cut short (a shard killed while writing) is named with its file and line.
    std::fs::write(other.join("s1.jsonl"), "{\"sweep\":").unwrap();
    let o = nvarray(&["sweep", "merge", path(&other)], &["--out", path(&merged)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("s1.jsonl:1"), "{err}");
}

#[test]
fn bad_grids_shards_and_jobs_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x");
    for (extra, needle) in [
        (vec!["--shard", "4/4"], "0 <= I < N"),
        (vec!["--shard", "1"], "0 <= I < N"),
        (vec!["--jobs", "0"], "--jobs 0"),
        (vec!["--param", "bs=8k"], "given twice"),
        (vec!["--param", "numjobs"], "no --values list"),
        (vec!["--param", "iodepth=1,,2"], "empty value"),
    ] {
        let mut args = extra.clone();
        args.extend(["--out", path(&out)]);
        let o = nvarray(&SWEEP, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: `{needle}` not in {err}");
    }
    // The emulator's points measure the machine: they are not run side by side.
    let o = nvarray(
        &["bench", "sweep", "--param", "bs=4k,8k", "--runtime", "10ms"],
        &["--jobs", "2", "--out", path(&out)],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("one at a time"), "{err}");
    assert!(!out.with_extension("jsonl").exists(), "nothing ran");
}

/// A one-node Slurm cluster (scripts/slurm-local.sh), stopped when dropped, even when an
/// assertion fails.
struct Cluster {
    dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let o = Command::new(scripts().join("slurm-local.sh"))
            .arg("stop")
            .arg(&self.dir)
            .output()
            .expect("run slurm-local.sh stop");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

#[test]
fn a_slurm_job_array_of_four_shards_merges_into_the_whole_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let cluster_dir = dir.path().join("cluster");
    let o = Command::new(scripts().join("slurm-local.sh"))
        .arg("start")
        .arg(&cluster_dir)
        .output()
        .expect("run slurm-local.sh");
    let stdout = String::from_utf8_lossy(&o.stdout);
    if o.status.code() == Some(77) {
        eprintln!("{}", stdout.trim());
        return;
    }
    let cluster = Cluster { dir: cluster_dir };
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run = dir.path().join("run");
    let o = Command::new(scripts().join("slurm-sweep.sh"))
        .env("SLURM_CONF", cluster.dir.join("slurm.conf"))
        .args(["--wait", "--shards", "4", "--dir", path(&run), "--nvarray"])
        .arg(env!("CARGO_BIN_EXE_nvarray"))
        .arg("--")
        .args(SWEEP)
        .output()
        .expect("run slurm-sweep.sh");
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let shards = std::fs::read_dir(run.join("shards")).unwrap().count();
    assert_eq!(shards, 4, "one .jsonl per array task");
    let merged = std::fs::read_to_string(run.join("logs/merge.out")).unwrap();
    assert_eq!(result(&merged, &run.join("sweep")), whole(dir.path()));
    drop(cluster);
    let left = Command::new("pgrep")
        .args(["-f", path(&dir.path().join("cluster"))])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "daemons left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}
