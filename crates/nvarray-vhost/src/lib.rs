//! `nvarray-vhost`: a vhost-user-blk back end for the emulated nvarray device, so a virtual
//! machine (QEMU's `vhost-user-blk-pci`, Cloud Hypervisor, any vhost-user VMM) sees it as a
//! virtio disk and its unmodified kernel, file systems and applications meet the timing model.
//!
//! This is the only crate that knows virtio and vhost-user. Like every front end it reaches
//! the device through the driver alone (`nvarray-host`): each virtqueue is served on its own
//! queue pair, and every guest request becomes device commands the model times.
//!
//! - `virtio_blk`: the features offered and the configuration space;
//! - `request`: one descriptor chain judged (the only place a guest's chain is read; pure over
//!   guest memory, tested and fuzzed);
//! - `descriptor_table`: any bytes as a virtqueue, its chains judged (the fuzz target's and
//!   the random tables' test);
//! - `queue_worker`: one virtqueue served on one queue pair;
//! - `guest`: one connected VMM's session, counts and messages;
//! - `backend`: `BlkBackend`, what the vhost-user daemon asks of the device;
//! - `server`: the socket, one VMM after another, shutdown, the report;
//! - `client`: a minimal vhost-user front end (a VMM without a guest) for tests and benches;
//! - `error`: the back end's errors.
//!
//! Must never: touch memory outside the guest's regions, panic on anything a guest or VMM
//! sends, or return a write to the guest before its device command has completed.

mod backend;
pub mod client;
pub mod descriptor_table;
mod error;
pub mod guest;
mod queue_worker;
pub mod request;
pub mod server;
pub mod virtio_blk;

pub use error::VhostError;
pub use server::{ShutdownHandle, VhostOptions, VhostServer};
