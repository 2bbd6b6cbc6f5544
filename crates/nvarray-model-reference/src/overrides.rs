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
