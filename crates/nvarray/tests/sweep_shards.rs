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
        let report = p["report"].as_object_mut().unwrap();
        let cpu = report.remove("cpu_seconds_per_gb");
        report.remove("cpu_seconds");
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

/// The two-point sweep of the tests below: 4 KiB and 8 KiB random reads, 200 each.
fn small(extra: &[&str]) -> Output {
    let mut args = vec![
        "sim",
        "sweep",
        "--param",
        "bs=4k,8k",
        "--rw",
        "randread",
        "--number_ios",
        "200",
    ];
    args.extend(extra);
    nvarray(&args, &[])
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_out_path_with_dots_keeps_each_sweeps_files() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = dir.path().join("v1.1");
    let v2 = dir.path().join("v1.2");
    ok(small(&["--out", path(&v1)]));
    ok(nvarray(
        &[
            "sim",
            "sweep",
            "--param",
            "bs=4k,16k",
            "--rw",
            "randread",
            "--number_ios",
            "200",
        ],
        &["--out", path(&v2)],
    ));
    let file = |stem: &Path, ext: &str| PathBuf::from(format!("{}.{ext}", stem.display()));
    for stem in [&v1, &v2] {
        for ext in ["jsonl", "json", "svg"] {
            assert!(file(stem, ext).is_file(), "{}", file(stem, ext).display());
        }
    }
    let json = |stem: &Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(file(stem, "json")).unwrap()).unwrap()
    };
    assert_eq!(json(&v1)["points"][1]["value"], "8k");
    assert_eq!(json(&v2)["points"][1]["value"], "16k");
    // Nothing was written under the name `with_extension` would have made of both.
    assert!(!dir.path().join("v1.jsonl").exists());
    // A shard's lines and a merge's outputs keep the dots too.
    let shard = dir.path().join("shard.0");
    ok(small(&["--shard", "0/1", "--out", path(&shard)]));
    assert!(file(&shard, "jsonl").is_file());
    let merged = dir.path().join("merged.v2");
    ok(nvarray(
        &["sweep", "merge", path(&file(&shard, "jsonl"))],
        &["--out", path(&merged)],
    ));
    assert!(file(&merged, "json").is_file() && file(&merged, "svg").is_file());
}

#[test]
fn a_rerun_resumes_its_sweep_and_never_empties_another_ones() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let lines = dir.path().join("run.jsonl");
    let whole = ok(small(&["--out", path(&out)]));
    let complete = std::fs::read_to_string(&lines).unwrap();
    assert_eq!(complete.lines().count(), 2);
    // Interrupted after one point, while writing the second: one whole line, half a line.
    let first = complete.lines().next().unwrap();
    std::fs::write(&lines, format!("{first}\n{}", &first[..first.len() / 2])).unwrap();
    let o = small(&["--out", path(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("resuming: 1 of the 2 points are already in"),
        "{}",
        stderr(&o)
    );
    // The kept point is not run again, the cut line is gone, and the table is the whole
    // sweep's.
    let resumed = std::fs::read_to_string(&lines).unwrap();
    assert_eq!(resumed.lines().count(), 2, "{resumed}");
    assert_eq!(resumed.lines().next().unwrap(), first);
    for l in resumed.lines() {
        serde_json::from_str::<Value>(l).unwrap();
    }
    assert_eq!(String::from_utf8(o.stdout).unwrap(), whole);

    // Another sweep into the same --out is refused, saying what differs, and the file is
    // left as it was.
    let o = nvarray(
        &[
            "sim",
            "sweep",
            "--param",
            "bs=4k,8k",
            "--rw",
            "randwrite",
            "--number_ios",
            "200",
        ],
        &["--out", path(&out)],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("another sweep") && err.contains("workloads") && err.contains("--overwrite"),
        "{err}"
    );
    assert!(
        err.contains("--rw randwrite") && err.contains("--rw randread"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&lines).unwrap(), resumed);
    // --overwrite starts over.
    let o = nvarray(
        &[
            "sim",
            "sweep",
            "--param",
            "bs=4k,8k",
            "--rw",
            "randwrite",
            "--number_ios",
            "200",
        ],
        &["--out", path(&out), "--overwrite"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("resuming"));
    let rewritten = std::fs::read_to_string(&lines).unwrap();
    assert_eq!(rewritten.lines().count(), 2);
    assert!(!rewritten.contains(first));
}

/// A resumed sweep refuses a line edited to name a point outside its grid, or another grid,
/// with exit 2 and the file left as it was, where it used to panic indexing the grid.
#[test]
fn a_resumed_sweep_refuses_an_edited_line_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let lines = dir.path().join("run.jsonl");
    ok(small(&["--out", path(&out)]));
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(&lines)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let mut past_the_grid = first.clone();
    past_the_grid["point"] = 7.into();
    let mut other_grid = first.clone();
    other_grid["grid"][0]["values"] = serde_json::json!(["4k", "8k", "16k"]);
    other_grid["points"] = 3.into();
    for (what, edited) in [
        ("past the grid", past_the_grid),
        ("another grid", other_grid),
    ] {
        let text = format!("{edited}\n");
        std::fs::write(&lines, &text).unwrap();
        let o = small(&["--out", path(&out)]);
        assert_eq!(o.status.code(), Some(2), "{what}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{what}: {}", stderr(&o));
        assert!(stderr(&o).contains("edited"), "{what}: {}", stderr(&o));
        assert_eq!(std::fs::read_to_string(&lines).unwrap(), text, "{what}");
    }
}

/// Writes an fio iolog (version 2) of `reads` 4 KiB reads.
fn iolog(path: &Path, reads: usize) {
    let mut text = String::from("fio version 2 iolog\n/dev/x add\n/dev/x open\n");
    for i in 0..reads {
        text.push_str(&format!("/dev/x read {} 4096\n", i * 4096));
    }
    text.push_str("/dev/x close\n");
    std::fs::write(path, text).unwrap();
}

#[test]
fn merge_knows_a_trace_by_its_content_and_a_binary_by_its_build() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.log");
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    let shard = |exe: &Path, trace_arg: &Path, i: usize, cwd: &Path| {
        let o = Command::new(exe)
            .current_dir(cwd)
            .args(["sim", "sweep", "--param", "iodepth=1,2", "--trace"])
            .arg(trace_arg)
            .args(["--shard", &format!("{i}/2"), "--overwrite", "--out"])
            .arg(shards.join(format!("s{i}")))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    };
    let merge = || {
        nvarray(
            &["sweep", "merge", path(&shards)],
            &["--out", path(&dir.path().join("m"))],
        )
    };
    let exe = Path::new(env!("CARGO_BIN_EXE_nvarray"));
    // One file, named relative in one shard and absolute in the other: one sweep.
    iolog(&trace, 20);
    shard(exe, Path::new("t.log"), 0, dir.path());
    shard(exe, &trace, 1, dir.path());
    ok(merge());
    // The file swapped between the shards (20 reads, then 1,000): refused, naming the trace.
    iolog(&trace, 1000);
    shard(exe, &trace, 1, dir.path());
    let o = merge();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // The trace and so the workloads differ, nothing else (not the grid, not the binary).
    assert!(
        err.contains("they differ in the trace content, the workloads (hash of every point's):"),
        "{err}"
    );
    assert!(
        err.contains("510 bytes") && err.contains("24780 bytes"),
        "{err}"
    );

    // A shard run by another build of the same version: the same binary with its build id
    // changed, as a rebuild of other code would change it.
    iolog(&trace, 20);
    shard(exe, &trace, 1, dir.path());
    ok(merge());
    let line: Value = serde_json::from_str(
        std::fs::read_to_string(shards.join("s0.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let binary = line["identity"]["binary"].as_str().unwrap().to_string();
    let id = binary
        .strip_prefix("build-id:")
        .unwrap_or_else(|| panic!("this test needs a build id, not {binary}"));
    let id: Vec<u8> = (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16).unwrap())
        .collect();
    let bytes = std::fs::read(exe).unwrap();
    let at = bytes
        .windows(id.len())
        .position(|w| w == id.as_slice())
        .expect("the build id in the binary");
    // Copied and patched by child processes: an executable this process had open for
    // writing could be inherited by another test's fork and refuse to run (ETXTBSY).
    let other = dir.path().join("nvarray-rebuilt");
    let patched = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cp \"$1\" \"$2\" && printf '\\{:03o}' | dd of=\"$2\" bs=1 seek={at} count=1 \
             conv=notrunc status=none",
            bytes[at] ^ 0xff
        ))
        .arg("sh")
        .arg(exe)
        .arg(&other)
        .output()
        .unwrap();
    assert!(patched.status.success(), "{}", stderr(&patched));
    assert_ne!(std::fs::read(&other).unwrap()[at], bytes[at]);
    shard(&other, &trace, 1, dir.path());
    let o = merge();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("they differ in the nvarray binary:"), "{err}");
    assert!(err.contains(&binary), "{err}");
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

fn slurm_local(action: &str, dir: &Path) -> Output {
    Command::new(scripts().join("slurm-local.sh"))
        .arg(action)
        .arg(dir)
        .output()
        .expect("run slurm-local.sh")
}

/// `scripts/slurm-sweep.sh --wait` on `cluster` with `script_flags`, for the sweep `sweep`.
fn slurm_sweep(cluster: &Cluster, script_flags: &[&str], sweep: &[&str]) -> Output {
    Command::new(scripts().join("slurm-sweep.sh"))
        .env("SLURM_CONF", cluster.dir.join("slurm.conf"))
        .arg("--wait")
        .args(script_flags)
        .arg("--nvarray")
        .arg(env!("CARGO_BIN_EXE_nvarray"))
        .arg("--")
        .args(sweep)
        .output()
        .expect("run slurm-sweep.sh")
}

/// The daemons' PIDs of the cluster in `dir`, from their PID files.
fn daemon_pids(dir: &Path) -> Vec<String> {
    ["munged", "slurmctld", "slurmd"]
        .iter()
        .map(|d| std::fs::read_to_string(dir.join(format!("{d}.pid"))).unwrap_or_default())
        .collect()
}

#[test]
fn a_slurm_job_array_of_four_shards_merges_into_the_whole_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let cluster_dir = dir.path().join("cluster");
    let o = slurm_local("start", &cluster_dir);
    let stdout = String::from_utf8_lossy(&o.stdout);
    if o.status.code() == Some(77) {
        eprintln!("{}", stdout.trim());
        return;
    }
    let cluster = Cluster { dir: cluster_dir };
    assert!(o.status.success(), "{stdout}{}", stderr(&o));

    // Started again: the running cluster is reused, not doubled (a second munged over the
    // first's key and PID file would be left running by `stop`).
    let pids = daemon_pids(&cluster.dir);
    let o = slurm_local("start", &cluster.dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("already running"), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("export SLURM_CONF="));
    assert_eq!(daemon_pids(&cluster.dir), pids);

    // A request no node can hold is refused before anything is submitted, not left pending
    // for ever.
    let cpus = std::thread::available_parallelism().unwrap().get() + 2;
    let o = slurm_sweep(
        &cluster,
        &[
            "--shards",
            "2",
            "--cpus-per-task",
            &cpus.to_string(),
            "--dir",
            path(&dir.path().join("too-big")),
        ],
        &SWEEP,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the largest node has"),
        "{}",
        stderr(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).is_empty(),
        "nothing submitted"
    );

    // Shards that fail (a value out of range): the script fails too, naming every task and
    // what its log says, and the merge that never ran.
    let mut failing = SWEEP.to_vec();
    failing[7] = "memory.controllers=1,0";
    let o = slurm_sweep(
        &cluster,
        &["--shards", "2", "--dir", path(&dir.path().join("failing"))],
        &failing,
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("2 of 2 shard tasks failed (tasks 0 1"),
        "{err}"
    );
    assert!(
        err.contains("memory.controllers = 0 is out of range"),
        "{err}"
    );
    assert!(err.contains("DependencyNeverSatisfied"), "{err}");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("merged"));

    let run = dir.path().join("run");
    let o = slurm_sweep(&cluster, &["--shards", "4", "--dir", path(&run)], &SWEEP);
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(&o)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("merged: "));
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
