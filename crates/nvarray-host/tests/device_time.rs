//! The emulated device keeps time like hardware (issue 56): a command is dated by its
//! doorbell, not by when a thread got round to it, and a device thread with nothing to do
//! gives its core back and wakes on the doorbell.

use std::time::{Duration, Instant};

use nvarray_host::{Device, Opcode, Options, QueuePair};
use nvarray_model::presets::preset;
use nvarray_model::Verdict;

/// The null device: every command completes `latency_ns` after it reaches the device.
fn null_device(latency_ns: u64, device_threads: usize) -> Device {
    let config = preset("null")
        .unwrap()
        .load(&[
            ("memory.capacity_bytes".into(), (1u64 << 20).to_string()),
            ("model.null_latency_ns".into(), latency_ns.to_string()),
        ])
        .unwrap();
    let options = Options {
        device_threads,
        buffer_bytes: Some(16 * 1024),
        ..Options::default()
    };
    Device::open(&config, &options).unwrap()
}

/// Issues one 4 KiB read and waits for it. Returns the clock just before and just after the
/// issue (its doorbell is between) and the completion's modelled time.
fn read_once(device: &Device) -> (u64, u64, u64) {
    let mut qp = device.queue_pair(device.completion());
    let p = device.prepare(Opcode::Read, 0, 4096, None).unwrap();
    let before = device.now_ns();
    qp.issue(p);
    let after = device.now_ns();
    let mut deadline = None;
    while deadline.is_none() {
        qp.wait(|done| {
            deadline = Some(done.deadline_ns);
            device.finish(done, None).unwrap();
        });
    }
    (before, after, deadline.unwrap())
}

/// A command the device thread takes 300 µs after its doorbell (the thread was parked and the
/// kernel woke it that late) still completes its modelled 1 ms after the doorbell, on time.
/// Before, it was dated when taken: 1.3 ms after the doorbell.
#[test]
fn a_command_taken_late_completes_at_its_doorbell_plus_its_latency() {
    const LATENCY: u64 = 1_000_000;
    let device = null_device(LATENCY, 1);
    read_once(&device);
    device.slow_wakeups_by(300_000);
    for _ in 0..5 {
        eventually("the device thread parks", || device.device_asleep());
        let (before, after, deadline) = read_once(&device);
        assert!(
            (before + LATENCY..=after + LATENCY).contains(&deadline),
            "due {} ns after the issue began, {} ns after it ended: the doorbell plus {LATENCY}",
            deadline - before,
            deadline.saturating_sub(after)
        );
    }
    let l = device.lateness();
    assert_eq!(l.completions, 6);
    assert_ne!(l.verdict, Verdict::NotFaithful, "{l:?}");
}

/// Waits for every command `qp` has in flight and finishes them.
fn drain(device: &Device, qp: &mut QueuePair) {
    while qp.in_flight() > 0 {
        qp.wait(|done| device.finish(done, None).unwrap());
    }
}

/// A planted stall made the run's latest completion at least 2 ms late, and none of that is
/// the emulator's own lateness.
fn assert_late_by_the_machine_only(device: &Device, completions: u64, what: &str) {
    let l = device.lateness();
    assert_eq!(l.completions, completions);
    assert!(
        l.max_ns >= 2_000_000,
        "{what} was posted after the stall: {l:?}"
    );
    assert!(
        l.own_max_ns < 1_000_000,
        "the stall counted as the emulator's own lateness: {l:?}"
    );
}

/// Waits (bounded) until `cond` holds, checking it each millisecond.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// With nothing in flight the device thread sleeps on the doorbell, using next to no CPU, and
/// a command wakes it: its completion comes at its doorbell plus its latency.
#[test]
fn an_idle_device_thread_sleeps_and_the_doorbell_wakes_it() {
    const LATENCY: u64 = 500_000;
    let device = null_device(LATENCY, 1);
    // One command first: the device then knows its commands outlast a wake-up, and parks at
    // once when idle.
    read_once(&device);
    eventually("the device thread parks", || device.device_asleep());
    let cpu_before = device.device_cpu_ns();
    let idle = Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    let idle_ns = idle.elapsed().as_nanos() as u64;
    let cpu_idle = device.device_cpu_ns() - cpu_before;
    assert!(
        cpu_idle * 10 < idle_ns,
        "an idle device thread used {cpu_idle} ns of CPU in {idle_ns} ns"
    );
    let woken = device.doorbell_wakeups();
    let (before, after, deadline) = read_once(&device);
    assert!(device.doorbell_wakeups() > woken, "the doorbell woke it");
    assert!(
        (before + LATENCY..=after + LATENCY).contains(&deadline),
        "due {} ns after the issue began",
        deadline - before
    );
}

/// With one command in flight and its deadline far off, the device thread sleeps until
/// shortly before it (its wake margin) instead of spinning: it uses a fraction of the
/// command's time in CPU, and the completion is still on time.
#[test]
fn a_device_thread_sleeps_until_near_the_next_deadline() {
    const LATENCY: u64 = 20_000_000;
    let device = null_device(LATENCY, 1);
    read_once(&device);
    let cpu_before = device.device_cpu_ns();
    let (before, after, deadline) = read_once(&device);
    let cpu = device.device_cpu_ns() - cpu_before;
    assert!(
        (before + LATENCY..=after + LATENCY).contains(&deadline),
        "due {} ns after the issue began",
        deadline - before
    );
    assert!(
        cpu < LATENCY / 4,
        "the device thread used {cpu} ns of CPU over a {LATENCY} ns command"
    );
    let l = device.lateness();
    assert_eq!(l.completions, 2);
    assert_ne!(l.verdict, Verdict::NotFaithful, "{l:?}");
}

/// A device thread the kernel wakes 3 ms after it asked posts its completion late, and that
/// lateness is counted wake-late, the machine's, not the emulator's own; one that wakes in
/// time is not.
#[test]
fn a_wake_up_later_than_the_margin_is_counted_wake_late() {
    const LATENCY: u64 = 10_000_000;
    let device = null_device(LATENCY, 1);
    read_once(&device);
    device.slow_wakeups_by(3_000_000);
    let (before, _, deadline) = read_once(&device);
    assert!(deadline >= before + LATENCY);
    let l = device.lateness();
    assert_eq!(l.completions, 2);
    assert!(l.max_ns >= 2_000_000, "posted late: {l:?}");
    // The first command's wake-up may be late too on a busy machine; the slowed one is.
    assert!(l.wake_late >= 1, "{l:?}");
    assert!(
        l.own_max_ns < 2_000_000,
        "the late wake-up is not the emulator's own: {l:?}"
    );
}

/// Inline (no device thread), the device runs only in the host thread's polls. Commands that
/// fall due while the host runs its own code for 300 µs (half of it asleep, as a preempted
/// thread would be) are late only from its next poll, the first time it could have seen them
/// from any device: the emulator's own lateness is the poll's work, not the host's 300 µs.
/// Before, they counted from their deadlines: own lateness ≥ 250 µs, NOT FAITHFUL.
#[test]
fn inline_completions_due_in_the_hosts_own_code_are_late_from_its_next_poll() {
    const LATENCY: u64 = 20_000;
    let device = null_device(LATENCY, 0);
    let mut qp = device.queue_pair(device.completion());
    let mut completed = 0;
    for _ in 0..20 {
        for k in 0..2 {
            let p = device.prepare(Opcode::Read, k * 4096, 4096, None).unwrap();
            qp.issue(p);
        }
        // The first poll takes (and dates) both; they fall due 20 µs later.
        qp.poll(|done| {
            device.finish(done, None).unwrap();
            completed += 1;
        });
        let host = Instant::now();
        while host.elapsed() < Duration::from_micros(150) {
            std::hint::spin_loop();
        }
        std::thread::sleep(Duration::from_micros(150));
        while qp.in_flight() > 0 {
            qp.poll(|done| {
                device.finish(done, None).unwrap();
                completed += 1;
            });
        }
    }
    assert_eq!(completed, 40);
    let l = device.lateness();
    assert_eq!(l.completions, 40);
    assert!(
        l.host_code >= 20,
        "the deadlines fell in the host's own code: {l:?}"
    );
    assert!(
        l.own_p50_ns < 100_000,
        "the host's 300 µs counted as the emulator's own lateness: {l:?}"
    );
}

/// Two host threads running the device inline, a queue pair each (so each pair is served by
/// its own thread only). While one holds the model's lock paused (planted: its visit sleeps
/// 5 ms, as a thread the machine descheduled there), the other's completion falls due and
/// cannot be settled until the holder runs again: it is posted milliseconds late, and that
/// lateness is the machine's, not the emulator's own. Before, the waiting thread restarted its
/// chain at the lock and counted it as its own.
#[test]
fn a_pause_of_the_model_locks_holder_is_the_machines_for_the_other_threads() {
    // The scene needs B's stalled visit to begin before A's completion falls due; a machine
    // that deschedules B for milliseconds after the barrier misses it, and then the scene is
    // played again on a fresh device.
    for _ in 0..20 {
        if let Some(device) = a_completion_behind_a_paused_lock_holder() {
            assert_late_by_the_machine_only(&device, 2, "A's completion, waiting for the lock,");
            return;
        }
    }
    panic!("in 20 tries B never issued before A's completion fell due");
}

/// The scene of the test above: A's command is taken, then B's visit stalls 5 ms holding the
/// model's lock across A's deadline. `None` when B issued too late for that (A's deadline had
/// passed, or was under 500 µs away).
fn a_completion_behind_a_paused_lock_holder() -> Option<Device> {
    const LATENCY: u64 = 2_000_000;
    let device = null_device(LATENCY, 0);
    let a_taken = std::sync::Barrier::new(2);
    let a_issued_ns = std::sync::atomic::AtomicU64::new(0);
    let b_in_time = std::thread::scope(|s| {
        s.spawn(|| {
            let mut a = device.queue_pair(device.completion());
            let p = device.prepare(Opcode::Read, 0, 4096, None).unwrap();
            a_issued_ns.store(device.now_ns(), std::sync::atomic::Ordering::SeqCst);
            a.issue(p);
            a.poll(|_| panic!("not due yet"));
            a_taken.wait();
            drain(&device, &mut a);
        });
        let b = s.spawn(|| {
            let mut b = device.queue_pair(device.completion());
            a_taken.wait();
            // B's command is handed to the model well before A's deadline, by a visit that
            // stalls past it.
            device.stall_next_visit_by(5_000_000);
            let p = device.prepare(Opcode::Read, 4096, 4096, None).unwrap();
            let a_due_ns = a_issued_ns.load(std::sync::atomic::Ordering::SeqCst) + LATENCY;
            let in_time = device.now_ns() + 500_000 < a_due_ns;
            b.issue(p);
            drain(&device, &mut b);
            in_time
        });
        b.join().unwrap()
    });
    b_in_time.then_some(device)
}

/// Inline, a pass that saw a completion due and was then paused before posting it (planted:
/// the visit that takes it from the model sleeps 3 ms holding the model's lock, as a thread
/// preempted there) posts it 3 ms late, and that lateness is the machine's: without the pause
/// it would have been posted within its tolerance. Before, a pause after the deadline (or
/// after the poll that saw it) counted as the emulator's own.
#[test]
fn inline_a_pause_between_seeing_a_completion_and_posting_it_is_the_machines() {
    const LATENCY: u64 = 20_000;
    let device = null_device(LATENCY, 0);
    let mut qp = device.queue_pair(device.completion());
    let p = device.prepare(Opcode::Read, 0, 4096, None).unwrap();
    qp.issue(p);
    qp.poll(|_| panic!("not due yet"));
    std::thread::sleep(Duration::from_micros(200));
    // The next poll sees the first command due and takes the second; its visit to the model
    // for the first stalls before the first is posted.
    device.stall_next_visit_by(3_000_000);
    let p = device.prepare(Opcode::Read, 4096, 4096, None).unwrap();
    qp.issue(p);
    drain(&device, &mut qp);
    assert_late_by_the_machine_only(&device, 2, "the first command");
}

/// Pages per flash line in `filled_flash`: 64 dies of 160-page (640 KiB) blocks.
const LINE_PAGES: u64 = 64 * 160;

/// TLC flash behind an FTL whose lines hold `LINE_PAGES` pages, filled, two lines of data and
/// nine spare, collected oldest line first (FIFO), run inline; its flash operations take
/// 10 µs, so a run reaches its first collection in a fraction of a second.
fn filled_flash() -> Device {
    let overrides: Vec<(String, String)> = [
        ("memory.capacity_bytes", "80m"),
        ("memory.erase_block_bytes", "640k"),
        ("memory.read_latency_ns", "10000"),
        ("memory.write_latency_ns", "10000"),
        ("memory.erase_latency_ns", "10000"),
        ("ftl.enabled", "true"),
        ("ftl.victim", "fifo"),
        ("ftl.over_provisioning", "4.5"),
        ("ftl.gc_background_free_lines", "1"),
        ("ftl.gc_forced_free_lines", "1"),
        ("ftl.precondition", "fill"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let config = preset("tlc").unwrap().load(&overrides).unwrap();
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    Device::open(&config, &options).unwrap()
}

/// The collections the FTL has made so far, and whether it has map moves left to run.
fn collections(device: &Device) -> (u64, bool) {
    device.with_model(|m, _, _| {
        let victims = m
            .ftl_stats()
            .expect("flash behind an FTL")
            .counters
            .gc_victims;
        (victims, m.has_deferred())
    })
}

/// A collection of a whole line of 10,240 valid pages (the oldest line after a fill, FIFO's
/// victim) does not delay a read that reaches the device with the write that causes it: the
/// read touches no flash (its page was deallocated), so it is due a few µs later, and it is
/// posted on time. The collection's map moves, left for later, are run in slices between
/// passes. Before, the write that caused it copied the line inside the model's lock (0.27 ms
/// of real time, 7.5 ms for the default TLC line of 262,144 pages) and the read was posted
/// that late, counted as the emulator's own lateness.
#[test]
fn a_collection_of_10000_pages_in_progress_does_not_delay_a_read() {
    let device = filled_flash();
    let mut qp = device.queue_pair(device.completion());
    // The last page of the oldest line: unmapped, so reading it touches no flash.
    let unmapped = (LINE_PAGES - 1) * 4096;
    let p = device
        .prepare(Opcode::Deallocate, unmapped, 4096, None)
        .unwrap();
    qp.issue(p);
    drain(&device, &mut qp);
    const WRITE_PAGES: u32 = 32;
    let mut read_late_ns = None;
    // Writes over the second line's pages only, so the oldest line keeps its 10,239 valid
    // pages; nine spare lines are used up after about 72,000 pages.
    for i in 0..4 * LINE_PAGES {
        let page = LINE_PAGES + (i * u64::from(WRITE_PAGES)) % LINE_PAGES;
        let p = device
            .prepare(Opcode::Write, page * 4096, WRITE_PAGES * 4096, None)
            .unwrap();
        qp.issue(p);
        let p = device.prepare(Opcode::Read, unmapped, 4096, None).unwrap();
        qp.issue(p);
        let mut late = 0;
        while qp.in_flight() > 0 {
            qp.wait(|done| {
                if done.op == Opcode::Read {
                    late = device.now_ns().saturating_sub(done.deadline_ns);
                }
                device.finish(done, None).unwrap();
            });
        }
        if collections(&device).0 > 0 {
            read_late_ns = Some(late);
            break;
        }
    }
    let read_late_ns = read_late_ns.expect("a collection within four drive-writes");
    let l = device.lateness();
    assert!(
        l.own_max_ns < 50_000,
        "a completion was late by the collection (the read with it by {read_late_ns} ns): {l:?}"
    );
    let stats = device.with_model(|m, _, _| m.ftl_stats().unwrap());
    assert!(
        stats.counters.gc_pages_copied >= 10_000,
        "the victim was a whole line: {stats:?}"
    );
    // Inline, slices run in passes with nothing due soon: reads of the unmapped page leave
    // room between them.
    let start = Instant::now();
    while collections(&device).1 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the moves never ran"
        );
        let p = device.prepare(Opcode::Read, unmapped, 4096, None).unwrap();
        qp.issue(p);
        drain(&device, &mut qp);
    }
}
