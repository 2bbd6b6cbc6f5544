//! Typed errors of the model: one line each, naming the field and what it accepts.

use thiserror::Error;

/// A device description the model cannot run.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{field} = {value} is out of range: expected {range}")]
    OutOfRange {
        field: &'static str,
        range: String,
        value: String,
    },
    #[error("malformed device TOML: {0}")]
    Toml(String),
    #[error("unknown preset `{name}`: choose one of {choices}")]
    UnknownPreset { name: String, choices: String },
    #[error("--set {key}: {message}")]
    Override { key: String, message: String },
    /// The `[ftl]` section cannot lay an FTL over the memory (its message names the field).
    #[error("{0}")]
    Ftl(String),
    /// The `[zns]` section does not fit the memory.
    #[error("{field} is out of range: expected {expected}")]
    Zns {
        field: &'static str,
        expected: String,
    },
}

/// A command the device refuses. The device state is unchanged when this is returned.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CommandError {
    #[error(
        "request beyond end of device: offset={offset_bytes} len={len_bytes} size={size_bytes}"
    )]
    OutOfRange {
        offset_bytes: u64,
        len_bytes: u32,
        size_bytes: u64,
    },
    #[error("request not aligned to the {block_bytes}-byte block: offset={offset_bytes} len={len_bytes}")]
    Misaligned {
        offset_bytes: u64,
        len_bytes: u32,
        block_bytes: u32,
    },
    #[error("request length {len_bytes} is zero or above the maximum transfer of {max_transfer_bytes} bytes")]
    BadLength {
        len_bytes: u32,
        max_transfer_bytes: u32,
    },
    /// A write on flash behind an FTL whose maps have grown past `ftl.map_budget_bytes`: a
    /// limit of the machine running the model, named in the text.
    #[error("{0}")]
    MapBudget(String),
}
