//! The parameters `nvarray fit` moves: each a config key (or a group of keys moved together)
//! with its bounds, chosen for the base preset (a firmware or a hardware controller; an FTL
//! when it has one). Over-provisioning is fitted apart, to the steady-state writes
//! (`steady_fit`).

use nvarray_model::{ControllerMode, DeviceConfig};

/// One fitted parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// What the report and the preset call it: the config key, or `group.*` for a group.
    pub name: &'static str,
    /// The keys it sets. A group's value is the sum of its keys, shared out in the base
    /// preset's proportions (the firmware's stage times keep their ratios).
    pub keys: Vec<&'static str>,
    /// The base preset's value of each key (a group's shares).
    pub base: Vec<f64>,
    /// What it stands for, in a few words.
    pub meaning: &'static str,
    pub integer: bool,
    pub min: f64,
    pub max: f64,
}

impl Param {
    /// The base preset's value, moved inside the bounds (a zero starts at the lower bound's
    /// tenfold, so the log-scale search can move it).
    pub fn start(&self) -> f64 {
        let sum: f64 = self.base.iter().sum();
        let v = if sum > 0.0 { sum } else { self.min * 10.0 };
        v.clamp(self.min, self.max)
    }

    /// `value` as the search may take it: inside the bounds, whole when it must be.
    pub fn legal(&self, value: f64) -> f64 {
        let v = value.clamp(self.min, self.max);
        if self.integer {
            v.round().max(1.0)
        } else {
            v
        }
    }

    /// The `key=value` overrides that give this parameter `value`.
    pub fn assignments(&self, value: f64) -> Vec<(String, String)> {
        let value = self.legal(value);
        let sum: f64 = self.base.iter().sum();
        self.keys
            .iter()
            .zip(&self.base)
            .map(|(key, &share)| {
                let v = if self.keys.len() == 1 || sum <= 0.0 {
                    value / self.keys.len() as f64
                } else {
                    value * share / sum
                };
                let text = if self.integer || key.ends_with("_ns") || key.ends_with("_bytes") || key.ends_with("_per_s") {
                    format!("{}", v.round().max(0.0) as u64)
                } else {
                    format!("{v}")
                };
                (key.to_string(), text)
            })
            .collect()
    }
}

/// What the fit may move, for a base config (over-provisioning is fitted apart: `steady_fit`).
pub fn for_base(base: &DeviceConfig) -> Vec<Param> {
    let c = &base.controller;
    let m = &base.memory;
    let one = |name: &'static str, base: f64, meaning, integer, min, max| Param {
        name,
        keys: vec![name],
        base: vec![base],
        meaning,
        integer,
        min,
        max,
    };
    let mut params = vec![
        one(
            "host.software_ns",
            base.host.software_ns as f64,
            "host software time per request (one thread's CPU)",
            false,
            100.0,
            1e6,
        ),
        one(
            "link.propagation_ns",
            base.link.propagation_ns as f64,
            "fixed delay each way (latency without a throughput cost)",
            false,
            10.0,
            1e6,
        ),
        one(
            "link.lanes",
            f64::from(base.link.lanes),
            "link width (its bandwidth, with the generation)",
            true,
            1.0,
            16.0,
        ),
        one(
            "ring.bandwidth_bytes_per_s",
            base.ring.bandwidth_bytes_per_s as f64,
            "internal interconnect rate, shared by every transfer (one at a time)",
            false,
            1e7,
            1e11,
        ),
        one(
            "controller.tags",
            f64::from(c.tags),
            "commands the controller holds at once",
            true,
            1.0,
            4096.0,
        ),
    ];
    match c.mode {
        ControllerMode::Firmware => {
            params.push(Param {
                name: "controller.firmware_*_ns",
                keys: vec![
                    "controller.firmware_fetch_ns",
                    "controller.firmware_prp_ns",
                    "controller.firmware_translation_ns",
                    "controller.firmware_completion_ns",
                ],
                base: vec![
                    c.firmware_fetch_ns as f64,
                    c.firmware_prp_ns as f64,
                    c.firmware_translation_ns as f64,
                    c.firmware_completion_ns as f64,
                ],
                meaning: "firmware time per command (all stages)",
                integer: false,
                min: 20.0,
                max: 1e6,
            });
            params.push(one(
                "controller.firmware_cores",
                f64::from(c.firmware_cores),
                "firmware cores sharing that work",
                true,
                1.0,
                64.0,
            ));
        }
        ControllerMode::Hardware => {
            params.push(one(
                "controller.hardware_command_ns",
                c.hardware_command_ns as f64,
                "controller pipeline time per command",
                false,
                1.0,
                1e6,
            ));
            params.push(one(
                "controller.pipeline_latency_ns",
                c.pipeline_latency_ns as f64,
                "controller pipeline delay (no throughput cost)",
                false,
                1.0,
                1e6,
            ));
        }
    }
    params.extend([
        one(
            "memory.read_latency_ns",
            m.read_latency_ns as f64,
            "media read latency per row",
            false,
            10.0,
            1e7,
        ),
        one(
            "memory.write_latency_ns",
            m.write_latency_ns as f64,
            "media write (program) latency per row",
            false,
            10.0,
            1e8,
        ),
        one(
            "memory.bank_bandwidth_bytes_per_s",
            m.bank_bandwidth_bytes_per_s as f64,
            "transfer rate of each bank (die)",
            false,
            1e7,
            1e11,
        ),
        one(
            "memory.controllers",
            f64::from(m.controllers),
            "memory controllers (flash channels)",
            true,
            1.0,
            256.0,
        ),
        one(
            "memory.banks_per_controller",
            f64::from(m.banks_per_controller),
            "banks (dies) per controller",
            true,
            1.0,
            256.0,
        ),
    ]);
    if base.ftl.enabled {
        params.push(one(
            "ftl.write_buffer_bytes",
            base.ftl.write_buffer_bytes as f64,
            "DRAM write buffer in front of the flash",
            false,
            4096.0,
            1e10,
        ));
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_keeps_its_shares_and_integers_round() {
        let base = nvarray_model::presets::preset("optane").unwrap().load(&[]).unwrap();
        let params = for_base(&base);
        let fw = params.iter().find(|p| p.name == "controller.firmware_*_ns").unwrap();
        // optane: 300 + 200 + 400 + 300 ns.
        assert_eq!(fw.start(), 1200.0);
        let a = fw.assignments(2400.0);
        assert_eq!(a[0], ("controller.firmware_fetch_ns".into(), "600".into()));
        assert_eq!(a[2], ("controller.firmware_translation_ns".into(), "800".into()));
        let cores = params.iter().find(|p| p.name == "controller.firmware_cores").unwrap();
        assert_eq!(cores.assignments(2.6), vec![("controller.firmware_cores".into(), "3".into())]);
        assert_eq!(cores.legal(1000.0), 64.0);
        assert!(!params.iter().any(|p| p.name.starts_with("ftl.")), "optane has no FTL");
        let sw = params.iter().find(|p| p.name == "host.software_ns").unwrap();
        assert_eq!(sw.start(), 1000.0, "a zero starts at ten times its lower bound");
    }
}
