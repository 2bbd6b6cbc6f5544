//! Sizes and durations written the way fio writes them, read by `nvarray-units` (the one
//! parser of the workspace) and reported with this crate's error type.

use crate::error::WorkloadError;

pub use nvarray_units::{format_duration_ns, format_size, NS_PER_MS, NS_PER_S, NS_PER_US};

/// Parses a byte count the way fio does with its default `kb_base=1024`; the rules are
/// [`nvarray_units::parse_size`]'s, the error is a [`WorkloadError::Size`].
///
/// Accepted: a decimal number with an optional, case-insensitive suffix `k`, `m`, `g`, `t`,
/// `p` (powers of 1024), each optionally followed by `b` (`4kb` is 4096, as in fio); a bare
/// `b` means bytes. A fraction must come to whole bytes (`0.5k` is 512). `0x` followed by hex
/// digits (no suffix) is accepted too, as fio does.
///
/// Refused, with a message: IEC suffixes such as `KiB` (fio reads `1KiB` as 1000 bytes in its
/// default mode, so either reading would surprise someone), percentages (`50%`), fractions of
/// a byte (`1.3`), signs, arithmetic, and anything that overflows `u64`.
///
/// ```
/// use nvarray_workload::parse_size;
/// assert_eq!(parse_size("4k").unwrap(), 4096);
/// assert_eq!(parse_size("1MB").unwrap(), 1 << 20);
/// assert_eq!(parse_size("0.5k").unwrap(), 512);
/// assert!(parse_size("4KiB").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<u64, WorkloadError> {
    nvarray_units::parse_size(s).map_err(|e| WorkloadError::Size {
        input: e.input().to_string(),
        reason: e.reason(),
    })
}

/// Parses a duration into nanoseconds the way fio does for its time options; the rules are
/// [`nvarray_units::parse_duration_ns`]'s, the error is a [`WorkloadError::Duration`].
///
/// A bare number is in `default_unit_ns` (fio: seconds for `runtime`, microseconds for
/// `thinktime`). Suffixes, case-insensitive: `ns`/`nsec` (an nvarray extension: fio stops at
/// microseconds), `us`/`usec`, `ms`/`msec`, `s`/`sec`, `m`/`min`, `h`, `d`. A fraction must
/// come to whole nanoseconds (`1.5us` is 1500). Signs and values that overflow `u64`
/// nanoseconds (about 584 years) are refused.
///
/// ```
/// use nvarray_workload::{parse_duration_ns, NS_PER_S, NS_PER_US};
/// assert_eq!(parse_duration_ns("10", NS_PER_S).unwrap(), 10 * NS_PER_S);
/// assert_eq!(parse_duration_ns("250ms", NS_PER_S).unwrap(), 250_000_000);
/// assert_eq!(parse_duration_ns("5", NS_PER_US).unwrap(), 5_000);
/// assert_eq!(parse_duration_ns("1.5ms", NS_PER_S).unwrap(), 1_500_000);
/// ```
pub fn parse_duration_ns(s: &str, default_unit_ns: u64) -> Result<u64, WorkloadError> {
    nvarray_units::parse_duration_ns(s, default_unit_ns).map_err(|e| WorkloadError::Duration {
        input: e.input().to_string(),
        reason: e.reason(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wrappers keep `nvarray-units`' answer and its message; only the type changes.
    #[test]
    fn the_wrappers_answer_as_nvarray_units_does() {
        for text in [
            "4k", "0.5k", "1.5m", "0x1000", "512b", "3g", "4KiB", "1.3", "50%", "16384p", "4x",
        ] {
            assert_eq!(
                parse_size(text).map_err(|e| e.to_string()),
                nvarray_units::parse_size(text).map_err(|e| e.to_string()),
                "parse_size({text:?})"
            );
        }
        for text in ["10", "1.5us", "0.5", "2m", "0.5ns", "300000d", "10x"] {
            assert_eq!(
                parse_duration_ns(text, NS_PER_S).map_err(|e| e.to_string()),
                nvarray_units::parse_duration_ns(text, NS_PER_S).map_err(|e| e.to_string()),
                "parse_duration_ns({text:?})"
            );
        }
        assert_eq!(
            parse_size("4KiB").unwrap_err().to_string(),
            "size '4KiB': IEC suffixes (KiB, MiB, ...) are refused because fio's default \
             kb_base=1024 reads them as powers of 1000; write 4k for 4096 bytes"
        );
    }
}
