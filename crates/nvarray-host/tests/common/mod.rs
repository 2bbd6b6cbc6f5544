//! What the driver's tests share.

use nvarray_host::{Device, Options};
use nvarray_model::presets::preset;

/// The tlc preset with `overrides` (`--set`-style keys), opened with 64 KiB tag buffers.
pub fn tlc_device(overrides: &[(&str, &str)]) -> Device {
    let overrides: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = preset("tlc").unwrap().load(&overrides).unwrap();
    let options = Options {
        buffer_bytes: Some(64 * 1024),
        ..Options::default()
    };
    Device::open(&config, &options).unwrap()
}
