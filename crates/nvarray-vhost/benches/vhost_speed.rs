//! `cargo bench -p nvarray-vhost --bench vhost_speed`: what the vhost-user-blk back end costs
//! per request, beside Debian's `qemu-storage-daemon` (a vhost-user-blk export of a file) in
//! the same run.
//!
//! One front end (`TestVmm`: the VMM's side of vhost-user and a virtio-blk driver, no guest,
//! waiting on its call eventfd as a guest waits for its interrupt) keeps 4 KiB random reads,
//! then writes, in flight at queue depth 1 and 16 on one virtqueue, for a few seconds each,
//! against:
//! - nvarray's back end in this process, on the `null` device (the back end's own path: the
//!   model completes every command at once) and on `moneta` (the model's time kept), both on a
//!   file backing;
//! - `qemu-storage-daemon` on the same file (`cache.direct=off`, its default AIO), a child
//!   process.
//!
//! The back end's CPU is measured, not the client's: for nvarray, this process's CPU less the
//! client thread's (`RUSAGE_THREAD`); for qemu-storage-daemon, its own (`/proc/PID/stat`).
//! Printed per request (µs) and per GB moved, with nvarray's ratio to qemu-storage-daemon's;
//! each cell the median of 3 runs. Issue 59's target: nvarray ≤ 0.5× at 4 KiB.
//!
//! With `NVARRAY_BENCH_SMOKE` set (the test command's smoke run): one short run of each,
//! nothing compared. Without `qemu-storage-daemon` installed its rows say so.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvarray_host::options::BackingKind;
use nvarray_host::{Device, Options};
use nvarray_vhost::client::TestVmm;
use nvarray_vhost::{VhostOptions, VhostServer};

const SIZE: u64 = 256 << 20;
const BLOCK: u32 = 4096;

fn smoke() -> bool {
    std::env::var_os("NVARRAY_BENCH_SMOKE").is_some()
}

fn run_time() -> Duration {
    if smoke() {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(3)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rusage_seconds(who: i32) -> f64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a live rusage and `who` one of RUSAGE_SELF or RUSAGE_THREAD.
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// CPU seconds of the back end: this process less the calling (client) thread.
fn in_process_server_seconds() -> f64 {
    rusage_seconds(libc::RUSAGE_SELF) - rusage_seconds(libc::RUSAGE_THREAD)
}

fn child_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name's closing parenthesis: utime is the 12th, stime the 13th.
    let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / hz
}

/// One measurement: (requests per second, back-end CPU µs per request).
fn measure(socket: &Path, depth: usize, write: bool, cpu: &dyn Fn() -> f64) -> (f64, f64) {
    let mut vmm = TestVmm::connect(socket, 1, u64::from(BLOCK)).expect("connect to the back end");
    // Warm up (the first touches of the file, the queue pair's creation).
    vmm.load(0, depth, BLOCK, write, run_time() / 10).unwrap();
    let (cpu0, t0) = (cpu(), Instant::now());
    let (n, failed) = vmm.load(0, depth, BLOCK, write, run_time()).unwrap();
    let (cpu1, secs) = (cpu(), t0.elapsed().as_secs_f64());
    assert_eq!(failed, 0, "requests failed");
    (n as f64 / secs, (cpu1 - cpu0) / n as f64 * 1e6)
}

fn nvarray_server(
    preset: &str,
    image: &Path,
    socket: &Path,
) -> (Arc<VhostServer>, std::thread::JoinHandle<()>) {
    let mut config = nvarray_model::presets::preset(preset)
        .unwrap()
        .load(&[])
        .unwrap();
    config.memory.capacity_bytes = SIZE;
    let options = Options {
        backing: BackingKind::File {
            path: image.to_path_buf(),
            durable: false,
            read_only: false,
            sparse: false,
        },
        // As `nvarray serve` picks for these devices on 2 cores: inline.
        device_threads: 0,
        ..Options::default()
    };
    let device = Arc::new(Device::open(&config, &options).expect("open the device"));
    let server = Arc::new(
        VhostServer::bind(
            device,
            VhostOptions {
                socket: socket.to_path_buf(),
                read_only: false,
                queues: 1,
                serial: "bench".into(),
            },
            Arc::new(|_: &str| {}),
        )
        .unwrap(),
    );
    let running = Arc::clone(&server);
    let thread = std::thread::spawn(move || running.run().unwrap());
    (server, thread)
}

fn qemu_storage_daemon(image: &Path, socket: &Path) -> Option<Child> {
    let child = Command::new("qemu-storage-daemon")
        .args([
            "--blockdev",
            &format!("driver=file,node-name=f,filename={},cache.direct=off", image.display()),
            "--export",
            &format!(
                "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path={},writable=on,num-queues=1",
                socket.display()
            ),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let until = Instant::now() + Duration::from_secs(10);
    while !socket.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child)
}

/// The table's columns: (queue depth, writes).
const SHAPES: [(usize, bool); 4] = [(1, false), (16, false), (1, true), (16, true)];

/// Each shape's (IOPS, CPU µs per request), the medians of `runs` measurements.
fn cells(
    socket: &Path,
    shapes: &[(usize, bool)],
    runs: usize,
    cpu: &dyn Fn() -> f64,
) -> Vec<(f64, f64)> {
    shapes
        .iter()
        .map(|&(depth, write)| {
            let m: Vec<(f64, f64)> = (0..runs)
                .map(|_| measure(socket, depth, write, cpu))
                .collect();
            (
                median(m.iter().map(|c| c.0).collect()),
                median(m.iter().map(|c| c.1).collect()),
            )
        })
        .collect()
}

struct Row {
    name: String,
    cells: Vec<(f64, f64)>,
}

fn main() {
    let dir = std::env::temp_dir().join(format!("nvarray-vhost-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let image: PathBuf = dir.join("disk.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(SIZE)
        .unwrap();
    let runs = if smoke() { 1 } else { 3 };
    let mut rows = Vec::new();

    for preset in ["null", "moneta"] {
        let socket = dir.join(format!("nvarray-{preset}.sock"));
        let (server, thread) = nvarray_server(preset, &image, &socket);
        let cells = cells(&socket, &SHAPES, runs, &in_process_server_seconds);
        server.shutdown_handle().shutdown();
        thread.join().unwrap();
        rows.push(Row {
            name: format!("nvarray ({preset})"),
            cells,
        });
    }
    let qsd_socket = dir.join("qsd.sock");
    match qemu_storage_daemon(&image, &qsd_socket) {
        Some(mut child) => {
            let pid = child.id();
            let cpu = move || child_seconds(pid);
            let cells = cells(&qsd_socket, &SHAPES, runs, &cpu);
            let _ = child.kill();
            let _ = child.wait();
            rows.push(Row {
                name: "qemu-storage-daemon".into(),
                cells,
            });
        }
        None => println!("qemu-storage-daemon: not installed (Debian qemu-utils); no peer row"),
    }
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "vhost-user-blk back ends, 4 KiB random, one virtqueue, median of {runs}: \
         kIOPS | back-end CPU µs per request"
    );
    println!(
        "{:<22} {:>18} {:>18} {:>18} {:>18}",
        "", "read QD1", "read QD16", "write QD1", "write QD16"
    );
    for r in &rows {
        let cells: Vec<String> = r
            .cells
            .iter()
            .map(|(iops, us)| format!("{:>7.1} | {:>6.2}", iops / 1e3, us))
            .collect();
        println!(
            "{:<22} {:>18} {:>18} {:>18} {:>18}",
            r.name, cells[0], cells[1], cells[2], cells[3]
        );
    }
    if let Some(peer) = rows.iter().find(|r| r.name == "qemu-storage-daemon") {
        for r in rows.iter().filter(|r| r.name != peer.name) {
            let ratios: Vec<String> = r
                .cells
                .iter()
                .zip(&peer.cells)
                .map(|(a, b)| format!("{:.2}×", a.1 / b.1))
                .collect();
            println!(
                "{} CPU per request ÷ qemu-storage-daemon's: read QD1 {}, read QD16 {}, write QD1 {}, \
                 write QD16 {} (per GB: the same ratios; µs per 4 KiB request × 244 = ms per GB)",
                r.name, ratios[0], ratios[1], ratios[2], ratios[3]
            );
        }
    }
}
