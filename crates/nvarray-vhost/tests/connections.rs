//! 40 VMMs of 8 virtqueues each, one after another, leave no descriptor or thread behind
//! (alone in its process: the counts are the process's).

mod common;
use common::Running;
use nvarray_vhost::client::TestVmm;

#[test]
fn connections_leave_no_descriptor_or_thread_behind() {
    let r = Running::start(false, 8);
    let count = |what: &str| {
        std::fs::read_dir(format!("/proc/self/{what}"))
            .unwrap()
            .count()
    };
    // One connection first: whatever is made once (the device's queue pair for a flush).
    let mut vmm = TestVmm::connect(&r.socket, 1, 4096).unwrap();
    assert_eq!(vmm.flush(0).unwrap(), 0);
    drop(vmm);
    r.wait_for_log("guest 1 disconnected");
    let (fds, threads) = (count("fd"), count("task"));
    for n in 2..=41 {
        let mut vmm = TestVmm::connect(&r.socket, 8, 4096).unwrap();
        assert_eq!(vmm.flush(n % 8).unwrap(), 0);
        drop(vmm);
        r.wait_for_log(&format!("guest {n} disconnected"));
    }
    assert_eq!(count("fd"), fds, "descriptors left by 40 VMMs of 8 queues");
    assert_eq!(count("task"), threads, "threads left by 40 VMMs");
    r.stop();
}
