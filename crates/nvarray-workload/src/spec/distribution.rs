//! How random offsets spread over a job's region (fio's `random_distribution`): the values
//! fio 3.33 accepts, parsed with its rules, and written back in its syntax.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use super::limits::ZIPF_THETA_MAX;
use crate::error::{value_error, WorkloadError};
use crate::units::format_size;

const KEY: &str = "random_distribution";

/// Most zones a `zoned` or `zoned_abs` split may have (fio's `ZONESPLIT_MAX`).
pub const ZONES_MAX: usize = 256;

/// Most block indices a `sequence` may list (fio's `FIO_SEQ_MAX`).
pub const SEQUENCE_MAX: usize = 64;

/// How random offsets are spread over a job's region (fio `--random_distribution`).
/// Sequential jobs ignore it, as fio does. Every variant but `Uniform` draws offsets
/// independently (fio sets `norandommap` for them).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Distribution {
    /// `random`: every aligned offset equally likely.
    Uniform,
    /// `zipf:THETA[:CENTER]`: the k-th hottest range is hit with probability about
    /// `1 / k^theta`, drawn as fio draws it (Gray et al.'s approximation, scattered over the
    /// region by fio's hash), draw for draw as fio places them.
    Zipf {
        /// Skew, in `(0, ZIPF_THETA_MAX]` but not 1 (fio refuses 1: its generator divides by
        /// `1 - theta`); larger is more skewed.
        theta: f64,
        /// Where the hottest range sits, as a fraction of the region (`None`: fio's seeded
        /// position).
        center: Option<f64>,
    },
    /// `pareto[:H[:CENTER]]`: fio's Pareto ranks (`H` in `(0, 1)`, default 0.2: smaller is
    /// more skewed), scattered over the region by fio's hash, draw for draw as fio places them.
    Pareto {
        /// fio's `h`.
        h: f64,
        /// Where the hottest range sits, as a fraction of the region (`None`: fio's seeded
        /// position).
        center: Option<f64>,
    },
    /// `normal[:DEV[:CENTER]]` (alias `gauss`): fio's bell, the mean of 12 uniform draws
    /// plus a uniform jitter of `DEV` percent of the region, scattered by fio's hash.
    Normal {
        /// fio's `dev`, a percentage in `[0, 100)`.
        dev_percent: f64,
        /// Shifts the scattered values by this fraction of the region less one half.
        center: Option<f64>,
    },
    /// `zoned:` / `zoned_abs:`: each zone takes its share of the requests, uniformly inside it.
    Zoned(ZoneSplit),
    /// `sequence:B0,B1,...` (fio after 3.33): these block indices (of the smallest request
    /// length) in this order, over and over; with `random_sequence_stride`, each pass moves
    /// on by the list's length.
    Sequence(Vec<u32>),
}

/// The zones of a `zoned` (sizes in percent of the region) or `zoned_abs` (sizes in bytes)
/// distribution, in region order, each with the percentage of requests it takes (summing to
/// 100).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneSplit {
    /// `zoned_abs`: sizes are bytes from the region's start; else percentages of the region
    /// (which may sum to less than 100, leaving the tail untouched, as in fio).
    pub absolute: bool,
    /// `(access percent, size)` per zone.
    pub zones: Vec<(u8, u64)>,
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let center = |c: &Option<f64>| c.map(|c| format!(":{c}")).unwrap_or_default();
        match self {
            Distribution::Uniform => f.write_str("random"),
            Distribution::Zipf { theta, center: c } => write!(f, "zipf:{theta}{}", center(c)),
            Distribution::Pareto { h, center: c } => write!(f, "pareto:{h}{}", center(c)),
            Distribution::Normal {
                dev_percent,
                center: c,
            } => write!(f, "normal:{dev_percent}{}", center(c)),
            Distribution::Sequence(blocks) => {
                let list: Vec<String> = blocks.iter().map(u32::to_string).collect();
                write!(f, "sequence:{}", list.join(","))
            }
            Distribution::Zoned(split) => {
                f.write_str(if split.absolute { "zoned_abs" } else { "zoned" })?;
                for &(access, size) in &split.zones {
                    if split.absolute {
                        write!(f, ":{access}/{}", format_size(size))?;
                    } else {
                        write!(f, ":{access}/{size}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Distribution {
    type Err = WorkloadError;

    /// Parses fio 3.33's values: `random`, `zipf:THETA[:CENTER]`, `pareto[:H[:CENTER]]`,
    /// `normal[:DEV[:CENTER]]` (or `gauss`, which fio accepts only for `file_service_type`),
    /// `zoned:A/S[:A/S...]` and `zoned_abs:A/SIZE[:A/SIZE...]`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let bad = |why: &str| value_error(KEY, s, why);
        if let Some(list) = text.strip_prefix("sequence:") {
            return parse_sequence(list).map_err(|why| bad(&why));
        }
        if text.contains(',') {
            return Err(bad(
                "has a comma: per-direction distributions (read,write,trim) are refused, as fio \
                 3.33 refuses them (its parser stops at the comma); give one for every direction",
            ));
        }
        let (name, rest) = text.split_once(':').unwrap_or((text, ""));
        let distribution = match name {
            "random" if rest.is_empty() => Distribution::Uniform,
            "zipf" => {
                let (theta, center) = value_and_center(rest, f64::NAN).map_err(|why| bad(&why))?;
                Distribution::Zipf { theta, center }
            }
            "pareto" => {
                let (h, center) = value_and_center(rest, 0.2).map_err(|why| bad(&why))?;
                Distribution::Pareto { h, center }
            }
            "normal" | "gauss" => {
                let (dev_percent, center) = value_and_center(rest, 0.0).map_err(|why| bad(&why))?;
                Distribution::Normal {
                    dev_percent,
                    center,
                }
            }
            "zoned" | "zoned_abs" => Distribution::Zoned(
                parse_zones(rest, name == "zoned_abs").map_err(|why| bad(&why))?,
            ),
            "sequence" => return Err(bad("needs its block indices: sequence:2,0,1")),
            _ => {
                return Err(bad(
                    "must be random, zipf:THETA, pareto[:H], normal[:DEV], zoned:A/S[:A/S...], \
                     zoned_abs:A/SIZE[:A/SIZE...] or sequence:B[,B...]",
                ))
            }
        };
        check_distribution(&distribution).map_err(|why| bad(&why))?;
        Ok(distribution)
    }
}

/// `sequence:`'s block indices: 1 to [`SEQUENCE_MAX`] non-negative integers, separated by
/// commas.
fn parse_sequence(list: &str) -> Result<Distribution, String> {
    let blocks: Vec<u32> = list
        .split(',')
        .map(|b| {
            b.trim()
                .parse()
                .map_err(|_| format!("{b:?} is not a block index (0 to 4294967295)"))
        })
        .collect::<Result<_, _>>()?;
    if blocks.len() > SEQUENCE_MAX {
        return Err(format!(
            "lists {} blocks; fio takes at most {SEQUENCE_MAX}",
            blocks.len()
        ));
    }
    Ok(Distribution::Sequence(blocks))
}

/// `VALUE[:CENTER]` after a distribution's name (`default` when empty).
fn value_and_center(rest: &str, default: f64) -> Result<(f64, Option<f64>), String> {
    if rest.trim().is_empty() {
        return Ok((default, None));
    }
    let (value, center) = rest.split_once(':').unwrap_or((rest, ""));
    let number = |t: &str| {
        t.trim()
            .parse::<f64>()
            .map_err(|_| format!("{t:?} is not a number"))
    };
    let center = if center.trim().is_empty() {
        None
    } else {
        Some(number(center)?)
    };
    Ok((number(value)?, center))
}

/// fio's zone list: `ACCESS/SIZE` entries separated by `:`, up to the first empty one. With
/// `zoned`, a size of 0, empty or left out shares what the others leave of 100 %; with
/// `zoned_abs`, sizes are byte sizes and one left out is 0.
fn parse_zones(rest: &str, absolute: bool) -> Result<ZoneSplit, String> {
    let mut zones: Vec<(u8, Option<u64>)> = Vec::new();
    for entry in rest.split(':').map(str::trim) {
        if entry.is_empty() {
            break;
        }
        if zones.len() == ZONES_MAX {
            return Err(format!("has more than {ZONES_MAX} zones"));
        }
        let (access, size) = entry.split_once('/').unwrap_or((entry, ""));
        let access: u8 = access
            .trim()
            .parse()
            .ok()
            .filter(|&a| a <= 100)
            .ok_or_else(|| format!("zone {entry:?}: the access percentage must be 0 to 100"))?;
        let size = size.trim();
        let size = if absolute {
            Some(if size.is_empty() {
                0
            } else {
                nvarray_units::parse_size(size)
                    .map_err(|e| format!("zone {entry:?}: size {size:?}: {e}"))?
            })
        } else {
            // fio reads the percent with atoi and caps it at 100; 0 means "not given".
            let percent: u64 = if size.is_empty() {
                0
            } else {
                size.parse::<u64>()
                    .map_err(|_| format!("zone {entry:?}: the size must be a percentage"))?
                    .min(100)
            };
            (percent > 0).then_some(percent)
        };
        zones.push((access, size));
    }
    if zones.is_empty() {
        return Err("names no zone: give ACCESS/SIZE entries separated by ':'".into());
    }
    let access: u32 = zones.iter().map(|&(a, _)| u32::from(a)).sum();
    if access != 100 {
        return Err(format!(
            "the access percentages add up to {access}, not 100"
        ));
    }
    let given: u64 = zones.iter().filter_map(|&(_, s)| s).sum();
    if !absolute && given > 100 {
        return Err(format!("the zone sizes add up to {given} %, more than 100"));
    }
    let missing = zones.iter().filter(|(_, s)| s.is_none()).count() as u64;
    let share = 100u64
        .saturating_sub(given)
        .checked_div(missing)
        .unwrap_or(0);
    let split = ZoneSplit {
        absolute,
        zones: zones
            .into_iter()
            .map(|(a, s)| (a, s.unwrap_or(share)))
            .collect(),
    };
    assert!(
        absolute || split.zones.iter().map(|&(_, s)| s).sum::<u64>() <= 100,
        "zone sizes of {:?} add up to more than 100 %",
        split.zones
    );
    Ok(split)
}

pub(super) fn theta_range() -> String {
    format!("zipf theta must be in (0, {ZIPF_THETA_MAX}]")
}

/// Range checks on a distribution (written so that NaN fails too): the rule broken.
pub(super) fn check_distribution(distribution: &Distribution) -> Result<(), String> {
    let center_ok = |c: &Option<f64>| c.is_none_or(|c| (0.0..=1.0).contains(&c));
    match distribution {
        Distribution::Zipf { theta, .. } if !(*theta > 0.0 && *theta <= ZIPF_THETA_MAX) => {
            Err(theta_range())
        }
        Distribution::Zipf { theta, .. } if *theta == 1.0 => Err(
            "zipf theta must not be 1, as fio refuses it (its generator divides by 1 - theta): \
             give 0.99 or 1.01"
                .to_string(),
        ),
        Distribution::Pareto { h, .. } if !(*h > 0.0 && *h < 1.0) => {
            Err("pareto h must be in (0, 1)".to_string())
        }
        Distribution::Normal { dev_percent, .. } if !(0.0..100.0).contains(dev_percent) => {
            Err("normal's deviation must be a percentage in [0, 100)".to_string())
        }
        Distribution::Zipf { center, .. }
        | Distribution::Pareto { center, .. }
        | Distribution::Normal { center, .. }
            if !center_ok(center) =>
        {
            Err("the center must be a fraction of the region in [0, 1]".to_string())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Distribution, String> {
        text.parse::<Distribution>().map_err(|e| e.to_string())
    }

    #[test]
    fn fio_values_parse_and_write_back() {
        for text in [
            "random",
            "zipf:1.2",
            "zipf:0.8:0.25",
            "pareto:0.2",
            "pareto:0.9:0.5",
            "normal:5",
            "normal:0",
            "zoned:50/5:30/15:20/80",
            "zoned_abs:60/20m:30/100m:10/1g",
            "sequence:2,0,1",
            "sequence:7",
        ] {
            assert_eq!(parse(text).unwrap().to_string(), text);
        }
        assert_eq!(parse("pareto").unwrap().to_string(), "pareto:0.2");
        assert_eq!(parse("gauss:3").unwrap().to_string(), "normal:3");
    }

    #[test]
    fn zoned_sizes_left_out_share_the_rest_as_in_fio() {
        // examples/rand-zones.fio: the last zone's size is left empty.
        assert_eq!(
            parse("zoned:50/5:30/15:20/").unwrap().to_string(),
            "zoned:50/5:30/15:20/80"
        );
        assert_eq!(
            parse("zoned:50/0:50").unwrap().to_string(),
            "zoned:50/50:50/50"
        );
        // Sizes may leave the region's tail untouched.
        assert_eq!(
            parse("zoned:50/5:50/5").unwrap().to_string(),
            "zoned:50/5:50/5"
        );
        // Parsing stops at the first empty entry.
        assert_eq!(
            parse("zoned:100/10::5/5").unwrap().to_string(),
            "zoned:100/10"
        );
        assert_eq!(
            parse("zoned_abs:100").unwrap().to_string(),
            "zoned_abs:100/0"
        );
    }

    #[test]
    fn bad_values_say_why() {
        for (text, why) in [
            ("zoned:50/5:30/15", "add up to 80, not 100"),
            ("zoned:50/60:50/60", "more than 100"),
            ("zoned:", "names no zone"),
            ("zoned:150/10", "0 to 100"),
            ("zoned_abs:100/12q", "size"),
            ("zoned:50/5:30/15:20/,50/10:50/90", "comma"),
            ("pareto:1.5", "(0, 1)"),
            ("pareto:0.5:2", "center"),
            ("normal:100", "[0, 100)"),
            ("normal:x", "not a number"),
            ("sequence", "needs its block indices"),
            ("sequence:1,x", "not a block index"),
            ("sequence:1,-2", "not a block index"),
            ("uniform", "must be random"),
            ("zipf:0", "theta"),
            ("random:3", "must be random"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
