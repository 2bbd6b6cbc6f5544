//! `--set key=value` overrides: a dotted TOML path into the device description.
//!
//! Overrides are applied to the TOML tree before it is deserialised, so the one set of serde
//! rules and `validate` checks every value, whether it came from a file, a preset or the
//! command line. Sizes and durations in a value are read by `nvarray-units`, the same parser
//! that reads fio keys, so `4k` or `1.5us` means the same in `--set` as in a job.

use nvarray_units::{DurationErrorKind, SizeErrorKind};

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
    for (key, text) in overrides {
        let error = |message| ConfigError::Override {
            key: key.clone(),
            message,
        };
        for path in expand_alias(key) {
            // A key whose value is text (a name, a technology label) takes the text as it is:
            // `3d` there is a label, not three days.
            let value = if holds_text(&root, path) {
                toml::Value::String(text.clone())
            } else {
                read_value(text).map_err(error)?
            };
            set_path(&mut root, path, value).map_err(error)?;
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

/// Whether the dotted `key` names a string in `root` now.
fn holds_text(root: &toml::Table, key: &str) -> bool {
    let mut parts = key.split('.').peekable();
    let mut table = root;
    while let Some(part) = parts.next() {
        match (table.get(part), parts.peek()) {
            (Some(toml::Value::String(_)), None) => return true,
            (Some(toml::Value::Table(t)), Some(_)) => table = t,
            _ => return false,
        }
    }
    false
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

/// Reads a command-line value as the TOML type it looks like: a boolean, an integer, a float,
/// a size or a duration as an integer, else a string.
///
/// Sizes and durations are read by `nvarray-units`, with the rules fio keys follow: `4k` is
/// 4096 (powers of 1024, like fio), `0.5k` is 512, `0x1000` is 4096, `1us` is 1000 (values in
/// nanoseconds), `1.5us` is 1500. Text that is both a size and a duration (`2m`) is read as a
/// size, 2 MiB, because the key it is for is not known here; write `120s` for two minutes.
/// A size or duration that breaks a rule (`4KiB`, `0.3k`) comes back as a string; through
/// [`apply_overrides`] it is an error that says why.
pub fn parse_value(text: &str) -> toml::Value {
    read_value(text).unwrap_or_else(|_| toml::Value::String(text.to_string()))
}

/// [`parse_value`], except that a size or a duration that `nvarray-units` refuses for a reason
/// other than not looking like one at all is an error, with that reason.
fn read_value(text: &str) -> Result<toml::Value, String> {
    let trimmed = text.trim();
    if let Ok(b) = trimmed.parse::<bool>() {
        return Ok(toml::Value::Boolean(b));
    }
    if let Ok(i) = trimmed.parse::<i64>() {
        return Ok(toml::Value::Integer(i));
    }
    if let Ok(f) = trimmed.parse::<f64>() {
        if f.is_finite() {
            // Integral floats such as 4e9 are meant as integers (bandwidths, capacities).
            if f.fract() == 0.0 && f.abs() < 9.0e18 {
                return Ok(toml::Value::Integer(f as i64));
            }
            return Ok(toml::Value::Float(f));
        }
    }
    let number = match nvarray_units::parse_size(trimmed) {
        Ok(size_bytes) => size_bytes,
        Err(e) if e.kind() != SizeErrorKind::Malformed => return Err(e.to_string()),
        Err(_) => match nvarray_units::parse_duration_ns(trimmed, 1) {
            Ok(duration_ns) => duration_ns,
            Err(e) if e.kind() != DurationErrorKind::Malformed => return Err(e.to_string()),
            Err(_) => return Ok(toml::Value::String(text.to_string())),
        },
    };
    i64::try_from(number)
        .map(toml::Value::Integer)
        .map_err(|_| {
            format!(
                "'{text}' is {number}, larger than the largest TOML integer, {}",
                i64::MAX
            )
        })
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
        // The rules of nvarray-units: exact fractions, hex, fio's `b` suffixes; `m` is a size.
        check("0.5k", Integer(512));
        check("1.5us", Integer(1500));
        check("0x1000", Integer(4096));
        check("4kb", Integer(4096));
        check("512b", Integer(512));
        check("1p", Integer(1 << 50));
        check("2m", Integer(2 << 20));
        check("2min", Integer(120_000_000_000));
        check("1h", Integer(3_600_000_000_000));
        check("1.3", Float(1.3));
        check(" 42 ", Integer(42));
        // Refused sizes and durations stay strings here; apply_overrides says why.
        check("4KiB", String("4KiB".into()));
        check("0.3k", String("0.3k".into()));
        check("0.5ns", String("0.5ns".into()));
        check("8191p", Integer(8191 << 50));
        check("8192p", String("8192p".into()));
    }

    /// Sizes and durations mean in `--set` what they mean in a fio job: both are read by
    /// `nvarray-units` (`nvarray-workload` has the same test for its keys).
    #[test]
    fn overrides_read_numbers_as_nvarray_units_does() {
        for text in [
            "4k", "0.5k", "1.5m", "0x1000", "512b", "3gb", "4KiB", "1.3k", "0.3k",
        ] {
            let expected = nvarray_units::parse_size(text).map_err(|e| e.to_string());
            let actual = match read_value(text) {
                Ok(toml::Value::Integer(i)) => Ok(u64::try_from(i).unwrap()),
                other => Err(other.unwrap_err()),
            };
            assert_eq!(actual, expected, "--set x={text}");
        }
        for text in ["1us", "1.5us", "128us", "2ms", "0.5ns", "1.0000001ms"] {
            let expected = nvarray_units::parse_duration_ns(text, 1).map_err(|e| e.to_string());
            let actual = match read_value(text) {
                Ok(toml::Value::Integer(i)) => Ok(u64::try_from(i).unwrap()),
                other => Err(other.unwrap_err()),
            };
            assert_eq!(actual, expected, "--set x={text}");
        }
    }

    /// A size or duration that breaks a rule is refused with the rule, naming the key.
    #[test]
    fn refused_sizes_and_durations_say_why() {
        for (key, value, expected) in [
            (
                "controller.buffer_bytes",
                "4KiB",
                "--set controller.buffer_bytes: size '4KiB': IEC suffixes (KiB, MiB, ...) are \
                 refused because fio's default kb_base=1024 reads them as powers of 1000; write \
                 4k for 4096 bytes",
            ),
            (
                "memory.capacity_bytes",
                "1.3k",
                "--set memory.capacity_bytes: size '1.3k': a fraction must come to a whole \
                 number of bytes, as 0.5k (512) does",
            ),
            (
                "memory.latency_ns",
                "0.5ns",
                "--set memory.latency_ns: duration '0.5ns': a fraction must come to a whole \
                 number of nanoseconds, as 1.5us (1500ns) does",
            ),
            (
                "memory.capacity_bytes",
                "16384p",
                "--set memory.capacity_bytes: size '16384p': does not fit in 64 bits",
            ),
            (
                "memory.capacity_bytes",
                "8192p",
                "--set memory.capacity_bytes: '8192p' is 9223372036854775808, larger than the \
                 largest TOML integer, 9223372036854775807",
            ),
        ] {
            assert_eq!(err(key, value), expected, "--set {key}={value}");
        }
        let cfg = apply_overrides(BASE, &[("memory.capacity_bytes".into(), "1.5g".into())]);
        assert_eq!(cfg.unwrap().memory.capacity_bytes, 3 << 29);
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

    /// A text field takes the text as typed, even when it reads as a size or a time (`3d`
    /// would be three days, `0x10` sixteen): before, such a label failed as a type error.
    #[test]
    fn a_text_field_keeps_text_that_looks_like_a_number() {
        for label in ["3d", "0x10", "4k", "1.5us"] {
            let overrides = vec![("memory.technology".to_string(), label.to_string())];
            let cfg = apply_overrides(crate::presets::PRESETS[0].toml, &overrides).unwrap();
            assert_eq!(cfg.memory.technology, label);
        }
        // A number field still reads the size.
        let overrides = vec![("memory.stripe_bytes".to_string(), "4k".to_string())];
        let cfg = apply_overrides(crate::presets::PRESETS[0].toml, &overrides).unwrap();
        assert_eq!(cfg.memory.stripe_bytes, 4096);
    }

    #[test]
    fn assignment_needs_a_key() {
        assert!(parse_assignment("a.b=1").is_ok());
        assert!(parse_assignment("=1").is_err());
        assert!(parse_assignment("nothing").is_err());
    }
}
