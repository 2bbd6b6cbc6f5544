//! `nvarray serve --vhost-user-blk` without a guest: a vhost-user front end in this process
//! (`nvarray_vhost::client::TestVmm`) and an NBD client on the same device at once, the report's
//! stream per guest, and bad flags refused with a clear message (exit status 2). The real
//! guests are `tests/guest.rs`'s.

use std::os::unix::net::UnixStream;
use std::time::Duration;

mod common;
use common::run_for;
use common::serve::Serve;
use nvarray_nbd::client::Client;
use nvarray_nbd::io::Stream;
use nvarray_vhost::client::TestVmm;

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nvarray-vhost-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_vm_and_an_nbd_client_share_one_device_and_the_report_names_the_guest() {
    let dir = scratch("shared");
    let (vhost, nbd) = (dir.join("v.sock"), dir.join("n.sock"));
    let args: Vec<String> = [
        "serve".to_string(),
        "--preset".into(),
        "dram".into(),
        "--size".into(),
        "64m".into(),
        format!("--vhost-user-blk=unix:{}", vhost.display()),
        format!("--listen=unix:{}", nbd.display()),
        "--vhost-queues".into(),
        "2".into(),
        "--json".into(),
    ]
    .to_vec();
    let serve = Serve::start_with(&args, nbd.clone());
    let help = serve.output();
    assert!(help.contains("vhost-user-blk on unix:"), "{help}");
    assert!(
        help.contains("vhost-user-blk-pci,chardev=nvarray"),
        "{help}"
    );

    let mut vmm = TestVmm::connect(&vhost, 2, 64 * 1024).unwrap();
    assert_eq!(vmm.disk.capacity_bytes, 64 << 20);
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(vmm.write_at(1, 1 << 20, &data).unwrap(), 0);
    assert_eq!(vmm.flush(0).unwrap(), 0);
    // The NBD client reads what the guest wrote.
    let stream = Stream::Unix(UnixStream::connect(&nbd).unwrap());
    let mut client = Client::connect(stream, "nvarray", true).unwrap();
    match client.read(1 << 20, 65536).unwrap() {
        nvarray_nbd::client::Reply::Ok(read) => {
            assert!(read == data, "NBD reads what the guest wrote")
        }
        other => panic!("NBD read failed: {other:?}"),
    }
    drop(client);
    drop(vmm);

    let (status, out) = serve.stop("-TERM");
    assert!(status.success(), "{out}");
    // The reports at exit, NBD's then the guests': JSON documents one after the other.
    let json = &out[out.find("\n{").expect("reports in JSON") + 1..];
    let reports: Vec<serde_json::Value> = serde_json::Deserializer::from_str(json)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let guests = reports
        .iter()
        .find(|r| r["streams"][0]["name"] == "guest 1")
        .unwrap_or_else(|| panic!("no report with a guest stream: {out}"));
    // One write of 64 KiB and one flush.
    assert_eq!(guests["streams"][0]["write_bytes"], 65536, "{guests}");
    assert_eq!(guests["streams"][0]["requests"], 2, "{guests}");
    assert!(!vhost.exists(), "the socket is removed at exit");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_vhost_flags_are_refused_with_a_reason() {
    let dir = scratch("bad");
    let sock = format!("unix:{}", dir.join("v.sock").display());
    let cases: [(&[&str], &str); 3] = [
        (&["--vhost-user-blk", "/tmp/x.sock"], "expected unix:PATH"),
        (
            &["--vhost-user-blk", &sock, "--vhost-queues", "0"],
            "1 to 64 virtqueues",
        ),
        (
            &["--vhost-user-blk", &sock, "--vhost-queues", "65"],
            "1 to 64 virtqueues",
        ),
    ];
    for (extra, why) in cases {
        let mut args = vec!["serve", "--preset", "dram", "--size", "16m"];
        args.extend_from_slice(extra);
        let (out, killed) = run_for(
            env!("CARGO_BIN_EXE_nvarray"),
            &args,
            Duration::from_secs(20),
        );
        assert!(!killed, "{args:?} kept running");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
    // A socket another back end answers on is refused, and left alone.
    let held = std::os::unix::net::UnixListener::bind(dir.join("v.sock")).unwrap();
    let (out, _) = run_for(
        env!("CARGO_BIN_EXE_nvarray"),
        &[
            "serve",
            "--preset",
            "dram",
            "--size",
            "16m",
            "--vhost-user-blk",
            &sock,
        ],
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is in use"), "{stderr}");
    drop(held);
    let _ = std::fs::remove_dir_all(&dir);
}
