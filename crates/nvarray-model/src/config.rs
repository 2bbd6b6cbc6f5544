//! The device description: every parameter of the timing model, read from TOML.
//!
//! One struct per hardware part, with the unit of every field in its name. `validate` checks
//! each field against the range the model supports and names the field in its error, so a
//! user who mistypes a preset override learns which key and which range at once.

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// The whole array: host link, command interface, controller, ring, memory, wear levelling,
/// and the host-side software cost the engines charge per request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Short name, e.g. the preset's name.
    pub name: String,
    /// One line saying what this device is.
    #[serde(default)]
    pub description: String,
    pub link: LinkConfig,
    pub interface: InterfaceConfig,
    pub controller: ControllerConfig,
    pub ring: RingConfig,
    pub memory: MemoryConfig,
    pub wear: WearConfig,
    #[serde(default)]
    pub host: HostConfig,
    #[serde(default)]
    pub model: ModelConfig,
    /// The network between the host and a remote device; none by default (a local device).
    #[serde(default)]
    pub fabric: FabricConfig,
    /// A page-mapping FTL with garbage collection over flash media; off by default (flash
    /// then charges erases at a fixed rate).
    #[serde(default, skip_serializing_if = "ftl_is_off")]
    pub ftl: nvarray_ftl::FtlConfig,
    /// A zoned namespace (NVMe ZNS) over flash media; off by default.
    #[serde(default, skip_serializing_if = "zns_is_off")]
    pub zns: nvarray_ftl::zones::ZnsConfig,
}

fn ftl_is_off(ftl: &nvarray_ftl::FtlConfig) -> bool {
    *ftl == nvarray_ftl::FtlConfig::default()
}

fn zns_is_off(zns: &nvarray_ftl::zones::ZnsConfig) -> bool {
    *zns == nvarray_ftl::zones::ZnsConfig::default()
}

/// Which timing model runs the device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    #[serde(default)]
    pub kind: ModelKind,
    /// For `kind = "null"`: how long after its submission every command completes.
    #[serde(default)]
    pub null_latency_ns: u64,
}

/// The timing model behind a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// The whole array: link, command protocol, controller, buffers, ring, memory.
    #[default]
    Array,
    /// Every command completes `model.null_latency_ns` after it is submitted, with no shared
    /// resource, like Linux's `null_blk`: a target for testing software, and the emulator's
    /// own path with the model's cost near zero. The other sections still give the device's
    /// size, block size, largest transfer, tags and command protocol.
    Null,
}

/// The PCIe host link. Both directions have the full bandwidth (full duplex).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// PCIe generation, 1 to 5 (2.5, 5, 8, 16, 32 GT/s per lane).
    pub generation: u8,
    /// Lane count, 1 to 16.
    pub lanes: u8,
    /// Largest data payload of one TLP (Max_Payload_Size), a power of two from 64 to 4096.
    pub max_payload_bytes: u32,
    /// Bytes each TLP costs on the wire beyond its payload: framing, sequence number, header,
    /// LCRC, and the share of ACK/flow-control DLLPs.
    pub tlp_overhead_bytes: u32,
    /// Largest read a device may request from host memory in one TLP (Max_Read_Request_Size).
    pub max_read_request_bytes: u32,
    /// One-way latency through the link and root complex.
    pub propagation_ns: u64,
    /// Time host memory takes to answer a device's DMA read request, excluding the link.
    pub host_read_latency_ns: u64,
}

/// How commands and completions cross the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Moneta: one 64-bit programmed-I/O write issues a command; completion is a status
    /// register plus an interrupt, and the host reads the status back over the link.
    Moneta,
    /// NVMe: doorbell write, the device fetches a 64-byte SQ entry (and a PRP list for
    /// transfers over two pages), then writes a 16-byte CQ entry and an MSI; the host writes
    /// the CQ head doorbell.
    Nvme,
    /// DC Express (HGST, 2016): "a leaner PCIe storage protocol ... minimizes number of
    /// packets per command". The host writes the whole command in one programmed-I/O write;
    /// a read completes in its data (the host watches a unique tag that the data overwrites:
    /// no completion entry, no interrupt, no status read); a write completes with one posted
    /// write of a status word into host memory (the seed does not say; see `DeviceModel::complete`).
    DcExpress,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Moneta, Protocol::Nvme, Protocol::DcExpress];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Moneta => "moneta",
            Protocol::Nvme => "nvme",
            Protocol::DcExpress => "dc-express",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceConfig {
    pub protocol: Protocol,
    /// Moneta: time the device takes to answer the host's status-register read.
    #[serde(default)]
    pub status_read_ns: u64,
    /// NVMe: memory page size that PRP entries describe.
    #[serde(default = "default_page_bytes")]
    pub page_bytes: u32,
    /// Moneta and DC Express: bytes of the one programmed-I/O write that carries a command
    /// (Moneta's command word is 64 bits).
    #[serde(default = "default_command_bytes")]
    pub command_bytes: u32,
}

fn default_page_bytes() -> u32 {
    4096
}

fn default_command_bytes() -> u32 {
    8
}

/// Who does the per-command work inside the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControllerMode {
    /// Embedded cores run firmware for each stage (OpenExpress's baseline).
    Firmware,
    /// Automated hardware pipeline (Moneta's FPGA, OpenExpress's design).
    Hardware,
}

/// Order in which the controller hands transfer buffers to waiting requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Oldest request first; a large request takes every buffer until it is fully scheduled.
    Fifo,
    /// Separate read and write queues, served alternately on each buffer allocation, so both
    /// link directions stay busy (Moneta's full-duplex fix).
    SplitRw,
    /// A request gets one buffer and goes to the back of the queue (Moneta's fairness fix).
    RoundRobin,
}

impl Policy {
    pub const ALL: [Policy; 3] = [Policy::Fifo, Policy::SplitRw, Policy::RoundRobin];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::SplitRw => "split-rw",
            Policy::RoundRobin => "round-robin",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerConfig {
    pub mode: ControllerMode,
    pub policy: Policy,
    /// Scoreboard size: commands the controller tracks at once. More wait in the request queue.
    pub tags: u32,
    /// Transfer buffers: how many request pieces can move at once.
    pub buffer_count: u32,
    /// Size of one transfer buffer; requests are moved in pieces of this size.
    pub buffer_bytes: u32,
    /// Logical block size: offsets and lengths must be multiples of it.
    pub block_bytes: u32,
    /// Largest request the controller accepts.
    pub max_transfer_bytes: u32,
    /// Latency from granting a buffer to the start of its memory or DMA transfer.
    pub dma_setup_ns: u64,
    /// Hardware mode: time the command pipeline is occupied per command (it handles one
    /// command at a time, so this also bounds IOPS).
    #[serde(default)]
    pub hardware_command_ns: u64,
    /// Hardware mode: time the pipeline is occupied to post a completion.
    #[serde(default)]
    pub hardware_completion_ns: u64,
    /// Hardware mode: latency of the command pipeline beyond the time it is occupied: its
    /// stages overlap with the next commands', so this delays each command without bounding
    /// IOPS (a 250 MHz pipeline takes a command every few cycles, yet each spends microseconds
    /// in it).
    #[serde(default)]
    pub pipeline_latency_ns: u64,
    /// Clock of the controller's hardware, in MHz, for the stage costs given in cycles
    /// (OpenExpress tunes its FPGA from 50 to 250 MHz). 0 when every cost is given in ns.
    #[serde(default)]
    pub clock_mhz: u32,
    /// Hardware mode: pipeline cycles per command (queue dispatch, SQ entry parsing, context
    /// set-up: OpenExpress's FET and CTX), on top of `hardware_command_ns`.
    #[serde(default)]
    pub hardware_command_cycles: u64,
    /// Hardware mode: pipeline cycles per page of the command (`interface.page_bytes`): PRP
    /// entry traversal and DMA descriptor set-up (OpenExpress's HTRW).
    #[serde(default)]
    pub hardware_page_cycles: u64,
    /// Hardware mode: pipeline cycles to post a completion (OpenExpress's CMT), on top of
    /// `hardware_completion_ns`.
    #[serde(default)]
    pub hardware_completion_cycles: u64,
    /// Cycles from granting a buffer to the start of its transfer, on top of `dma_setup_ns`.
    #[serde(default)]
    pub dma_setup_cycles: u64,
    /// Firmware mode: embedded cores sharing the per-command work.
    #[serde(default = "one")]
    pub firmware_cores: u32,
    /// Firmware mode: per-command cost of fetching and decoding the command.
    #[serde(default)]
    pub firmware_fetch_ns: u64,
    /// Firmware mode: per-command cost of walking PRP entries and setting up DMA.
    #[serde(default)]
    pub firmware_prp_ns: u64,
    /// Firmware mode: per-command cost of address translation (FTL or wear-levelling map).
    #[serde(default)]
    pub firmware_translation_ns: u64,
    /// Firmware mode: per-command cost of building the completion and raising the interrupt.
    #[serde(default)]
    pub firmware_completion_ns: u64,
    /// Latency of checking a command against its channel's permission entries before it
    /// proceeds (Moneta-D, Caulfield et al. ASPLOS'12, checked every request in hardware):
    /// delays each command without occupying the controller, like `pipeline_latency_ns`.
    /// 0 (no check) unless the device serves user-space channels: `nvarray serve --channels`
    /// sets `CHANNEL_PERMISSION_CHECK_NS` when it is not given.
    #[serde(default)]
    pub permission_check_ns: u64,
}

/// `controller.permission_check_ns` on a device serving channels, when not given. The paper
/// gives no per-check latency; this assumes a hit in Moneta-D's permission table cache takes
/// two cycles of Moneta's 250 MHz controller (an assumption, stated as such).
pub const CHANNEL_PERMISSION_CHECK_NS: u64 = 8;

fn one() -> u32 {
    1
}

impl ControllerConfig {
    /// `cycles` at the controller's clock, in ns (rounded up; 0 without a clock).
    pub fn cycles_ns(&self, cycles: u64) -> u64 {
        if self.clock_mhz == 0 {
            return 0;
        }
        (cycles * 1000).div_ceil(u64::from(self.clock_mhz))
    }
}

/// The internal network between the controller and the memory controllers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingConfig {
    /// Raw ring bandwidth, shared by reads and writes.
    pub bandwidth_bytes_per_s: u64,
    /// Payload carried by one ring packet.
    pub packet_payload_bytes: u32,
    /// Header bytes each ring packet adds.
    pub packet_header_bytes: u32,
    /// Latency of one traversal, controller to memory controller.
    pub latency_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Label of the memory technology (pcm, stt-mram, dram, xpoint, z-nand, slc, mlc, tlc, ...).
    pub technology: String,
    /// Usable capacity of the array.
    pub capacity_bytes: u64,
    /// Independent memory controllers on the ring.
    pub controllers: u32,
    /// Banks (or dies) per memory controller that work in parallel.
    pub banks_per_controller: u32,
    /// Consecutive bytes on one controller before the address moves to the next.
    pub stripe_bytes: u32,
    /// Unit of one media access (a row, or a flash page); the access latency is paid per row.
    pub row_bytes: u32,
    /// Media read latency per row access.
    pub read_latency_ns: u64,
    /// Media write latency per row access (the write is complete only when it is in the media).
    pub write_latency_ns: u64,
    /// Data rate of one bank once a row is open.
    pub bank_bandwidth_bytes_per_s: u64,
    /// Erase latency (flash); 0 for media written in place.
    #[serde(default)]
    pub erase_latency_ns: u64,
    /// Bytes written to a bank between two erases (flash erase block); used when erase_latency_ns > 0.
    #[serde(default)]
    pub erase_block_bytes: u64,
    /// A hard disk instead of random-access media: each controller is one disk (one bank),
    /// and an access costs seek by distance plus rotation plus transfer (`disk.rs`);
    /// `read_latency_ns`/`write_latency_ns` are then the drive's per-command overhead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskConfig>,
}

/// A rotating disk's geometry and mechanics (`[memory.disk]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskConfig {
    /// Spindle speed, revolutions per minute.
    pub rpm: u32,
    /// Bytes on one track: the media rate is one track per revolution.
    pub track_bytes: u32,
    /// Seek to the next track (head settle included).
    pub seek_track_to_track_ns: u64,
    /// Seek across the whole disk.
    pub seek_full_stroke_ns: u64,
}

/// Start-gap wear levelling (Qureshi et al., MICRO'09), one instance per memory controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WearConfig {
    pub enabled: bool,
    /// Remapping granularity (a line).
    pub line_bytes: u32,
    /// Writes between two gap moves (the paper's psi; 100 costs 1 % extra writes).
    pub gap_interval_writes: u32,
}

/// A network between the host and the device (`[fabric]`), for a device in another machine:
/// every command crosses it as a request message and comes back as a response message. A
/// message waits for its direction of the wire (serialisation at `bandwidth_bytes_per_s`, so
/// large transfers queue behind each other), then travels `hops` hops of `hop_latency_ns` and
/// pays `message_overhead_ns` in the network adapters. With `kind = "tcp"` the remote machine's
/// CPU is on the path: it handles every message (`remote_cpu_ns` plus copying at
/// `remote_cpu_bytes_per_s`) on one of `remote_cpu_cores` cores, as an NBD or iSCSI server
/// does. With `kind = "rdma"` the network adapter reaches the device itself (NVMe-oF, or DC
/// Express's "bypassing the remote CPU for low latency access to networked storage",
/// hgst-dcexpress-2016-slides.md) and no CPU is on the path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricConfig {
    #[serde(default)]
    pub kind: FabricKind,
    /// Hops one way: the cables and switches a message crosses (1: a direct cable).
    #[serde(default = "default_hops")]
    pub hops: u32,
    /// One way, per hop: propagation and switching.
    #[serde(default)]
    pub hop_latency_ns: u64,
    /// Each direction's data rate (full duplex); 0 only with `kind = "none"`.
    #[serde(default)]
    pub bandwidth_bytes_per_s: u64,
    /// Per message, both network adapters together (doorbell, DMA, protocol processing).
    #[serde(default)]
    pub message_overhead_ns: u64,
    /// Bytes of a message besides its data: the command in a request, the status in a
    /// response (headers of the transport included).
    #[serde(default = "default_header_bytes")]
    pub header_bytes: u32,
    /// `tcp` only: the remote CPU's time per message (network stack, server software).
    #[serde(default)]
    pub remote_cpu_ns: u64,
    /// `tcp` only: the remote CPU's copying rate for a message's data (0: no per-byte cost).
    #[serde(default)]
    pub remote_cpu_bytes_per_s: u64,
    /// `tcp` only: cores serving messages side by side.
    #[serde(default = "default_remote_cpu_cores")]
    pub remote_cpu_cores: u32,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            kind: FabricKind::None,
            hops: default_hops(),
            hop_latency_ns: 0,
            bandwidth_bytes_per_s: 0,
            message_overhead_ns: 0,
            header_bytes: default_header_bytes(),
            remote_cpu_ns: 0,
            remote_cpu_bytes_per_s: 0,
            remote_cpu_cores: default_remote_cpu_cores(),
        }
    }
}

fn default_hops() -> u32 {
    1
}

fn default_header_bytes() -> u32 {
    64
}

fn default_remote_cpu_cores() -> u32 {
    1
}

/// What carries commands between the host and the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FabricKind {
    /// The device is in the host: no network.
    #[default]
    None,
    /// RDMA or NVMe-oF: the network adapter reaches the device; no remote CPU on the path.
    Rdma,
    /// TCP to a server program (NBD, iSCSI): the remote CPU handles every message.
    Tcp,
}

/// Costs on the host side of the interface, charged by the engines, not by the device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Host software time per request before it is issued (driver, OS, library). 0 by default,
    /// so results show the device alone.
    #[serde(default)]
    pub software_ns: u64,
}

/// Bounds the model supports; kept in one place so errors and docs quote the same numbers.
pub mod limits {
    pub const LANES_MAX: u8 = 16;
    pub const GENERATION_MAX: u8 = 5;
    pub const TAGS_MAX: u32 = 65_536;
    pub const BUFFERS_MAX: u32 = 4_096;
    pub const CONTROLLERS_MAX: u32 = 256;
    pub const BANKS_MAX: u32 = 256;
    pub const FIRMWARE_CORES_MAX: u32 = 64;
    /// 10 GHz: beyond any controller.
    pub const CLOCK_MHZ_MAX: u32 = 10_000;
    /// A billion cycles of one stage is a typo, not a controller.
    pub const CYCLES_MAX: u64 = 1_000_000_000;
    pub const MAX_TRANSFER_BYTES_MAX: u32 = 64 << 20;
    /// Start-gap write counters kept at most (4 bytes each: 1 GiB).
    pub const WEAR_LINES_MAX: u64 = 1 << 28;
    /// One hour: any latency beyond this is a typo, not a device.
    pub const LATENCY_NS_MAX: u64 = 3_600_000_000_000;
    /// Network hops one way: a path across a data centre is a handful.
    pub const FABRIC_HOPS_MAX: u32 = 64;
    pub const REMOTE_CPU_CORES_MAX: u32 = 1024;
    /// A message header beyond a megabyte is a typo.
    pub const HEADER_BYTES_MAX: u32 = 1 << 20;
    /// PCIe's TLP header, sequence number and CRC come to 20-30 bytes; 128 allows any framing.
    pub const TLP_OVERHEAD_BYTES_MAX: u32 = 128;
    /// The slowest ring or bank the model takes: 1 MB/s.
    pub const BANDWIDTH_BYTES_PER_S_MIN: u64 = 1_000_000;
    pub const RING_HEADER_BYTES_MAX: u32 = 4096;
    /// Spindle speeds of real disks lie well inside this.
    pub const DISK_RPM_MIN: u32 = 1_000;
    pub const DISK_RPM_MAX: u32 = 30_000;
    pub const DISK_TRACK_BYTES_MIN: u32 = 512;
}

fn check(
    ok: bool,
    field: &'static str,
    range: &str,
    value: impl ToString,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field,
            range: range.to_string(),
            value: value.to_string(),
        })
    }
}

impl FabricConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        use limits::*;
        check_in("fabric.hops", self.hops, 1, FABRIC_HOPS_MAX)?;
        check_latency("fabric.hop_latency_ns", self.hop_latency_ns)?;
        check_latency("fabric.message_overhead_ns", self.message_overhead_ns)?;
        check_latency("fabric.remote_cpu_ns", self.remote_cpu_ns)?;
        check_in(
            "fabric.header_bytes",
            self.header_bytes,
            0,
            HEADER_BYTES_MAX,
        )?;
        check_in(
            "fabric.remote_cpu_cores",
            self.remote_cpu_cores,
            1,
            REMOTE_CPU_CORES_MAX,
        )?;
        if self.kind != FabricKind::None {
            check(
                self.bandwidth_bytes_per_s > 0,
                "fabric.bandwidth_bytes_per_s",
                "above 0 for a fabric (e.g. 12500000000 for 100 Gb/s)",
                self.bandwidth_bytes_per_s,
            )?;
        }
        if self.kind != FabricKind::Tcp {
            check(
                self.remote_cpu_ns == 0 && self.remote_cpu_bytes_per_s == 0,
                "fabric.remote_cpu_ns",
                "0 unless fabric.kind = \"tcp\" (only TCP puts the remote CPU on the path)",
                self.remote_cpu_ns,
            )?;
        }
        Ok(())
    }
}

/// `value` in `min..=max`, the range said as "MIN to MAX".
fn check_in<T: PartialOrd + std::fmt::Display + Copy>(
    field: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<(), ConfigError> {
    check(
        min <= value && value <= max,
        field,
        &format!("{min} to {max}"),
        value,
    )
}

/// `value` at least `min`, said as "at least MIN".
fn check_at_least<T: PartialOrd + std::fmt::Display + Copy>(
    field: &'static str,
    value: T,
    min: T,
) -> Result<(), ConfigError> {
    check(value >= min, field, &format!("at least {min}"), value)
}

fn check_latency(field: &'static str, value: u64) -> Result<(), ConfigError> {
    check(
        value <= limits::LATENCY_NS_MAX,
        field,
        &format!("0 to {} (one hour)", limits::LATENCY_NS_MAX),
        value,
    )
}

fn check_pow2(field: &'static str, value: u32, min: u32, max: u32) -> Result<(), ConfigError> {
    check(
        value.is_power_of_two() && (min..=max).contains(&value),
        field,
        &format!("a power of two from {min} to {max}"),
        value,
    )
}

impl LinkConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        use limits::*;
        check_in("link.generation", self.generation, 1, GENERATION_MAX)?;
        check_in("link.lanes", self.lanes, 1, LANES_MAX)?;
        check_pow2("link.max_payload_bytes", self.max_payload_bytes, 64, 4096)?;
        check_in(
            "link.tlp_overhead_bytes",
            self.tlp_overhead_bytes,
            0,
            TLP_OVERHEAD_BYTES_MAX,
        )?;
        check_pow2(
            "link.max_read_request_bytes",
            self.max_read_request_bytes,
            64,
            4096,
        )?;
        check_latency("link.propagation_ns", self.propagation_ns)?;
        check_latency("link.host_read_latency_ns", self.host_read_latency_ns)
    }
}

impl InterfaceConfig {
    /// Against the link, whose largest payload bounds a command's one write.
    fn validate(&self, link: &LinkConfig) -> Result<(), ConfigError> {
        check_latency("interface.status_read_ns", self.status_read_ns)?;
        check_pow2("interface.page_bytes", self.page_bytes, 512, 65_536)?;
        check(
            (4..=link.max_payload_bytes).contains(&self.command_bytes)
                && self.command_bytes.is_multiple_of(4),
            "interface.command_bytes",
            &format!(
                "a multiple of 4 from 4 to link.max_payload_bytes ({}): one write",
                link.max_payload_bytes
            ),
            self.command_bytes,
        )
    }
}

impl ControllerConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        use limits::*;
        check_in("controller.tags", self.tags, 1, TAGS_MAX)?;
        check_in("controller.buffer_count", self.buffer_count, 1, BUFFERS_MAX)?;
        check_pow2("controller.block_bytes", self.block_bytes, 1, 65_536)?;
        check(
            self.buffer_bytes >= self.block_bytes
                && self.buffer_bytes.is_multiple_of(self.block_bytes),
            "controller.buffer_bytes",
            &format!(
                "a multiple of controller.block_bytes ({})",
                self.block_bytes
            ),
            self.buffer_bytes,
        )?;
        check(
            self.max_transfer_bytes >= self.block_bytes
                && self.max_transfer_bytes.is_multiple_of(self.block_bytes)
                && self.max_transfer_bytes <= MAX_TRANSFER_BYTES_MAX,
            "controller.max_transfer_bytes",
            &format!(
                "a multiple of controller.block_bytes ({}) up to {MAX_TRANSFER_BYTES_MAX}",
                self.block_bytes
            ),
            self.max_transfer_bytes,
        )?;
        self.validate_stage_times()?;
        self.validate_cycles()?;
        check_in(
            "controller.firmware_cores",
            self.firmware_cores,
            1,
            FIRMWARE_CORES_MAX,
        )
    }

    /// Checks every stage time in ns (hardware and firmware) against the latency limit.
    fn validate_stage_times(&self) -> Result<(), ConfigError> {
        for (field, v) in [
            ("controller.dma_setup_ns", self.dma_setup_ns),
            ("controller.hardware_command_ns", self.hardware_command_ns),
            (
                "controller.hardware_completion_ns",
                self.hardware_completion_ns,
            ),
            ("controller.pipeline_latency_ns", self.pipeline_latency_ns),
            ("controller.firmware_fetch_ns", self.firmware_fetch_ns),
            ("controller.firmware_prp_ns", self.firmware_prp_ns),
            (
                "controller.firmware_translation_ns",
                self.firmware_translation_ns,
            ),
            (
                "controller.firmware_completion_ns",
                self.firmware_completion_ns,
            ),
            ("controller.permission_check_ns", self.permission_check_ns),
        ] {
            check_latency(field, v)?;
        }
        Ok(())
    }

    /// Checks the clock and the costs in cycles at it: a cost in cycles needs a clock.
    fn validate_cycles(&self) -> Result<(), ConfigError> {
        use limits::*;
        check_in("controller.clock_mhz", self.clock_mhz, 0, CLOCK_MHZ_MAX)?;
        for (field, cycles) in [
            (
                "controller.hardware_command_cycles",
                self.hardware_command_cycles,
            ),
            ("controller.hardware_page_cycles", self.hardware_page_cycles),
            (
                "controller.hardware_completion_cycles",
                self.hardware_completion_cycles,
            ),
            ("controller.dma_setup_cycles", self.dma_setup_cycles),
        ] {
            check(
                cycles == 0 || self.clock_mhz > 0,
                field,
                "0 unless controller.clock_mhz is set",
                cycles,
            )?;
            check_in(field, cycles, 0, CYCLES_MAX)?;
        }
        Ok(())
    }
}

impl RingConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        use limits::*;
        check_at_least(
            "ring.bandwidth_bytes_per_s",
            self.bandwidth_bytes_per_s,
            BANDWIDTH_BYTES_PER_S_MIN,
        )?;
        check_at_least("ring.packet_payload_bytes", self.packet_payload_bytes, 1)?;
        check_in(
            "ring.packet_header_bytes",
            self.packet_header_bytes,
            0,
            RING_HEADER_BYTES_MAX,
        )?;
        check_latency("ring.latency_ns", self.latency_ns)
    }
}

impl MemoryConfig {
    /// The memory as an FTL of `page_bytes` pages sees it: every bank a die, erase blocks of
    /// `erase_block_bytes`, the capacity as its logical space.
    pub fn ftl_geometry(&self, page_bytes: u32) -> nvarray_ftl::Geometry {
        let page = u64::from(page_bytes).max(1);
        nvarray_ftl::Geometry {
            dies: self.controllers * self.banks_per_controller,
            pages_per_block: (self.erase_block_bytes / page) as u32,
            logical_pages: self.capacity_bytes / page,
        }
    }

    /// Against the controller (a buffer fits the capacity) and wear levelling (its lines
    /// set the capacity's stride; a disk is not wear-levelled).
    fn validate(&self, c: &ControllerConfig, wear: &WearConfig) -> Result<(), ConfigError> {
        use limits::*;
        check_in("memory.controllers", self.controllers, 1, CONTROLLERS_MAX)?;
        check_in(
            "memory.banks_per_controller",
            self.banks_per_controller,
            1,
            BANKS_MAX,
        )?;
        check_pow2("memory.row_bytes", self.row_bytes, 1, 1 << 20)?;
        check_pow2(
            "memory.stripe_bytes",
            self.stripe_bytes,
            self.row_bytes.min(512),
            1 << 30,
        )?;
        check(
            self.stripe_bytes >= self.row_bytes,
            "memory.stripe_bytes",
            &format!("at least memory.row_bytes ({})", self.row_bytes),
            self.stripe_bytes,
        )?;
        let stride =
            u64::from(self.controllers) * u64::from(self.stripe_bytes.max(wear.line_bytes));
        check(
            self.capacity_bytes >= stride && self.capacity_bytes.is_multiple_of(stride),
            "memory.capacity_bytes",
            &format!("a non-zero multiple of controllers x max(stripe_bytes, wear.line_bytes) ({stride})"),
            self.capacity_bytes,
        )?;
        // After the capacity's own check, so a tiny --size blames the size, not the buffers.
        check(
            u64::from(c.buffer_bytes) <= self.capacity_bytes,
            "controller.buffer_bytes",
            &format!("at most memory.capacity_bytes ({})", self.capacity_bytes),
            c.buffer_bytes,
        )?;
        check_latency("memory.read_latency_ns", self.read_latency_ns)?;
        check_latency("memory.write_latency_ns", self.write_latency_ns)?;
        check_latency("memory.erase_latency_ns", self.erase_latency_ns)?;
        check_at_least(
            "memory.bank_bandwidth_bytes_per_s",
            self.bank_bandwidth_bytes_per_s,
            BANDWIDTH_BYTES_PER_S_MIN,
        )?;
        check(
            self.erase_latency_ns == 0 || self.erase_block_bytes >= u64::from(self.row_bytes),
            "memory.erase_block_bytes",
            &format!(
                "at least memory.row_bytes ({}) when erase_latency_ns > 0",
                self.row_bytes
            ),
            self.erase_block_bytes,
        )?;
        match &self.disk {
            Some(d) => d.validate(self, wear),
            None => Ok(()),
        }
    }
}

impl DiskConfig {
    /// Against the memory it replaces (one actuator, no erase) and wear levelling (none).
    fn validate(&self, m: &MemoryConfig, wear: &WearConfig) -> Result<(), ConfigError> {
        use limits::*;
        check_in("memory.disk.rpm", self.rpm, DISK_RPM_MIN, DISK_RPM_MAX)?;
        check_at_least(
            "memory.disk.track_bytes",
            self.track_bytes,
            DISK_TRACK_BYTES_MIN,
        )?;
        check_latency(
            "memory.disk.seek_track_to_track_ns",
            self.seek_track_to_track_ns,
        )?;
        check_latency("memory.disk.seek_full_stroke_ns", self.seek_full_stroke_ns)?;
        check(
            self.seek_full_stroke_ns >= self.seek_track_to_track_ns,
            "memory.disk.seek_full_stroke_ns",
            &format!(
                "at least memory.disk.seek_track_to_track_ns ({})",
                self.seek_track_to_track_ns
            ),
            self.seek_full_stroke_ns,
        )?;
        check(
            m.banks_per_controller == 1,
            "memory.banks_per_controller",
            "1 with [memory.disk] (one actuator per disk)",
            m.banks_per_controller,
        )?;
        check(
            m.erase_latency_ns == 0,
            "memory.erase_latency_ns",
            "0 with [memory.disk]",
            m.erase_latency_ns,
        )?;
        check(
            !wear.enabled,
            "wear.enabled",
            "false with [memory.disk] (disks are not wear-levelled)",
            wear.enabled,
        )
    }
}

impl WearConfig {
    /// Against the memory: a line holds whole rows, and the write counters of every line fit.
    fn validate(&self, m: &MemoryConfig) -> Result<(), ConfigError> {
        check_pow2(
            "wear.line_bytes",
            self.line_bytes,
            m.row_bytes.max(64),
            1 << 24,
        )?;
        check_at_least("wear.gap_interval_writes", self.gap_interval_writes, 1)?;
        let lines = m.capacity_bytes / u64::from(m.controllers) / u64::from(self.line_bytes);
        // One 4-byte write counter per line: keep them under 1 GiB in all.
        check(
            !self.enabled || lines * u64::from(m.controllers) <= limits::WEAR_LINES_MAX,
            "wear.line_bytes",
            &format!(
                "large enough for at most {} start-gap lines in all, where memory.capacity_bytes ({}) / wear.line_bytes makes {}: raise wear.line_bytes, lower memory.capacity_bytes (--size), or set wear.enabled=false",
                limits::WEAR_LINES_MAX,
                m.capacity_bytes,
                lines * u64::from(m.controllers)
            ),
            self.line_bytes,
        )
    }
}

impl DeviceConfig {
    /// The same device as it leaves the factory: its FTL not preconditioned. For a question
    /// about one command on an idle device (`nvarray_host`'s adaptive completion rule), which
    /// builds a model of its own: building the preconditioned FTL of an 8 GiB device again
    /// took about a second, and the run's first command waited for it (issue 56: the "early
    /// stall" of docs/flash.md). Whether the pages a read touches would be mapped is
    /// `preconditioned`.
    pub fn fresh(&self) -> DeviceConfig {
        let mut fresh = self.clone();
        fresh.ftl.precondition = nvarray_ftl::Precondition::None;
        fresh
    }

    /// Whether the device starts with its FTL preconditioned: every page mapped, so a read
    /// touches flash.
    pub fn preconditioned(&self) -> bool {
        self.ftl.enabled && self.ftl.precondition != nvarray_ftl::Precondition::None
    }

    /// Checks every field against the range the model supports, part by part (each part's
    /// `validate`, in this order: the first field out of range is the one reported).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.link.validate()?;
        check_latency("model.null_latency_ns", self.model.null_latency_ns)?;
        self.fabric.validate()?;
        self.interface.validate(&self.link)?;
        self.controller.validate()?;
        self.ring.validate()?;
        self.memory.validate(&self.controller, &self.wear)?;
        self.wear.validate(&self.memory)?;
        self.validate_ftl()?;
        self.zone_layout()?;
        check_latency("host.software_ns", self.host.software_ns)
    }

    /// The zoned namespace's zones (`[zns]`), `None` when the namespace is not zoned; an
    /// error when `[zns]` does not fit the memory.
    pub fn zone_layout(&self) -> Result<Option<nvarray_ftl::zones::ZoneLayout>, ConfigError> {
        if !self.zns.enabled {
            return Ok(None);
        }
        let m = &self.memory;
        check(
            m.erase_block_bytes > 0 && m.disk.is_none() && !self.wear.enabled && !self.ftl.enabled,
            "zns.enabled",
            "false unless the memory is flash (memory.erase_block_bytes > 0, no disk, no \
             start-gap wear levelling) without ftl.enabled (a zoned namespace has no device \
             garbage collection)",
            self.zns.enabled,
        )?;
        let line_bytes = m.erase_block_bytes * u64::from(m.controllers * m.banks_per_controller);
        self.zns
            .layout(
                m.capacity_bytes,
                u64::from(self.controller.block_bytes),
                line_bytes,
            )
            .map(Some)
            .map_err(|(field, expected)| ConfigError::Zns { field, expected })
    }

    /// The FTL's pages over the memory's dies and erase blocks (`ftl_geometry`), when enabled.
    fn validate_ftl(&self) -> Result<(), ConfigError> {
        if !self.ftl.enabled {
            return Ok(());
        }
        // Before the FTL's own checks: their complaints (over-provisioning, spare lines)
        // would send the user after the wrong setting.
        check(
            !self.zns.enabled,
            "ftl.enabled",
            "false on a zoned namespace (zns.enabled): it has no FTL to map, collect or \
             precondition, since the host writes each zone at its write pointer; drop \
             --precondition and the ftl.* settings, or zns.enabled",
            self.ftl.enabled,
        )?;
        let m = &self.memory;
        let page = u64::from(self.ftl.page_bytes);
        let flash = m.erase_block_bytes > 0 && m.disk.is_none() && !self.wear.enabled;
        check(
            flash,
            "ftl.enabled",
            "false unless the memory is flash (memory.erase_block_bytes > 0, no disk, no \
             start-gap wear levelling)",
            self.ftl.enabled,
        )?;
        check(
            page.is_power_of_two()
                && page >= 512
                && m.erase_block_bytes.is_multiple_of(page)
                && m.capacity_bytes.is_multiple_of(page),
            "ftl.page_bytes",
            &format!(
                "a power of two from 512 that divides memory.erase_block_bytes ({}) and \
                 memory.capacity_bytes",
                m.erase_block_bytes
            ),
            page,
        )?;
        check(
            self.ftl.map_cache_bytes.is_multiple_of(page),
            "ftl.map_cache_bytes",
            "0 (the whole map in DRAM) or a multiple of ftl.page_bytes (one translation page)",
            self.ftl.map_cache_bytes,
        )?;
        let buffer = self.ftl.write_buffer_bytes;
        check(
            buffer.is_multiple_of(page) && buffer <= m.capacity_bytes,
            "ftl.write_buffer_bytes",
            "0 (no buffer) or a multiple of ftl.page_bytes no larger than memory.capacity_bytes",
            buffer,
        )?;
        nvarray_ftl::Ftl::validate(&self.ftl, self.ftl_geometry())
            .map_err(|e| ConfigError::Ftl(e.to_string()))
    }

    /// The FTL's view of the memory (`MemoryConfig::ftl_geometry`).
    pub fn ftl_geometry(&self) -> nvarray_ftl::Geometry {
        self.memory.ftl_geometry(self.ftl.page_bytes)
    }

    /// Parses a TOML device description and validates it.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let cfg: DeviceConfig =
            toml::from_str(text).map_err(|e| ConfigError::Toml(one_line(&e.to_string())))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Serialises to TOML (without the preset files' comments).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a DeviceConfig always serialises")
    }
}

/// Folds toml's multi-line error report into one line.
pub(crate) fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}
