//! End-to-end tests of `nvarray repro` and `nvarray presets show --protocol-cost`: the report
//! and plots are written, and the command printed beside each simulator number, run as a
//! user would run it, gives that number.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nvarray_repro::{seeds, Experiment, Seed};
use serde_json::Value;

fn nvarray_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run nvarray")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nvarray-repro-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn every_printed_simulator_command_gives_the_reported_number() {
    let dir = scratch("commands");
    let out = nvarray_in(
        &dir,
        &[
            "repro",
            "moneta",
            "storage-future",
            "--sim-only",
            "--out",
            "r",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("moneta-headline"), "{summary}");
    assert!(summary.contains("report.md"), "{summary}");
    let out_dir = dir.join("r");
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(report.contains("The Future of Storage"));
    assert!(report.contains("nvarray sim --preset hdd"));
    for figure in ["storage-future", "moneta-latency-sweep", "moneta-headline"] {
        for ext in ["svg", "png"] {
            let plot = out_dir.join(format!("{figure}.{ext}"));
            assert!(
                std::fs::metadata(&plot).unwrap().len() > 1000,
                "{}",
                plot.display()
            );
        }
    }
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let reported = |id: &str| {
        results
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|f| f["rows"].as_array().unwrap())
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing"))["value"]
            .as_f64()
    };
    let mut checked = 0;
    for seed in [Seed::Moneta, Seed::StorageFuture] {
        for figure in seeds::figures(seed) {
            for row in &figure.rows {
                if !row
                    .experiments
                    .iter()
                    .all(|e| matches!(e, Experiment::Sim(_)))
                {
                    assert_eq!(reported(&row.id), None, "{}: a machine row ran", row.id);
                    continue;
                }
                // Each command exactly as printed, run from the report's directory (job files
                // are relative to it).
                let outcomes: Vec<Value> = row
                    .experiments
                    .iter()
                    .map(|e| {
                        let command = e.command();
                        let words: Vec<&str> = command.split_whitespace().collect();
                        assert_eq!(words[0], "nvarray", "{command}");
                        let out = nvarray_in(&out_dir, &words[1..]);
                        assert!(
                            out.status.success(),
                            "{command}: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        serde_json::from_slice(&out.stdout).unwrap()
                    })
                    .collect();
                let refs: Vec<&Value> = outcomes.iter().collect();
                let by_hand = (row.measure)(&refs).expect("a number");
                // Equal but for the last bit: serde_json parses floats fast, not exactly.
                let reported = reported(&row.id).expect("reported");
                assert!(
                    (by_hand / reported - 1.0).abs() < 1e-12,
                    "{}: by hand {by_hand}, reported {reported}",
                    row.id
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 15, "only {checked} rows checked");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_an_error_that_names_the_choices() {
    let dir = scratch("bad");
    let out = nvarray_in(&dir, &["repro", "nonesuch", "--sim-only"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown seed") && err.contains("dc-express"),
        "{err}"
    );
    // An output directory that cannot be made: the user's mistake (exit 2), not a panic.
    let out = nvarray_in(
        &dir,
        &["repro", "moneta", "--sim-only", "--out", "/proc/nvarray"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot create /proc/nvarray"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn protocol_cost_shows_every_protocol_on_the_presets_link() {
    let dir = scratch("protocol");
    let out = nvarray_in(
        &dir,
        &["presets", "show", "dc-express-gen3x8", "--protocol-cost"],
    );
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    for text in ["dc-express *", "moneta ", "nvme ", "128-byte payloads"] {
        assert!(table.contains(text), "{text} missing:\n{table}");
    }
    let out = nvarray_in(
        &dir,
        &["presets", "show", "moneta", "--protocol-cost", "--json"],
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        rows.as_array().unwrap().len(),
        12,
        "3 protocols x read/write x 512 B/4 KiB"
    );
    // Moneta's own 4 KiB read: the command word, 32 data packets of 128 bytes, and the
    // interrupt, status request and status answer.
    let read_4k = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["protocol"] == "moneta" && r["op"] == "read" && r["len_bytes"] == 4096)
        .unwrap();
    assert_eq!(read_4k["to_host"]["data"]["packets"], 32);
    assert_eq!(read_4k["to_host"]["protocol"]["packets"], 2);
    assert_eq!(read_4k["to_device"]["protocol"]["packets"], 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The SQLite study's commands (`vnvml-sqlite`, run by `scripts/sqlite_ycsb.py`), each as the
/// report prints it but briefly (0.2 s, one run, 32 records: later flags win), give every
/// row and plot point the number it reads: a positive ratio.
#[test]
fn the_sqlite_studys_commands_give_each_row_its_number() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let vfs = root.join("target/native/nvarray-sqlite.so");
    assert!(
        vfs.exists(),
        "{} is missing: run scripts/build_native.sh",
        vfs.display()
    );
    let dir = scratch("sqlite");
    let figure = seeds::study("vnvml-sqlite")
        .expect("the study vnvml-sqlite")
        .into_iter()
        .find(|f| f.id == "vnvml-sqlite")
        .expect("the figure vnvml-sqlite");
    let run = |e: &Experiment| -> Value {
        let Experiment::SqliteYcsb { .. } = e else {
            panic!("{}: not the study's script", e.command());
        };
        let command = e.command();
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words[0], "scripts/sqlite_ycsb.py", "{command}");
        let out = Command::new("python3")
            .arg(root.join(words[0]))
            .args(&words[1..])
            .args(["--seconds", "0.2", "--runs", "1", "--records", "32"])
            .env("NVARRAY_PM_NVM_DIR", &dir)
            .env("TMPDIR", &dir)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{command}: stdout is not JSON ({e})"))
    };
    let positive = |what: &str, v: Option<f64>| {
        let v = v.unwrap_or_else(|| panic!("{what}: no number"));
        assert!(v.is_finite() && v > 0.0, "{what}: {v}");
    };
    let mut checked = 0;
    for row in &figure.rows {
        let outcomes: Vec<Value> = row.experiments.iter().map(run).collect();
        positive(&row.id, (row.measure)(&outcomes.iter().collect::<Vec<_>>()));
        checked += 1;
    }
    let Some(nvarray_repro::Plot::Lines { series, .. }) = &figure.plot else {
        panic!("vnvml-sqlite plots lines");
    };
    for point in series.iter().flat_map(|s| &s.points) {
        let outcome = run(&point.experiment);
        positive(&format!("x = {}", point.x), (point.measure)(&[&outcome]));
        checked += 1;
    }
    assert_eq!(checked, 7, "4 rows and 3 plot points");
    std::fs::remove_dir_all(&dir).unwrap();
}
