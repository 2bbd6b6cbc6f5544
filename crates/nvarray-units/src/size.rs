//! Byte counts: `4k`, `1.5m`, `0x1000`.

use crate::decimal::{split_decimal, ScaleError};

/// Reads a byte count the way fio reads one with its default `kb_base=1024`, plus exact
/// fractions.
///
/// Accepted: a number (see the [crate] rules: digits, an optional fraction) with an optional,
/// case-insensitive suffix `k`, `m`, `g`, `t`, `p` (powers of 1024), each optionally followed
/// by `b` (`4kb` is 4096, as in fio); a bare `b` means bytes. A fraction must come to whole
/// bytes: `0.5k` is 512, `1.3` is refused. `0x` followed by hex digits (no suffix, no
/// fraction) is accepted too, as fio does. Blanks around the text are ignored.
///
/// Refused, with a [`SizeErrorKind`] that says why: IEC suffixes such as `KiB`, percentages
/// (`50%`), signs, exponents, spaces inside, unknown suffixes, and anything above `u64::MAX`.
///
/// ```
/// use nvarray_units::{parse_size, SizeErrorKind};
/// assert_eq!(parse_size("4k"), Ok(4096));
/// assert_eq!(parse_size("1MB"), Ok(1 << 20));
/// assert_eq!(parse_size("0.5k"), Ok(512));
/// assert_eq!(parse_size("4KiB").unwrap_err().kind(), SizeErrorKind::IecSuffix);
/// assert_eq!(parse_size("1.3").unwrap_err().kind(), SizeErrorKind::NotWholeBytes);
/// ```
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let err = |kind| SizeError {
        input: text.to_string(),
        kind,
    };
    let trimmed = text.trim();
    if let Some(hex) = trimmed
        .strip_prefix("0x")
        .or_else(|| trimmed.strip_prefix("0X"))
    {
        if hex.is_empty() || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(err(SizeErrorKind::Malformed));
        }
        return u64::from_str_radix(hex, 16).map_err(|_| err(SizeErrorKind::Overflow));
    }
    let (number, suffix) = split_decimal(trimmed).ok_or_else(|| err(SizeErrorKind::Malformed))?;
    let shift: u32 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" => 10,
        "m" | "mb" => 20,
        "g" | "gb" => 30,
        "t" | "tb" => 40,
        "p" | "pb" => 50,
        "kib" | "mib" | "gib" | "tib" | "pib" => return Err(err(SizeErrorKind::IecSuffix)),
        "%" => return Err(err(SizeErrorKind::Percentage)),
        _ => return Err(err(SizeErrorKind::Malformed)),
    };
    number.scale(1u64 << shift).map_err(|e| {
        err(match e {
            ScaleError::NotWhole => SizeErrorKind::NotWholeBytes,
            ScaleError::FractionTooLong => SizeErrorKind::FractionTooLong,
            ScaleError::Overflow => SizeErrorKind::Overflow,
        })
    })
}

/// Writes a byte count with the largest suffix that represents it exactly, so that
/// [`parse_size`] reads the result back to the same number: `4096` gives `4k`, `1536` gives
/// `1536` (never a fraction).
///
/// ```
/// use nvarray_units::format_size;
/// assert_eq!(format_size(4096), "4k");
/// assert_eq!(format_size(1536), "1536");
/// ```
pub fn format_size(size_bytes: u64) -> String {
    const SUFFIXES: [(u32, &str); 5] = [(50, "p"), (40, "t"), (30, "g"), (20, "m"), (10, "k")];
    if size_bytes != 0 {
        for (shift, suffix) in SUFFIXES {
            if size_bytes.trailing_zeros() >= shift {
                let text = format!("{}{}", size_bytes >> shift, suffix);
                debug_assert_eq!(
                    parse_size(&text),
                    Ok(size_bytes),
                    "{text} does not read back"
                );
                return text;
            }
        }
    }
    size_bytes.to_string()
}

/// A size that [`parse_size`] refused: the text as given and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("size '{input}': {}", .kind.reason())]
pub struct SizeError {
    input: String,
    kind: SizeErrorKind,
}

impl SizeError {
    /// The text as given.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// Which rule the text broke.
    pub fn kind(&self) -> SizeErrorKind {
        self.kind
    }

    /// What is wrong and what would be accepted; the message without the input.
    pub fn reason(&self) -> &'static str {
        self.kind.reason()
    }
}

/// Which rule a size broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SizeErrorKind {
    /// Not a number with a known suffix (`4x`, `-4k`, `1e6`, `4 k`, `0xg`, empty).
    Malformed,
    /// An IEC suffix such as `KiB`.
    ///
    /// fio's default `kb_base=1024` is a compatibility mode in which `4k` and `4kb` mean 4096
    /// but `4KiB` means 4000 (fio parse.c, `__get_mult_bytes`). Following fio would surprise
    /// everyone who writes IEC units on purpose; following IEC would silently disagree with
    /// fio on the same job file. Refusing the suffix is the only choice that cannot produce
    /// a wrong number.
    IecSuffix,
    /// A percentage (`50%`), which fio reads as a share of the device.
    Percentage,
    /// A fraction that is not a whole number of bytes (`1.3`, `0.3k`).
    NotWholeBytes,
    /// More than [`FRACTION_DIGITS_MAX`](crate::FRACTION_DIGITS_MAX) digits after the point.
    FractionTooLong,
    /// Larger than `u64::MAX` bytes.
    Overflow,
}

impl SizeErrorKind {
    /// What is wrong and what would be accepted, as one line.
    pub fn reason(self) -> &'static str {
        match self {
            SizeErrorKind::Malformed => {
                "expected an unsigned number with an optional suffix k, m, g, t or p (powers of \
                 1024, optionally followed by b, any case), or 0x followed by hex digits"
            }
            SizeErrorKind::IecSuffix => {
                "IEC suffixes (KiB, MiB, ...) are refused because fio's default kb_base=1024 \
                 reads them as powers of 1000; write 4k for 4096 bytes"
            }
            SizeErrorKind::Percentage => {
                "percentages of the device are not supported; give a byte count such as 1g"
            }
            SizeErrorKind::NotWholeBytes => {
                "a fraction must come to a whole number of bytes, as 0.5k (512) does"
            }
            SizeErrorKind::FractionTooLong => {
                "at most 18 digits may follow the decimal point; use a smaller unit"
            }
            SizeErrorKind::Overflow => "does not fit in 64 bits",
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Parses `input` and compares the number, or the whole error message.
    fn check(input: &str, expected: Result<u64, SizeErrorKind>) {
        let actual = parse_size(input).map_err(|e| e.to_string());
        let expected = expected.map_err(|kind| format!("size '{input}': {}", kind.reason()));
        assert_eq!(actual, expected, "parse_size({input:?})");
    }

    #[test]
    fn accepted_forms() {
        check("512", Ok(512));
        check("0", Ok(0));
        check(" 4k ", Ok(4096));
        check("4K", Ok(4096));
        check("4kb", Ok(4096));
        check("4KB", Ok(4096));
        check("4kB", Ok(4096));
        check("1m", Ok(1 << 20));
        check("1MB", Ok(1 << 20));
        check("3g", Ok(3 << 30));
        check("3gb", Ok(3 << 30));
        check("2t", Ok(2 << 40));
        check("2TB", Ok(2 << 40));
        check("1p", Ok(1 << 50));
        check("1pb", Ok(1 << 50));
        check("512b", Ok(512));
        check("512B", Ok(512));
        check("0x1000", Ok(4096));
        check("0XfF", Ok(255));
        check("0xffffffffffffffff", Ok(u64::MAX));
        check("16383p", Ok(16383 << 50));
        check("18446744073709551615", Ok(u64::MAX));
        // Fractions that come to whole bytes.
        check("0.5k", Ok(512));
        check("1.5k", Ok(1536));
        check("1.5g", Ok(3 << 29));
        check(".5k", Ok(512));
        check("2.k", Ok(2048));
        check("1.0", Ok(1));
        check("4.000", Ok(4));
        check("0.25kb", Ok(256));
        check("0.0009765625m", Ok(1024));
        check("0.000000000000000000k", Ok(0));
    }

    #[test]
    fn refused_forms_say_why() {
        use SizeErrorKind::*;
        for iec in ["4KiB", "1gib", "1MiB", "2TiB", "1pib", "0.5KiB"] {
            check(iec, Err(IecSuffix));
        }
        check("50%", Err(Percentage));
        check("1.3", Err(NotWholeBytes));
        check("0.3k", Err(NotWholeBytes));
        check("0.5b", Err(NotWholeBytes));
        check("0.0001k", Err(NotWholeBytes));
        check("1.0000000000000000000", Err(FractionTooLong));
        check("16384p", Err(Overflow));
        check("18446744073709551616", Err(Overflow));
        check("0x10000000000000000", Err(Overflow));
        check("16383.9999p", Err(NotWholeBytes));
        check("16384.5p", Err(Overflow));
        for malformed in [
            "", " ", "k", "b", "-4k", "+4k", "4 k", "4x", "4kk", "4kbb", "4bk", "0x", "0xg",
            "0x1k", "0x1.8", "1e6", "1,5k", ".", "1.2.3", "inf", "NaN", "4ki", "4k ib",
        ] {
            check(malformed, Err(Malformed));
        }
    }

    #[test]
    fn messages_carry_the_explanations() {
        // The IEC explanation is the reason users meet; keep its point (fio's kb_base).
        assert!(SizeErrorKind::IecSuffix.reason().contains("kb_base=1024"));
        let limit = crate::FRACTION_DIGITS_MAX.to_string();
        assert!(SizeErrorKind::FractionTooLong.reason().contains(&limit));
        let e = parse_size("4KiB").unwrap_err();
        assert_eq!(e.input(), "4KiB");
        assert_eq!(e.reason(), SizeErrorKind::IecSuffix.reason());
    }

    #[test]
    fn format_size_uses_the_largest_exact_suffix() {
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
            (1 << 60, "1024p"),
            (u64::MAX, "18446744073709551615"),
        ] {
            assert_eq!(format_size(size_bytes), text);
            assert_eq!(parse_size(text), Ok(size_bytes));
        }
    }

    proptest! {
        #[test]
        fn format_size_round_trips(size_bytes: u64) {
            prop_assert_eq!(parse_size(&format_size(size_bytes)), Ok(size_bytes));
        }

        /// Any byte count written as an exact fraction of a kibibyte reads back to itself:
        /// n / 1024 = n * 5^10 / 10^10, so its fraction is (n mod 1024) * 5^10 in ten digits.
        #[test]
        fn exact_kibibyte_fractions_read_back(size_bytes in 0u64..(1 << 54)) {
            let fraction = (size_bytes % 1024) * 5u64.pow(10);
            let text = format!("{}.{fraction:010}k", size_bytes / 1024);
            prop_assert_eq!(parse_size(&text), Ok(size_bytes), "{}", text);
        }

        /// A nonzero last digit after the point never makes whole bytes without a suffix.
        #[test]
        fn fractions_of_a_byte_are_refused(whole: u32, fraction in 1u32..1000, zeros in 0usize..3) {
            prop_assume!(fraction % 10 != 0);
            let text = format!("{whole}.{}{fraction}", "0".repeat(zeros));
            let kind = parse_size(&text).unwrap_err().kind();
            prop_assert_eq!(kind, SizeErrorKind::NotWholeBytes, "{}", text);
        }
    }
}
