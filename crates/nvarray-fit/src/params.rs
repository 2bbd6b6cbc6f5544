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
                let text = if self.integer
                    || key.ends_with("_ns")
                    || key.ends_with("_bytes")
                    || key.ends_with("_per_s")
                {
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
    let mut params = host_and_link(base);
    params.extend(controller(&base.controller));
    params.extend(memory(&base.memory));
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
    // The ranges' eigen solver is sized for these (`uncertainty::symmetric_eigen`).
    assert!(params.len() <= 16, "{} parameters to fit", params.len());
    for p in &params {
        // The search moves on a log scale: a bound at or below zero has no logarithm.
        assert!(
            p.min > 0.0,
            "{}: lower bound {} not positive",
            p.name,
            p.min
        );
        assert!(
            p.min <= p.max,
            "{}: bounds {} to {} out of order",
            p.name,
            p.min,
            p.max
        );
        assert_eq!(
            p.keys.len(),
            p.base.len(),
            "{}: one base value per key",
            p.name
        );
    }
    params
}

/// One key, on its own.
fn one(
    name: &'static str,
    base: f64,
    meaning: &'static str,
    integer: bool,
    min: f64,
    max: f64,
) -> Param {
    Param {
        name,
        keys: vec![name],
        base: vec![base],
        meaning,
        integer,
        min,
        max,
    }
}

/// The host's time per request, the link and the interconnect.
fn host_and_link(base: &DeviceConfig) -> Vec<Param> {
    vec![
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
    ]
}

/// The controller's time per command, by its mode.
fn controller(c: &nvarray_model::config::ControllerConfig) -> Vec<Param> {
    let mut params = Vec::new();
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
    params
}

/// The media: latencies per row and the banks working at once.
fn memory(m: &nvarray_model::config::MemoryConfig) -> Vec<Param> {
    // Left to the base, because the jobs cannot tell them from what is fitted: the firmware's
    // cores and the controller's tags (whole numbers whose every value opens a valley of its
    // own, where the firmware's time or the queue re-fits around them), each bank's
    // transfer rate (a cost per byte, as the read and write latencies per row are: only
    // their sums show) and the number of controllers (only the banks' total shows, which
    // `banks_per_controller` sets).
    vec![
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
            "memory.banks_per_controller",
            f64::from(m.banks_per_controller),
            "banks (dies) per controller: with the controllers, the banks working at once",
            true,
            1.0,
            256.0,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_keeps_its_shares_and_integers_round() {
        let base = nvarray_model::presets::preset("optane")
            .unwrap()
            .load(&[])
            .unwrap();
        let params = for_base(&base);
        let fw = params
            .iter()
            .find(|p| p.name == "controller.firmware_*_ns")
            .unwrap();
        // optane: 300 + 200 + 400 + 300 ns.
        assert_eq!(fw.start(), 1200.0);
        let a = fw.assignments(2400.0);
        assert_eq!(a[0], ("controller.firmware_fetch_ns".into(), "600".into()));
        assert_eq!(
            a[2],
            ("controller.firmware_translation_ns".into(), "800".into())
        );
        let banks = params
            .iter()
            .find(|p| p.name == "memory.banks_per_controller")
            .unwrap();
        assert_eq!(
            banks.assignments(2.6),
            vec![("memory.banks_per_controller".into(), "3".into())]
        );
        assert_eq!(banks.legal(1000.0), 256.0);
        assert!(
            !params.iter().any(|p| p.name.starts_with("ftl.")),
            "optane has no FTL"
        );
        let sw = params
            .iter()
            .find(|p| p.name == "host.software_ns")
            .unwrap();
        assert_eq!(
            sw.start(),
            1000.0,
            "a zero starts at ten times its lower bound"
        );
    }
}
