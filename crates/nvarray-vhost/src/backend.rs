//! `BlkBackend`: what `vhost-user-backend`'s daemon asks of a virtio-blk device for one
//! connected VMM: the features and configuration space, guest memory, and the virtqueues'
//! events, each virtqueue on a vring worker thread of its own with its own `QueueWorker`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nvarray_host::tag_share::TagShare;
use nvarray_host::{Device, QueuePair};
use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::VhostUserBackend;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

use crate::guest::Guest;
use crate::queue_worker::{GuestRam, QueueWorker, Vring};
use crate::virtio_blk::{self, DiskGeometry, QUEUE_SIZE_MAX};

/// The back end of one VMM connection; cloned for each vring worker thread.
#[derive(Clone)]
pub struct BlkBackend(Arc<Shared>);

struct Shared {
    disk: DiskGeometry,
    ram: GuestRam,
    workers: Vec<Mutex<QueueWorker>>,
    /// Set when the VMM has gone (or shutdown): the workers take no more requests.
    stopping: Arc<AtomicBool>,
    /// The exit events' reading ends: `vhost-user-backend` takes them as raw descriptors and
    /// never closes them, so the back end does, once the daemon is gone (`close_exit_events`).
    exit_events: Mutex<Vec<RawFd>>,
}

impl BlkBackend {
    pub fn new(
        device: &Arc<Device>,
        disk: DiskGeometry,
        guest: &Arc<Guest>,
        tags: &Arc<TagShare>,
        ram: GuestRam,
    ) -> BlkBackend {
        // `VhostServer::bind` checked the options (`check_options`): a bit of a u64 per queue.
        assert!(
            disk.queues >= 1 && u32::from(disk.queues) <= u64::BITS,
            "{} virtqueues",
            disk.queues
        );
        let stopping = Arc::new(AtomicBool::new(false));
        let workers = (0..disk.queues)
            .map(|_| {
                Mutex::new(QueueWorker::new(
                    Arc::clone(device),
                    Arc::clone(guest),
                    Arc::clone(tags),
                    Arc::clone(&stopping),
                ))
            })
            .collect();
        BlkBackend(Arc::new(Shared {
            disk,
            ram,
            workers,
            stopping,
            exit_events: Mutex::new(Vec::new()),
        }))
    }

    /// The VMM has gone: the workers finish what they took and take nothing more.
    pub fn stop(&self) {
        self.0.stopping.store(true, Ordering::SeqCst);
    }

    fn worker(&self, queue: usize) -> Option<MutexGuard<'_, QueueWorker>> {
        // A worker that panicked left its queue's state behind; the queue is not served again.
        self.0.workers.get(queue).and_then(|w| w.lock().ok())
    }

    /// The queue pairs the guest's virtqueues used, once the daemon and its vring workers are
    /// gone: each waits for its worker's last pass, which ends with nothing in flight.
    pub fn into_queue_pairs(self) -> Vec<QueuePair> {
        let shared = Arc::try_unwrap(self.0)
            .unwrap_or_else(|_| panic!("the vring workers still hold the back end"));
        let fds = shared
            .exit_events
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        for fd in fds {
            // SAFETY: `fd` is an exit event's reading end, which `vhost-user-backend` took with
            // `into_raw_fd` and never closes; the daemon and its workers (the only users) are
            // gone, since no clone of the back end is left.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        shared
            .workers
            .into_iter()
            .filter_map(|w| w.into_inner().ok())
            .filter_map(QueueWorker::into_queue_pair)
            .collect()
    }
}

impl VhostUserBackend for BlkBackend {
    type Bitmap = ();
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        usize::from(self.0.disk.queues)
    }

    fn max_queue_size(&self) -> usize {
        usize::from(QUEUE_SIZE_MAX)
    }

    fn features(&self) -> u64 {
        virtio_blk::features(&self.0.disk) | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
    }

    fn set_event_idx(&self, _enabled: bool) {
        // The daemon sets each virtqueue's event-idx itself; `QueueWorker` asks the queue.
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        virtio_blk::config_window(&self.0.disk, offset, size)
    }

    fn update_memory(&self, _mem: GuestRam) -> io::Result<()> {
        // The daemon replaced the memory inside the `GuestMemoryAtomic` the back end holds.
        Ok(())
    }

    /// One worker thread per virtqueue, so each queue pair of the device is driven by one
    /// thread (the driver's rule).
    fn queues_per_thread(&self) -> Vec<u64> {
        (0..self.0.disk.queues).map(|q| 1u64 << q).collect()
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        // Without one, a vring worker never leaves its loop and the daemon cannot be dropped.
        let (consumer, notifier) =
            new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC).ok()?;
        self.0
            .exit_events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(consumer.as_raw_fd());
        Some((consumer, notifier))
    }

    /// Called when the VMM stops a queue (`GET_VRING_BASE`), after the queue is marked not
    /// ready: waits for its worker's pass, which finishes what is in flight and takes no
    /// more.
    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        if let Some(mut worker) = self.worker(queue_index as usize) {
            worker.restart();
        }
        Ok(())
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[Vring],
        thread_id: usize,
    ) -> io::Result<()> {
        if evset != EventSet::IN {
            return Err(io::Error::other(format!(
                "unexpected event set {evset:?} on virtqueue {thread_id}"
            )));
        }
        // Each thread serves one virtqueue: its kick is event 0.
        let (Some(vring), Some(mut worker)) = (
            vrings.get(usize::from(device_event)),
            self.worker(thread_id),
        ) else {
            return Ok(());
        };
        worker.serve(vring, &self.0.ram);
        Ok(())
    }
}
