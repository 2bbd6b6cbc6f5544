//! Errors of the user-space driver: one line each, naming the value and the accepted range.

use nvarray_emu::protocol::{moneta, nvme};
use nvarray_emu::tag_pool::TAGS_MAX;
use nvarray_emu::Status;
use thiserror::Error;

use crate::options::{CompletionMode, Stack, DEVICE_THREADS_MAX};

#[derive(Debug, Error)]
pub enum HostError {
    #[error("placement handle {handle} refused ({handles} handles): {why}")]
    Placement {
        handle: u16,
        handles: u32,
        why: &'static str,
    },
    /// The device or its backing could not be opened.
    #[error(transparent)]
    Emu(#[from] nvarray_emu::EmuError),
    /// The device description itself is invalid.
    #[error(transparent)]
    Config(#[from] nvarray_model::ConfigError),
    #[error("device threads {requested} is out of range: expected 0 to {DEVICE_THREADS_MAX}")]
    DeviceThreads { requested: usize },
    /// The emulator's tag pool is smaller than the model's limit (the simulator takes more).
    #[error(
        "controller.tags {tags} is more than the emulator's {TAGS_MAX} tags (one DMA buffer each); the simulator, --engine sim, takes up to 65536"
    )]
    Tags { tags: u32 },
    #[error(
        "buffer size {buffer_bytes} is out of range: expected a multiple of the block size ({block_bytes}) up to the maximum transfer ({max_transfer_bytes})"
    )]
    BufferSize {
        buffer_bytes: u32,
        block_bytes: u32,
        max_transfer_bytes: u32,
    },
    #[error(
        "buffer size {buffer_bytes} is more than an NVMe command's {} blocks of {block_bytes} bytes",
        nvme::BLOCKS_PER_COMMAND_MAX
    )]
    BufferBeyondNvmeCommand { buffer_bytes: u32, block_bytes: u32 },
    #[error(
        "buffer size {buffer_bytes} is more than the Moneta command word's {} blocks",
        moneta::LEN_BLOCKS_MAX
    )]
    BufferBeyondCommandWord { buffer_bytes: u32 },
    #[error(
        "memory.capacity_bytes {capacity_bytes} is beyond what the Moneta command word addresses: at most {} blocks of {block_bytes} bytes",
        moneta::OFFSET_BLOCKS_MAX + 1
    )]
    CapacityBeyondCommandWord {
        capacity_bytes: u64,
        block_bytes: u32,
    },
    #[error(
        "completion mode {mode} does not fit a dc-express device: it raises no interrupt and posts no read completion, its reads complete in their data (use --completion in-data, its default)"
    )]
    DcExpressNeedsInData { mode: CompletionMode },
    #[error(
        "completion mode in-data is the DC Express protocol's, and this device speaks {protocol}: use a dc-express preset or --set interface.protocol=dc-express"
    )]
    InDataNeedsDcExpress { protocol: &'static str },
    #[error(
        "completion mode in-data needs stack spin: the host polls the read's data for it, while stack {stack} sleeps until an interrupt"
    )]
    InDataNeedsSpin { stack: Stack },
    /// The device completed a command with an error status.
    #[error("{op} of {len_bytes} bytes at offset {offset_bytes}: {status}")]
    Command {
        op: &'static str,
        offset_bytes: u64,
        len_bytes: u64,
        status: Status,
    },
    #[error("{what} needs a zoned namespace: this device has none (set zns.enabled = true on a flash preset)")]
    NotZoned { what: &'static str },
    #[error(
        "report zones buffer of {len_bytes} bytes is out of range: expected a multiple of the block size ({block_bytes}) of at least 128 bytes (a header and one zone) up to the largest command ({max_bytes})"
    )]
    ZoneReportLength {
        len_bytes: u32,
        block_bytes: u32,
        max_bytes: u32,
    },
    #[error("the device's zone report names a zone state the ZNS specification does not define")]
    ZoneReportMalformed,
    #[error("{in_flight} commands are in flight on this queue pair: a synchronous zoned command needs it to itself")]
    InFlight { in_flight: usize },
    /// Every tag is in use: wait for a completion first.
    #[error("no free tag: all {tags} are in flight")]
    NoTag { tags: usize },
}

impl HostError {
    /// Whether the error is in what the user asked for (a bad setting) rather than in the
    /// device or the machine.
    pub fn is_input_error(&self) -> bool {
        match self {
            HostError::Emu(e) => e.is_input_error(),
            HostError::Command { .. }
            | HostError::NoTag { .. }
            | HostError::ZoneReportMalformed => false,
            _ => true,
        }
    }
}
