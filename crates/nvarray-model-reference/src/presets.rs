//! Named device presets. Each is a commented TOML file in `presets/`, compiled in, that says
//! where every figure comes from and which parameters were calibrated against which result.

use crate::config::DeviceConfig;
use crate::error::ConfigError;
use crate::overrides::apply_overrides;

/// A preset: its name, a one-line summary and its TOML text (comments included).
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    pub name: &'static str,
    pub toml: &'static str,
}

/// A preset named after its file in `presets/`.
macro_rules! preset {
    ($name:literal) => {
        Preset {
            name: $name,
            toml: include_str!(concat!("../../nvarray-model/src/presets/", $name, ".toml")),
        }
    };
}

pub const PRESETS: &[Preset] = &[
    preset!("moneta"),
    preset!("pcm"),
    preset!("stt-mram"),
    preset!("dram"),
    preset!("optane"),
    preset!("z-nand"),
    preset!("slc"),
    preset!("mlc"),
    preset!("tlc"),
    preset!("openexpress"),
    preset!("optane-p4800x"),
    preset!("dc-express-gen2x4"),
    preset!("dc-express-gen3x8"),
    preset!("remote-pcm"),
    preset!("remote-dram"),
    preset!("hdd"),
    preset!("pcie-flash-2010"),
    preset!("null"),
];

/// The preset called `name`, or an error listing the choices.
pub fn preset(name: &str) -> Result<&'static Preset, ConfigError> {
    PRESETS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ConfigError::UnknownPreset {
            name: name.to_string(),
            choices: PRESETS
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

impl Preset {
    /// The preset's config with `--set` overrides applied.
    pub fn load(&self, overrides: &[(String, String)]) -> Result<DeviceConfig, ConfigError> {
        apply_overrides(self.toml, overrides)
    }

    /// The preset's `description` line.
    pub fn description(&self) -> String {
        self.load(&[]).map(|c| c.description).unwrap_or_default()
    }
}
