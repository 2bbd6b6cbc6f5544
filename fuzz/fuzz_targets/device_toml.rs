//! Any text as a device TOML file (`--device FILE`): loading answers, never panics, and a
//! device it accepts survives a round trip through its own TOML.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvarray_model::config::DeviceConfig;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(config) = DeviceConfig::from_toml(&text) {
        let again = DeviceConfig::from_toml(&config.to_toml())
            .expect("a device that loaded loads again from its own TOML");
        assert_eq!(again.to_toml(), config.to_toml());
    }
});
