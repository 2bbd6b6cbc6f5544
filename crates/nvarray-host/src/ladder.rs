//! The Moneta software-stack ladder: how a thread's commands reach the device and how it
//! learns they are done, one cost removed per step (see `Stack`).
//!
//! - `Own`: the thread's own queue pair (`atomic`, `spin`): lock-free issue.
//! - `Shared`: one queue pair for every thread behind a lock (`nosched`): issue takes the
//!   lock; a waiter takes it to drain the completion queue, parks other threads' completions
//!   for them and wakes them, and sleeps on the queue pair's interrupt.
//! - `Scheduled`: as `Shared`, but requests are handed to a scheduler thread that issues them
//!   (`baseline`), the I/O scheduler hop of the kernel block layer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use nvarray_emu::irq::Irq;

use crate::options::{CompletionMode, Stack};
use crate::{Device, Done, Prepared, QueuePair};

/// One thread's way to the device.
pub enum Issuer {
    Own(QueuePair),
    Shared(Arc<SharedQueue>),
    Scheduled(Arc<SharedQueue>, Arc<Scheduler>),
}

impl Issuer {
    /// The issuer `stack` gives a new thread. `shared` holds the stack's shared state, built
    /// by `LadderShared::new` once per device.
    pub fn new(device: &Device, shared: &LadderShared, completion: CompletionMode) -> Issuer {
        match (device.options().stack, shared) {
            (Stack::Spin, _) => Issuer::Own(device.queue_pair(completion)),
            (Stack::Atomic, _) => Issuer::Own(device.queue_pair(CompletionMode::Sleep)),
            (_, LadderShared::Locked(q)) => Issuer::Shared(Arc::clone(q)),
            (_, LadderShared::Scheduled(q, s)) => Issuer::Scheduled(Arc::clone(q), Arc::clone(s)),
            (_, LadderShared::None) => {
                unreachable!("LadderShared::new builds what the stack needs")
            }
        }
    }

    pub fn issue(&mut self, p: Prepared) {
        match self {
            Issuer::Own(qp) => qp.issue(p),
            Issuer::Shared(q) => q.issue(p),
            Issuer::Scheduled(_, s) => s.enqueue(p),
        }
    }

    /// Blocks until at least one of this thread's commands completes; hands each to `f`.
    /// `mine` says which tags are this thread's (on shared queue pairs).
    pub fn wait(&mut self, mine: &dyn Fn(usize) -> bool, f: &mut dyn FnMut(Done)) -> usize {
        match self {
            Issuer::Own(qp) => qp.wait(f),
            Issuer::Shared(q) | Issuer::Scheduled(q, _) => q.wait(mine, f),
        }
    }

    /// As `wait`, but on the thread's own queue pair it polls only until `until_ns` (the
    /// device's clock, `Device::now_ns`) and may return 0: a thread with a request due then (a
    /// trace replayed at its timestamps) issues it on time instead of blocking past it. On
    /// shared queue pairs it waits as `wait`.
    pub fn wait_until(
        &mut self,
        until_ns: u64,
        mine: &dyn Fn(usize) -> bool,
        f: &mut dyn FnMut(Done),
    ) -> usize {
        match self {
            Issuer::Own(qp) => loop {
                let n = qp.poll(&mut *f);
                if n > 0 || qp.now_ns() >= until_ns {
                    return n;
                }
                std::hint::spin_loop();
            },
            Issuer::Shared(_) | Issuer::Scheduled(..) => self.wait(mine, f),
        }
    }
}

/// State a stack shares between threads.
pub enum LadderShared {
    None,
    Locked(Arc<SharedQueue>),
    Scheduled(Arc<SharedQueue>, Arc<Scheduler>),
}

impl LadderShared {
    pub fn new(device: &Device) -> LadderShared {
        match device.options().stack {
            Stack::Spin | Stack::Atomic => LadderShared::None,
            Stack::NoSched => LadderShared::Locked(Arc::new(SharedQueue::new(device))),
            Stack::Baseline => {
                let q = Arc::new(SharedQueue::new(device));
                let s = Scheduler::start(Arc::clone(&q));
                LadderShared::Scheduled(q, s)
            }
        }
    }
}

impl Drop for LadderShared {
    fn drop(&mut self) {
        if let LadderShared::Scheduled(_, s) = self {
            s.stop();
        }
    }
}

/// One queue pair shared by every thread behind a lock.
pub struct SharedQueue {
    inner: Mutex<SharedInner>,
    irq: Arc<Irq>,
}

struct SharedInner {
    qp: QueuePair,
    /// Completions reaped by one thread on behalf of another, by tag.
    parked: Vec<Option<Done>>,
}

impl SharedQueue {
    fn new(device: &Device) -> SharedQueue {
        let qp = device.queue_pair(CompletionMode::Sleep);
        let irq = Arc::clone(qp.irq());
        SharedQueue {
            inner: Mutex::new(SharedInner {
                qp,
                parked: (0..device.tags()).map(|_| None).collect(),
            }),
            irq,
        }
    }

    fn issue(&self, p: Prepared) {
        self.inner.lock().expect("queue lock").qp.issue(p);
    }

    fn wait(&self, mine: &dyn Fn(usize) -> bool, f: &mut dyn FnMut(Done)) -> usize {
        loop {
            let mut inner = self.inner.lock().expect("queue lock");
            let SharedInner { qp, parked } = &mut *inner;
            let mut others = false;
            qp.poll(|done| {
                let tag = done.tag.index();
                others |= !mine(tag);
                // Its owner finishes it (freeing the tag) before the tag can complete again.
                debug_assert!(
                    parked[tag].is_none(),
                    "tag {tag} completed twice uncollected"
                );
                parked[tag] = Some(done);
            });
            let mut n = 0;
            for (tag, slot) in parked.iter_mut().enumerate() {
                if mine(tag) {
                    if let Some(done) = slot.take() {
                        f(done);
                        n += 1;
                    }
                }
            }
            if n > 0 {
                drop(inner);
                if others {
                    // Their owners may be asleep: wake them to collect.
                    self.irq.raise();
                }
                return n;
            }
            if !qp.emulator().has_device_threads() {
                // Inline: the device runs only when a thread polls, so nap until the model's
                // next deadline instead of waiting for an interrupt nobody would raise.
                let emu = std::sync::Arc::clone(qp.emulator());
                drop(inner);
                if others {
                    self.irq.raise();
                }
                crate::nap::inline_nap(&emu);
                continue;
            }
            // Arm under the lock: any thread that parks a completion for us after this takes
            // the lock after us and then raises the interrupt.
            self.irq.arm();
            if inner.qp.has_completion() {
                // Not `disarm`: other threads may be asleep on this shared interrupt, and
                // disarming would turn the next `raise` into a no-op that leaves them asleep.
                // Left armed, the next `raise` pays a futex wake nobody needed, at worst.
                continue;
            }
            drop(inner);
            if others {
                self.irq.raise();
                continue;
            }
            self.irq.wait();
        }
    }
}

/// The scheduler thread of `baseline`: requesters hand it commands through a locked queue and
/// a condition variable; it issues them on the shared queue pair.
pub struct Scheduler {
    queue: Mutex<VecDeque<Prepared>>,
    ready: Condvar,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Scheduler {
    fn start(target: Arc<SharedQueue>) -> Arc<Scheduler> {
        let s = Arc::new(Scheduler {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let me = Arc::clone(&s);
        let handle = std::thread::Builder::new()
            .name("nvarray-io-scheduler".into())
            .spawn(move || me.run(&target))
            .expect("spawn the scheduler thread");
        *s.thread.lock().expect("scheduler lock") = Some(handle);
        s
    }

    fn run(&self, target: &SharedQueue) {
        loop {
            let mut queue = self.queue.lock().expect("scheduler lock");
            while queue.is_empty() {
                if self.stop.load(Ordering::Relaxed) {
                    return;
                }
                queue = self.ready.wait(queue).expect("scheduler lock");
            }
            let p = queue.pop_front().expect("not empty");
            drop(queue);
            target.issue(p);
        }
    }

    fn enqueue(&self, p: Prepared) {
        self.queue.lock().expect("scheduler lock").push_back(p);
        self.ready.notify_one();
    }

    fn stop(&self) {
        {
            // Set under the lock so the scheduler cannot miss it between its check and wait.
            let _queue = self.queue.lock().expect("scheduler lock");
            self.stop.store(true, Ordering::Relaxed);
        }
        self.ready.notify_all();
        if let Some(t) = self.thread.lock().expect("scheduler lock").take() {
            let _ = t.join();
        }
    }
}
