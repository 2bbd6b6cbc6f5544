//! `--cpus` pins the device threads where it says, and the machine-jitter probe measures only
//! the time a thread spent spinning idle.

use nvarray_host::options::{allowed_cpus, CpuList};
use nvarray_host::{CompletionMode, Device, Options};
use nvarray_model::presets::preset;

fn open(device_threads: usize, cpus: CpuList) -> Result<Device, nvarray_host::HostError> {
    let config = preset("moneta")
        .unwrap()
        .load(&[("memory.capacity_bytes".into(), (1u64 << 20).to_string())])
        .unwrap();
    let options = Options {
        device_threads,
        buffer_bytes: Some(16 * 1024),
        cpus,
        ..Options::default()
    };
    Device::open(&config, &options)
}

/// QD 1 reads of 4 KiB, `n` of them: moneta takes ~8 µs each, time a waiter spins idle.
fn read_some(device: &Device, completion: CompletionMode, n: usize) {
    let mut qp = device.queue_pair(completion);
    let mut buf = vec![0u8; 4096];
    for i in 0..n {
        qp.read_at(device, &mut buf, (i as u64 * 4096) % (1 << 20))
            .unwrap();
    }
}

/// The CPU lists the kernel lets this process's device threads run on (their status files).
/// Thread names are cut to 15 bytes there: `nvarray-device-`.
fn device_threads_cpus_allowed() -> Vec<String> {
    let mut lists = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.starts_with("nvarray-device") {
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            lists.extend(
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .map(|l| l.trim().to_string()),
            );
        }
    }
    lists
}

#[test]
fn device_threads_run_on_the_first_cpus_of_the_list_and_host_threads_on_the_next() {
    let allowed = CpuList::parse(
        &allowed_cpus()
            .unwrap()
            .iter()
            .rev()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(","),
    )
    .unwrap();
    let device = open(1, allowed.clone()).unwrap();
    let first = allowed.nth(0).unwrap();
    // Other tests run device threads at the same time, unpinned: one of them is ours.
    let lists = device_threads_cpus_allowed();
    assert!(lists.contains(&first.to_string()), "{lists:?}");
    // Host thread 0 takes the CPU after the device thread's, wrapping around on one CPU.
    assert_eq!(device.host_cpu(0), allowed.nth(1));
    assert_eq!(device.host_cpu(allowed.len()), allowed.nth(1));
    let unpinned = open(1, CpuList::default()).unwrap();
    assert_eq!(unpinned.host_cpu(0), None);
}

#[test]
fn a_cpu_the_process_may_not_run_on_is_refused_before_anything_starts() {
    let allowed = allowed_cpus().unwrap();
    let outside = (0..1024).find(|c| !allowed.contains(c)).unwrap();
    let e = open(1, CpuList::parse(&outside.to_string()).unwrap())
        .err()
        .expect("refused");
    assert!(e.is_input_error(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!("CPU {outside} is not one this process may run on")),
        "{text}"
    );
}

#[test]
fn a_device_thread_spinning_idle_measures_the_machines_jitter() {
    let start = std::time::Instant::now();
    let device = open(1, CpuList::default()).unwrap();
    read_some(&device, CompletionMode::Spin, 2_000);
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    let j = device
        .jitter()
        .expect("the device thread spun idle between commands");
    assert!(j.samples > 0 && j.observed_ns > 0, "{j:?}");
    assert!(
        j.p50_ns <= j.p99_ns && j.p99_ns <= j.p99_99_ns && j.p99_99_ns <= j.max_ns,
        "{j:?}"
    );
    // Idle spinning is part of the run's time.
    assert!(j.observed_ns < elapsed_ns, "{j:?} in {elapsed_ns} ns");
}

#[test]
fn inline_threads_sample_jitter_only_while_they_spin() {
    // Inline, spinning: the host thread's own passes between its polls are the spin loop.
    let spinning = open(0, CpuList::default()).unwrap();
    read_some(&spinning, CompletionMode::Spin, 2_000);
    assert!(spinning.jitter().is_some_and(|j| j.samples > 0));
    // Inline, sleeping until shortly before each deadline: the time asleep is not jitter,
    // and every pass follows a sleep, so nothing is sampled.
    let sleeping = open(0, CpuList::default()).unwrap();
    read_some(&sleeping, CompletionMode::Sleep, 200);
    assert_eq!(sleeping.jitter(), None);
}
