//! Sizes and durations written the way fio reads them.

use crate::error::WorkloadError;

/// Nanoseconds in one microsecond.
pub const NS_PER_US: u64 = 1_000;
/// Nanoseconds in one millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds in one second.
pub const NS_PER_S: u64 = 1_000_000_000;

pub(crate) const SIZE_FORMAT: &str =
    "expected an unsigned integer with an optional suffix k, m, g, t or p (powers of 1024, \
     optionally followed by b, any case), or 0x followed by hex digits";

// fio's default kb_base=1024 is a compatibility mode in which `4k` and `4kb` mean 4096 but
// `4KiB` means 4000 (fio parse.c, __get_mult_bytes). Following fio would surprise everyone who
// writes IEC units on purpose; following IEC would silently disagree with fio on the same job
// file. Refusing the suffix is the only choice that cannot produce a wrong number.
const SIZE_IEC: &str = "IEC suffixes (KiB, MiB, ...) are refused because fio's default \
                        kb_base=1024 reads them as powers of 1000; write 4k for 4096 bytes";

pub(crate) const DURATION_FORMAT: &str =
    "expected an unsigned integer with an optional suffix ns, us, \
                               ms, s, m, h or d (no suffix: the key's default unit)";

/// Parses a byte count the way fio does with its default `kb_base=1024`.
///
/// Accepted: a decimal integer with an optional, case-insensitive suffix `k`, `m`, `g`, `t`,
/// `p` (powers of 1024), each optionally followed by `b` (`4kb` is 4096, as in fio); a bare
/// `b` means bytes. `0x` followed by hex digits (no suffix) is accepted too, as fio does.
///
/// Refused, with a message: IEC suffixes such as `KiB` (fio reads `1KiB` as 1000 bytes in its
/// default mode, so either reading would surprise someone), percentages (`50%`), fractions,
/// signs, arithmetic, and anything that overflows `u64`.
///
/// ```
/// use nvarray_workload::parse_size;
/// assert_eq!(parse_size("4k").unwrap(), 4096);
/// assert_eq!(parse_size("1MB").unwrap(), 1 << 20);
/// assert!(parse_size("4KiB").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<u64, WorkloadError> {
    let err = |reason| WorkloadError::Size {
        input: s.to_string(),
        reason,
    };
    let text = s.trim();
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(err(SIZE_FORMAT));
        }
        return u64::from_str_radix(hex, 16).map_err(|_| err("does not fit in 64 bits"));
    }
    let (number, suffix) = split_number(text).ok_or_else(|| err(SIZE_FORMAT))?;
    let shift: u32 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" => 10,
        "m" | "mb" => 20,
        "g" | "gb" => 30,
        "t" | "tb" => 40,
        "p" | "pb" => 50,
        "kib" | "mib" | "gib" | "tib" | "pib" => return Err(err(SIZE_IEC)),
        "%" => {
            return Err(err(
                "percentages of the device are not supported; give a byte count such as 1g",
            ))
        }
        _ => return Err(err(SIZE_FORMAT)),
    };
    let number: u64 = number.parse().map_err(|_| err("does not fit in 64 bits"))?;
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| err("does not fit in 64 bits"))
}

/// Parses a duration into nanoseconds the way fio does for its time options.
///
/// A bare integer is in `default_unit_ns` (fio: seconds for `runtime`, microseconds for
/// `thinktime`). Suffixes, case-insensitive: `ns`/`nsec` (an nvarray extension: fio stops at
/// microseconds), `us`/`usec`, `ms`/`msec`, `s`/`sec`, `m`/`min`, `h`, `d`. Fractions, signs
/// and values that overflow `u64` nanoseconds (about 584 years) are refused.
///
/// ```
/// use nvarray_workload::{parse_duration_ns, NS_PER_S, NS_PER_US};
/// assert_eq!(parse_duration_ns("10", NS_PER_S).unwrap(), 10 * NS_PER_S);
/// assert_eq!(parse_duration_ns("250ms", NS_PER_S).unwrap(), 250_000_000);
/// assert_eq!(parse_duration_ns("5", NS_PER_US).unwrap(), 5_000);
/// ```
pub fn parse_duration_ns(s: &str, default_unit_ns: u64) -> Result<u64, WorkloadError> {
    let err = |reason| WorkloadError::Duration {
        input: s.to_string(),
        reason,
    };
    if default_unit_ns == 0 {
        return Err(err("the default unit must be at least 1 ns"));
    }
    let (number, suffix) = split_number(s.trim()).ok_or_else(|| err(DURATION_FORMAT))?;
    let unit_ns = match suffix.to_ascii_lowercase().as_str() {
        "" => default_unit_ns,
        "ns" | "nsec" => 1,
        "us" | "usec" => NS_PER_US,
        "ms" | "msec" => NS_PER_MS,
        "s" | "sec" => NS_PER_S,
        "m" | "min" => 60 * NS_PER_S,
        "h" => 3_600 * NS_PER_S,
        "d" => 86_400 * NS_PER_S,
        _ => return Err(err(DURATION_FORMAT)),
    };
    let number: u64 = number.parse().map_err(|_| err("does not fit in 64 bits"))?;
    number
        .checked_mul(unit_ns)
        .ok_or_else(|| err("does not fit in 64 bits of nanoseconds"))
}

/// Formats a byte count with the largest suffix that represents it exactly, so that
/// [`parse_size`] reads the result back to the same number: `4096` gives `4k`, `1536` gives
/// `1536`.
pub fn format_size(size_bytes: u64) -> String {
    const SUFFIXES: [(u32, &str); 5] = [(50, "p"), (40, "t"), (30, "g"), (20, "m"), (10, "k")];
    if size_bytes != 0 {
        for (shift, suffix) in SUFFIXES {
            if size_bytes.trailing_zeros() >= shift {
                return format!("{}{}", size_bytes >> shift, suffix);
            }
        }
    }
    size_bytes.to_string()
}

/// Splits `123abc` into `("123", "abc")`; `None` when there is no leading digit.
fn split_number(text: &str) -> Option<(&str, &str)> {
    let digits_len = text
        .bytes()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if digits_len == 0 {
        return None;
    }
    Some(text.split_at(digits_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_size(input: &str, expected: Result<u64, &str>) {
        let actual = parse_size(input).map_err(|e| e.to_string());
        assert_eq!(
            actual,
            expected.map_err(str::to_string),
            "parse_size({input:?})"
        );
    }

    #[test]
    fn sizes() {
        check_size("512", Ok(512));
        check_size("0", Ok(0));
        check_size(" 4k ", Ok(4096));
        check_size("4K", Ok(4096));
        check_size("4kb", Ok(4096));
        check_size("4KB", Ok(4096));
        check_size("1m", Ok(1 << 20));
        check_size("1MB", Ok(1 << 20));
        check_size("3g", Ok(3 << 30));
        check_size("2t", Ok(2 << 40));
        check_size("1p", Ok(1 << 50));
        check_size("512b", Ok(512));
        check_size("0x1000", Ok(4096));
        check_size("0XfF", Ok(255));
        check_size("16383p", Ok(16383 << 50));
        check_size("16384p", Err("size '16384p': does not fit in 64 bits"));
        check_size(
            "18446744073709551616",
            Err("size '18446744073709551616': does not fit in 64 bits"),
        );
        check_size("4KiB", Err(&format!("size '4KiB': {SIZE_IEC}")));
        check_size("1gib", Err(&format!("size '1gib': {SIZE_IEC}")));
        check_size(
            "50%",
            Err("size '50%': percentages of the device are not supported; give a byte count such as 1g"),
        );
        for bad in [
            "", "k", "-4k", "+4k", "1.5g", "4 k", "4x", "4kk", "0x", "0xg", "1e6",
        ] {
            check_size(bad, Err(&format!("size '{bad}': {SIZE_FORMAT}")));
        }
    }

    fn check_duration(input: &str, default_unit_ns: u64, expected: Result<u64, &str>) {
        let actual = parse_duration_ns(input, default_unit_ns).map_err(|e| e.to_string());
        assert_eq!(
            actual,
            expected.map_err(str::to_string),
            "parse_duration_ns({input:?}, {default_unit_ns})"
        );
    }

    #[test]
    fn durations() {
        check_duration("10", NS_PER_S, Ok(10 * NS_PER_S));
        check_duration("10", NS_PER_US, Ok(10 * NS_PER_US));
        check_duration("0", NS_PER_S, Ok(0));
        check_duration("7ns", NS_PER_S, Ok(7));
        check_duration("7nsec", NS_PER_S, Ok(7));
        check_duration("7us", NS_PER_S, Ok(7_000));
        check_duration("7USEC", NS_PER_S, Ok(7_000));
        check_duration("7ms", NS_PER_S, Ok(7 * NS_PER_MS));
        check_duration("7msec", NS_PER_US, Ok(7 * NS_PER_MS));
        check_duration("7s", NS_PER_US, Ok(7 * NS_PER_S));
        check_duration("7sec", NS_PER_US, Ok(7 * NS_PER_S));
        check_duration("2m", NS_PER_S, Ok(120 * NS_PER_S));
        check_duration("2min", NS_PER_S, Ok(120 * NS_PER_S));
        check_duration("1h", NS_PER_S, Ok(3_600 * NS_PER_S));
        check_duration("1d", NS_PER_S, Ok(86_400 * NS_PER_S));
        check_duration(" 3s ", NS_PER_S, Ok(3 * NS_PER_S));
        check_duration(
            "300000d",
            NS_PER_S,
            Err("duration '300000d': does not fit in 64 bits of nanoseconds"),
        );
        check_duration(
            "5",
            0,
            Err("duration '5': the default unit must be at least 1 ns"),
        );
        for bad in ["", "s", "1.5s", "-1s", "10 s", "10x", "10sx", "1e3"] {
            check_duration(
                bad,
                NS_PER_S,
                Err(&format!("duration '{bad}': {DURATION_FORMAT}")),
            );
        }
    }

    #[test]
    fn format_size_round_trips() {
        for (size_bytes, text) in [
            (0, "0"),
            (512, "512"),
            (1536, "1536"),
            (4096, "4k"),
            (6144, "6k"),
            (1 << 20, "1m"),
            (3 << 30, "3g"),
            (5 << 40, "5t"),
            (7 << 50, "7p"),
            (u64::MAX, "18446744073709551615"),
        ] {
            assert_eq!(format_size(size_bytes), text);
            assert_eq!(parse_size(text), Ok(size_bytes));
        }
    }
}
