//! `nvarray-model-reference`: the timing model as it was before issue 38's redesign, frozen
//! (a copy of `nvarray-model`'s timing sources at d4e421d, unit tests left out). What is not
//! timing, the configuration (`DeviceConfig`, presets, overrides, validation), the breakdown's
//! components and the command errors, it takes from `nvarray-model`: both models are built
//! from one configuration, and a new configuration field or a recalibrated preset reaches
//! both alike.
//!
//! Test-only: `nvarray-model`'s `tests/reference.rs` drives this model and the live one with
//! the same random command streams and requires every completion, busy time, link count and
//! wear figure to be identical. The redesign makes the model faster, not different; a
//! deliberate change of the model's meaning updates this copy in its own commit, with the
//! figures it moves listed. Nothing else depends on this crate.

pub mod device;
pub mod device_model;
pub mod disk;
pub mod fabric;
pub mod link;
pub mod memory;
pub mod null_device;
pub mod timeline;
pub mod wear;

pub use device::{check_command, ArrayModel, Command, Completion, Op, ResourceBusy};
pub use device_model::DeviceModel;
pub use memory::WearStats;
