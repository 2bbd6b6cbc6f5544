//! `--set key=value` overrides: a dotted TOML path into the device description.
//!
//! Overrides are applied to the TOML tree before it is deserialised, so the one set of serde
//! rules and `validate` checks every value, whether it came from a file, a preset or the
//! command line.

use crate::config::{one_line, DeviceConfig};
use crate::error::ConfigError;

/// Applies `key=value` overrides to a TOML device description and returns the checked config.
pub fn apply_overrides(
    base_toml: &str,
    overrides: &[(String, String)],
) -> Result<DeviceConfig, ConfigError> {
    let mut root: toml::Table = base_toml
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Toml(one_line(&e.to_string())))?;
    for (key, value) in overrides {
        for path in expand_alias(key) {
            set_path(&mut root, path, parse_value(value)).map_err(|message| {
                ConfigError::Override {
                    key: key.clone(),
                    message,
                }
            })?;
        }
    }
    let cfg: DeviceConfig = toml::Value::Table(root)
        .try_into()
        .map_err(|e: toml::de::Error| {
            let text = one_line(&e.to_string());
            // The override the error is about: the one whose field it calls unknown, else the
            // first that it names (the message also lists every expected field, so "names"
            // alone would blame whichever override comes first).
            let unknown = text
                .split_once("unknown field `")
                .and_then(|(_, rest)| rest.split_once('`'))
                .map(|(field, _)| field.to_string());
            let is_unknown = |k: &String| unknown.as_deref() == k.rsplit('.').next();
            let named = |k: &String| k.split('.').any(|part| text.contains(&format!("`{part}`")));
            let culprit = overrides
                .iter()
                .find(|(k, _)| is_unknown(k))
                .or_else(|| overrides.iter().find(|(k, _)| named(k)));
            match culprit {
                Some((key, _)) => ConfigError::Override {
                    key: key.clone(),
                    message: text,
                },
                None => ConfigError::Toml(text),
            }
        })?;
    cfg.validate()?;
    Ok(cfg)
}

/// Keys that stand for several: `memory.latency_ns` sets the read and the write latency (the
/// Moneta sensitivity figure's one axis), for `--set` and sweeps alike.
pub fn expand_alias(key: &str) -> Vec<&str> {
    match key {
        "memory.latency_ns" => vec!["memory.read_latency_ns", "memory.write_latency_ns"],
        other => vec![other],
    }
}

/// Splits `key=value` as given on the command line.
pub fn parse_assignment(text: &str) -> Result<(String, String), ConfigError> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(ConfigError::Override {
            key: text.to_string(),
            message:
                "expected key=value with a dotted TOML path, e.g. controller.policy=round-robin"
                    .to_string(),
        }),
    }
}

fn set_path(root: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err("empty path component".to_string());
    }
    let (last, parents) = parts.split_last().expect("split always yields one part");
    let mut table = root;
    for part in parents {
        // Optional sections (e.g. `[host]`) may be absent from a file; create them, and let
        // deserialisation reject names that are not sections at all.
        let entry = table
            .entry((*part).to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            _ => return Err(format!("`{part}` is a value, not a section")),
        };
    }
    if let Some(toml::Value::Table(_)) = table.get(*last) {
        return Err(format!("`{last}` is a section; name one of its keys"));
    }
    table.insert((*last).to_string(), value);
    Ok(())
}

/// Reads a command-line value as the TOML type it looks like. Integers accept size suffixes
/// (`4k` = 4096, binary like fio) and time suffixes (`1us` = 1000, values in nanoseconds).
pub fn parse_value(text: &str) -> toml::Value {
    if let Ok(b) = text.parse::<bool>() {
        return toml::Value::Boolean(b);
    }
    if let Ok(i) = text.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    if let Some(i) = parse_suffixed(text) {
        return toml::Value::Integer(i);
    }
    if let Ok(f) = text.parse::<f64>() {
        if f.is_finite() {
            // Integral floats such as 4e9 are meant as integers (bandwidths, capacities).
            if f.fract() == 0.0 && f.abs() < 9.0e18 {
                return toml::Value::Integer(f as i64);
            }
            return toml::Value::Float(f);
        }
    }
    toml::Value::String(text.to_string())
}

fn parse_suffixed(text: &str) -> Option<i64> {
    let lower = text.to_ascii_lowercase();
    let split = lower.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, suffix) = lower.split_at(split);
    let num: f64 = num.parse().ok()?;
    let scale: f64 = match suffix {
        "k" | "kib" | "kb" => 1024.0,
        "m" | "mib" | "mb" => 1024.0 * 1024.0,
        "g" | "gib" | "gb" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" | "tb" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return None,
    };
    let v = num * scale;
    (v.is_finite() && v.fract() == 0.0 && v < 9.0e18).then_some(v as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: toml::Value) {
        assert_eq!(parse_value(input), expected, "parse_value({input:?})");
    }

    #[test]
    fn values_parse_as_their_types() {
        use toml::Value::*;
        check("42", Integer(42));
        check("4k", Integer(4096));
        check("1M", Integer(1 << 20));
        check("1us", Integer(1000));
        check("128us", Integer(128_000));
        check("4e9", Integer(4_000_000_000));
        check("0.5", Float(0.5));
        check("true", Boolean(true));
        check("round-robin", String("round-robin".into()));
        check("4kx", String("4kx".into()));
    }

    const BASE: &str = include_str!("presets/moneta.toml");

    fn err(key: &str, value: &str) -> String {
        apply_overrides(BASE, &[(key.to_string(), value.to_string())])
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn overrides_reach_every_section() {
        let cfg = apply_overrides(
            BASE,
            &[
                ("host.software_ns".into(), "5us".into()),
                ("controller.policy".into(), "round-robin".into()),
                ("memory.controllers".into(), "8".into()),
            ],
        )
        .unwrap();
        assert_eq!(cfg.host.software_ns, 5000);
        assert_eq!(cfg.controller.policy, crate::Policy::RoundRobin);
        assert_eq!(cfg.memory.controllers, 8);
    }

    #[test]
    fn bad_overrides_name_the_key() {
        for (key, value, needle) in [
            ("memory.controllers", "0", "memory.controllers"),
            ("controller.policy", "lifo", "controller.policy"),
            ("controller.polcy", "fifo", "controller.polcy"),
            ("nosuch.key", "1", "nosuch.key"),
            ("memory", "1", "memory"),
            ("link.lanes", "17", "link.lanes"),
            ("controller.buffer_bytes", "1t", "controller.buffer_bytes"),
        ] {
            let e = err(key, value);
            assert!(e.contains(needle), "--set {key}={value}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    /// A valid override before a misspelt one: the error names the misspelt one, although the
    /// message lists every field of the section, the valid one's too.
    #[test]
    fn the_misspelt_override_is_blamed_not_the_first() {
        let overrides = vec![
            (
                "controller.hardware_command_ns".to_string(),
                "100".to_string(),
            ),
            ("controller.pipeline_latncy_ns".to_string(), "5".to_string()),
        ];
        let e = apply_overrides(crate::presets::PRESETS[0].toml, &overrides)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--set controller.pipeline_latncy_ns"), "{e}");
    }

    #[test]
    fn memory_latency_sets_both_latencies() {
        let overrides = vec![("memory.latency_ns".to_string(), "1us".to_string())];
        let cfg = apply_overrides(crate::presets::PRESETS[0].toml, &overrides).unwrap();
        assert_eq!(cfg.memory.read_latency_ns, 1000);
        assert_eq!(cfg.memory.write_latency_ns, 1000);
    }

    #[test]
    fn assignment_needs_a_key() {
        assert!(parse_assignment("a.b=1").is_ok());
        assert!(parse_assignment("=1").is_err());
        assert!(parse_assignment("nothing").is_err());
    }
}
