//! `nvarray repro apps --quick`: Moneta's application study as a user runs it, real programs
//! on two emulated devices through the real front ends. Every program either reports its
//! figure with the device's share of it, or says why it was skipped; the faster device's raw
//! I/O is faster; the report, the JSON and the figure are written.

use std::process::Command;

use serde_json::Value;

/// The programs of the study, as `scripts/apps.py` names them.
const APPS: [&str; 6] = [
    "bdb-btree",
    "bdb-hash",
    "sqlite",
    "pg-tpcb",
    "pg-select",
    "paging",
];

#[test]
fn the_application_study_reports_every_program_or_why_not() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: the application study needs root (loop devices, mounts, cgroups)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("apps");
    let out = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(["repro", "apps", "--quick", "--out"])
        .arg(&out_dir)
        .output()
        .expect("run nvarray");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("apps.json")).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    let devices: Vec<&str> = results
        .iter()
        .map(|r| r["device"].as_str().unwrap())
        .collect();
    assert_eq!(devices, ["pcie-flash-2010", "dram"]);
    for r in results {
        let skipped = r["skipped"].to_string();
        for pattern in ["4k-randread", "4k-randwrite", "512k-read", "512k-write"] {
            for layer in ["raw", "fs"] {
                let mbps = r[layer][pattern]["mb_per_s"].as_f64();
                assert!(
                    mbps.is_some_and(|v| v > 0.0) || skipped.len() > 2,
                    "{} {layer} {pattern}: {r:#}",
                    r["device"]
                );
            }
        }
        for app in APPS {
            let a = &r["apps"][app];
            match a["value"].as_f64() {
                Some(v) => {
                    assert!(v > 0.0, "{} {app}: {a}", r["device"]);
                    let device = &a["device"];
                    let share = device["host_share"].as_f64().unwrap();
                    assert!((0.0..=1.0).contains(&share), "{app}: {device}");
                    if app != "pg-select" {
                        // Durable commits and page-outs reach the device (a read-only run may
                        // be served from the page cache).
                        assert!(device["requests"].as_u64() > Some(0), "{app}: {device}");
                    }
                }
                None => assert!(
                    a["skipped"].as_str().is_some_and(|why| !why.is_empty()),
                    "{} {app}: neither a figure nor why not: {a}",
                    r["device"]
                ),
            }
        }
    }
    let speedups = report["speedups"].as_array().unwrap();
    assert_eq!(
        speedups[0]["raw"].as_f64(),
        Some(1.0),
        "normalised to the first"
    );
    if let Some(dram) = speedups[1]["raw"].as_f64() {
        assert!(
            dram > 1.0,
            "emulated DRAM is faster than 2010's flash: {speedups:?}"
        );
    }
    let md = std::fs::read_to_string(out_dir.join("apps.md")).unwrap();
    for expected in [
        "| dram |",
        "| pcie-flash-2010 |",
        "## Commands",
        "nvarray repro apps --out",
    ] {
        assert!(md.contains(expected), "{expected}: {md}");
    }
    let svg = std::fs::read_to_string(out_dir.join("apps.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<rect"), "{svg}");
    // Nothing left mounted or attached.
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains("nvarray-apps-"), "{mounts}");
}
