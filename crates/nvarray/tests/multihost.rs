//! Several hosts on one emulated array, for real (issue 23): `scripts/multihost.sh --quick`
//! runs `nvarray serve` in one network namespace and fio's nbd engine, qemu-io and nbdcopy in
//! three others, each over its own veth pair and on its own range of the export, at the same
//! time; then a write flushed by one host is read back by the other two. Every host moved
//! data with its own tool, the sharing checks passed, the server served the requests, and no
//! namespace of the run is left. The script needs root, network namespaces and the three
//! clients; where it cannot run it exits 77 and this test prints `SKIPPED: ...`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The names `ip netns list` shows (first word of each line; "NAME (id: N)").
fn namespaces_now() -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("run ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn three_hosts_share_one_emulated_array_over_nbd() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/multihost.sh");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("multihost.json");
    let out = Command::new("bash")
        .arg(&script)
        .args(["--quick", "--clients", "3", "--json"])
        .arg(&json)
        .args(["--nvarray", env!("CARGO_BIN_EXE_nvarray")])
        .current_dir(dir.path())
        .output()
        .expect("run scripts/multihost.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(77) {
        let why = stdout
            .lines()
            .find(|l| l.starts_with("SKIPPED"))
            .unwrap_or("SKIPPED: scripts/multihost.sh cannot run here");
        eprintln!("{why}");
        return;
    }
    assert!(
        out.status.success(),
        "scripts/multihost.sh failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let text = std::fs::read_to_string(&json).expect("the script wrote --json FILE");
    let report: Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(report["passed"], Value::Bool(true), "{report:#}");

    // Three client hosts, each with its own tool, address and range, each moving data.
    let hosts = report["hosts"].as_array().expect("hosts");
    assert_eq!(hosts.len(), 3, "{report:#}");
    let mut tools: Vec<&str> = hosts.iter().map(|h| h["tool"].as_str().unwrap()).collect();
    tools.sort_unstable();
    assert_eq!(tools, ["fio", "nbdcopy", "qemu-io"], "{report:#}");
    let mut addresses: Vec<&str> = hosts
        .iter()
        .map(|h| h["address"].as_str().unwrap())
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    assert_eq!(addresses.len(), 3, "one address per host: {report:#}");
    let mut host_read = 0;
    let mut host_written = 0;
    for h in hosts {
        assert_eq!(h["ok"], Value::Bool(true), "{h:#}");
        assert!(h["bytes"].as_u64().is_some_and(|b| b > 0), "{h:#}");
        assert!(h["ops"].as_u64().is_some_and(|n| n > 0), "{h:#}");
        assert!(h["mb_per_s"].as_f64().is_some_and(|v| v > 0.0), "{h:#}");
        // The traffic went over the host's own veth pair.
        assert!(
            h["link_bytes"].as_u64() >= h["bytes"].as_u64(),
            "link carried less than the data: {h:#}"
        );
        host_read += h["read_bytes"].as_u64().unwrap();
        host_written += h["write_bytes"].as_u64().unwrap();
    }
    // The ranges do not overlap.
    let mut ranges: Vec<(u64, u64)> = hosts
        .iter()
        .map(|h| (h["offset"].as_u64().unwrap(), h["length"].as_u64().unwrap()))
        .collect();
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        assert!(
            pair[0].0 + pair[0].1 <= pair[1].0,
            "overlapping ranges {ranges:?}"
        );
    }

    // The sharing checks: written and flushed by one host, read back by the two others
    // (qemu-io on a connection opened before the write, nbdcopy compared byte for byte), and
    // a wrong pattern is caught.
    let sharing = &report["sharing"];
    assert_eq!(sharing["passed"], Value::Bool(true), "{sharing:#}");
    let checks = sharing["checks"].as_array().expect("sharing checks");
    for name in [
        "write-flush",
        "read-back-other-connection",
        "nbdcopy-compare",
        "mismatch-detected",
    ] {
        let check = checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {sharing:#}"));
        assert_eq!(check["passed"], Value::Bool(true), "{check:#}");
    }
    let check_hosts: Vec<&str> = checks
        .iter()
        .filter(|c| c["name"] != "mismatch-detected")
        .map(|c| c["host"].as_str().unwrap())
        .collect();
    assert_eq!(check_hosts.len(), 3, "{sharing:#}");
    assert!(
        check_hosts[0] != check_hosts[1]
            && check_hosts[1] != check_hosts[2]
            && check_hosts[0] != check_hosts[2],
        "three different hosts: {sharing:#}"
    );

    // The server served them all and stopped cleanly on SIGTERM.
    let server = &report["server"];
    assert!(
        server["requests"].as_u64().is_some_and(|n| n > 0),
        "{server:#}"
    );
    assert_eq!(server["exit_status"].as_i64(), Some(0), "{server:#}");
    assert!(
        server["write_bytes"].as_u64().unwrap() >= host_written,
        "the device saw fewer bytes written than the hosts wrote: {server:#}"
    );
    assert!(
        server["read_bytes"].as_u64().unwrap() >= host_read,
        "the device saw fewer bytes read than the hosts read: {server:#}"
    );

    // The server's own report has one stream per client host, each host's bytes at least
    // what that host moved (the sharing checks add to some), and nothing else.
    let seen = server["hosts"]
        .as_array()
        .expect("the server's per-host streams");
    assert_eq!(seen.len(), 3, "{server:#}");
    for h in hosts {
        let address = h["address"].as_str().unwrap();
        let s = seen
            .iter()
            .find(|s| s["host"] == address)
            .unwrap_or_else(|| panic!("the server has no stream for {address}: {server:#}"));
        assert!(
            s["read_bytes"].as_u64().unwrap() >= h["read_bytes"].as_u64().unwrap()
                && s["write_bytes"].as_u64().unwrap() >= h["write_bytes"].as_u64().unwrap(),
            "the server saw {address} move less than it did: {s:#} {h:#}"
        );
        // Its rates are over its own active time, which is within the server's.
        assert!(
            s["iops"].as_f64().is_some_and(|v| v > 0.0)
                && s["mb_per_s"].as_f64().is_some_and(|v| v > 0.0),
            "no rate for {address}: {s:#}"
        );
    }
    let per_host: u64 = seen.iter().map(|s| s["requests"].as_u64().unwrap()).sum();
    assert_eq!(
        Some(per_host),
        server["requests"].as_u64(),
        "the hosts' streams add up to the whole"
    );

    // Nothing of the run is left.
    assert_eq!(report["cleanup"]["clean"], Value::Bool(true), "{report:#}");
    let made: Vec<&str> = report["namespaces"]
        .as_array()
        .expect("namespaces")
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(made.len(), 4, "a server and three clients: {made:?}");
    let now = namespaces_now();
    for ns in &made {
        assert!(
            !now.iter().any(|n| n == ns),
            "namespace {ns} is left: {now:?}"
        );
    }
}
