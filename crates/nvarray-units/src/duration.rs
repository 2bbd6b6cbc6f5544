//! Durations in nanoseconds: `500us`, `1.5s`, `2m`.

use crate::decimal::{split_decimal, ScaleError};

/// Nanoseconds in one microsecond.
pub const NS_PER_US: u64 = 1_000;
/// Nanoseconds in one millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds in one second.
pub const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_MIN: u64 = 60 * NS_PER_S;
const NS_PER_H: u64 = 60 * NS_PER_MIN;
const NS_PER_D: u64 = 24 * NS_PER_H;

/// Reads a duration into nanoseconds the way fio reads its time options, plus nanoseconds and
/// exact fractions.
///
/// A number without a suffix is in `default_unit_ns` (fio: seconds for `runtime`,
/// microseconds for `thinktime`). Suffixes, case-insensitive: `ns`/`nsec` (an nvarray
/// extension: fio stops at microseconds), `us`/`usec`, `ms`/`msec`, `s`/`sec`, `m`/`min`,
/// `h`, `d`. A fraction must come to whole nanoseconds: `1.5us` is 1500, `0.5ns` is refused.
/// Blanks around the text are ignored.
///
/// Refused, with a [`DurationErrorKind`] that says why: signs, exponents, spaces inside,
/// unknown suffixes, values above `u64::MAX` nanoseconds (about 584 years), and a
/// `default_unit_ns` of 0.
///
/// ```
/// use nvarray_units::{parse_duration_ns, NS_PER_S, NS_PER_US};
/// assert_eq!(parse_duration_ns("10", NS_PER_S), Ok(10 * NS_PER_S));
/// assert_eq!(parse_duration_ns("250ms", NS_PER_S), Ok(250_000_000));
/// assert_eq!(parse_duration_ns("5", NS_PER_US), Ok(5_000));
/// assert_eq!(parse_duration_ns("1.5us", NS_PER_S), Ok(1_500));
/// assert!(parse_duration_ns("0.5ns", NS_PER_S).is_err());
/// ```
pub fn parse_duration_ns(text: &str, default_unit_ns: u64) -> Result<u64, DurationError> {
    let err = |kind| DurationError {
        input: text.to_string(),
        kind,
    };
    if default_unit_ns == 0 {
        return Err(err(DurationErrorKind::DefaultUnitZero));
    }
    let (number, suffix) =
        split_decimal(text.trim()).ok_or_else(|| err(DurationErrorKind::Malformed))?;
    let unit_ns = match suffix.to_ascii_lowercase().as_str() {
        "" => default_unit_ns,
        "ns" | "nsec" => 1,
        "us" | "usec" => NS_PER_US,
        "ms" | "msec" => NS_PER_MS,
        "s" | "sec" => NS_PER_S,
        "m" | "min" => NS_PER_MIN,
        "h" => NS_PER_H,
        "d" => NS_PER_D,
        _ => return Err(err(DurationErrorKind::Malformed)),
    };
    number.scale(unit_ns).map_err(|e| {
        err(match e {
            ScaleError::NotWhole => DurationErrorKind::NotWholeNanoseconds,
            ScaleError::FractionTooLong => DurationErrorKind::FractionTooLong,
            ScaleError::Overflow => DurationErrorKind::Overflow,
        })
    })
}

/// Writes a duration with the largest of `s`, `ms`, `us` and `ns` that represents it exactly,
/// so that [`parse_duration_ns`] reads the result back to the same number: `1_500_000` gives
/// `1500us`, `0` gives `0s`.
///
/// ```
/// use nvarray_units::format_duration_ns;
/// assert_eq!(format_duration_ns(2_000_000_000), "2s");
/// assert_eq!(format_duration_ns(1_500_000), "1500us");
/// ```
pub fn format_duration_ns(duration_ns: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(NS_PER_S, "s"), (NS_PER_MS, "ms"), (NS_PER_US, "us")];
    for (unit_ns, suffix) in UNITS {
        if duration_ns.is_multiple_of(unit_ns) {
            let text = format!("{}{suffix}", duration_ns / unit_ns);
            debug_assert_eq!(
                parse_duration_ns(&text, NS_PER_S),
                Ok(duration_ns),
                "{text} does not read back"
            );
            return text;
        }
    }
    format!("{duration_ns}ns")
}

/// A duration that [`parse_duration_ns`] refused: the text as given and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("duration '{input}': {}", .kind.reason())]
pub struct DurationError {
    input: String,
    kind: DurationErrorKind,
}

impl DurationError {
    /// The text as given.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// Which rule the text broke.
    pub fn kind(&self) -> DurationErrorKind {
        self.kind
    }

    /// What is wrong and what would be accepted; the message without the input.
    pub fn reason(&self) -> &'static str {
        self.kind.reason()
    }
}

/// Which rule a duration broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DurationErrorKind {
    /// Not a number with a known suffix (`10x`, `-1s`, `1e3`, `10 s`, empty).
    Malformed,
    /// A fraction that is not a whole number of nanoseconds (`0.5ns`, `1.0001us`).
    NotWholeNanoseconds,
    /// More than [`FRACTION_DIGITS_MAX`](crate::FRACTION_DIGITS_MAX) digits after the point.
    FractionTooLong,
    /// More than `u64::MAX` nanoseconds.
    Overflow,
    /// The caller asked for a default unit of 0 ns.
    DefaultUnitZero,
}

impl DurationErrorKind {
    /// What is wrong and what would be accepted, as one line.
    pub fn reason(self) -> &'static str {
        match self {
            DurationErrorKind::Malformed => {
                "expected an unsigned number with an optional suffix ns, us, ms, s, m, h or d \
                 (no suffix: the key's default unit)"
            }
            DurationErrorKind::NotWholeNanoseconds => {
                "a fraction must come to a whole number of nanoseconds, as 1.5us (1500ns) does"
            }
            DurationErrorKind::FractionTooLong => {
                "at most 18 digits may follow the decimal point; use a smaller unit"
            }
            DurationErrorKind::Overflow => "does not fit in 64 bits of nanoseconds",
            DurationErrorKind::DefaultUnitZero => "the default unit must be at least 1 ns",
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Parses `input` with `default_unit_ns` and compares the number, or the whole message.
    fn check(input: &str, default_unit_ns: u64, expected: Result<u64, DurationErrorKind>) {
        let actual = parse_duration_ns(input, default_unit_ns).map_err(|e| e.to_string());
        let expected = expected.map_err(|kind| format!("duration '{input}': {}", kind.reason()));
        assert_eq!(
            actual, expected,
            "parse_duration_ns({input:?}, {default_unit_ns})"
        );
    }

    #[test]
    fn accepted_forms() {
        check("10", NS_PER_S, Ok(10 * NS_PER_S));
        check("10", NS_PER_US, Ok(10 * NS_PER_US));
        check("0", NS_PER_S, Ok(0));
        check("7ns", NS_PER_S, Ok(7));
        check("7nsec", NS_PER_S, Ok(7));
        check("7us", NS_PER_S, Ok(7_000));
        check("7USEC", NS_PER_S, Ok(7_000));
        check("7ms", NS_PER_S, Ok(7 * NS_PER_MS));
        check("7msec", NS_PER_US, Ok(7 * NS_PER_MS));
        check("7MS", NS_PER_US, Ok(7 * NS_PER_MS));
        check("7s", NS_PER_US, Ok(7 * NS_PER_S));
        check("7sec", NS_PER_US, Ok(7 * NS_PER_S));
        check("2m", NS_PER_S, Ok(120 * NS_PER_S));
        check("2min", NS_PER_S, Ok(120 * NS_PER_S));
        check("1h", NS_PER_S, Ok(3_600 * NS_PER_S));
        check("1d", NS_PER_S, Ok(86_400 * NS_PER_S));
        check(" 3s ", NS_PER_S, Ok(3 * NS_PER_S));
        check("18446744073709551615ns", NS_PER_S, Ok(u64::MAX));
        // Fractions that come to whole nanoseconds, with a suffix or the default unit.
        check("1.5us", NS_PER_S, Ok(1_500));
        check("0.5s", NS_PER_US, Ok(500 * NS_PER_MS));
        check("0.5", NS_PER_S, Ok(500 * NS_PER_MS));
        check("2.5", NS_PER_US, Ok(2_500));
        check(".25ms", NS_PER_S, Ok(250 * NS_PER_US));
        check("1.5m", NS_PER_S, Ok(90 * NS_PER_S));
        check("0.5h", NS_PER_S, Ok(1_800 * NS_PER_S));
        check("1.5d", NS_PER_S, Ok(129_600 * NS_PER_S));
        check("0.000000001s", NS_PER_US, Ok(1));
        check("3.0ns", NS_PER_S, Ok(3));
    }

    #[test]
    fn refused_forms_say_why() {
        use DurationErrorKind::*;
        check("0.5ns", NS_PER_S, Err(NotWholeNanoseconds));
        check("1.0001us", NS_PER_S, Err(NotWholeNanoseconds));
        check("0.0000000001s", NS_PER_S, Err(NotWholeNanoseconds));
        check("0.5", 1, Err(NotWholeNanoseconds));
        check("1.0000000000000000000s", NS_PER_S, Err(FractionTooLong));
        check("300000d", NS_PER_S, Err(Overflow));
        check("18446744073709551616ns", NS_PER_S, Err(Overflow));
        check("18446744073709551616", NS_PER_S, Err(Overflow));
        check("5", 0, Err(DefaultUnitZero));
        for malformed in [
            "", "s", "-1s", "+1s", "10 s", "10x", "10sx", "1e3", "1.2.3s", "0x10", "10µs", "1hr",
            "1mn", "10%", "10KiB",
        ] {
            check(malformed, NS_PER_S, Err(Malformed));
        }
    }

    #[test]
    fn messages_carry_the_limits() {
        let limit = crate::FRACTION_DIGITS_MAX.to_string();
        assert!(DurationErrorKind::FractionTooLong.reason().contains(&limit));
        let e = parse_duration_ns("0.5ns", 1).unwrap_err();
        assert_eq!(e.input(), "0.5ns");
        assert_eq!(e.kind(), DurationErrorKind::NotWholeNanoseconds);
        assert_eq!(e.reason(), e.kind().reason());
    }

    #[test]
    fn format_duration_uses_the_largest_exact_unit() {
        for (duration_ns, text) in [
            (0, "0s"),
            (7, "7ns"),
            (1_500, "1500ns"),
            (2_000, "2us"),
            (1_500_000, "1500us"),
            (3 * NS_PER_MS, "3ms"),
            (120 * NS_PER_S, "120s"),
            (u64::MAX, "18446744073709551615ns"),
        ] {
            assert_eq!(format_duration_ns(duration_ns), text);
            assert_eq!(parse_duration_ns(text, NS_PER_S), Ok(duration_ns));
        }
    }

    proptest! {
        #[test]
        fn format_duration_round_trips(duration_ns: u64, default_unit_ns in 1u64..=NS_PER_S) {
            let text = format_duration_ns(duration_ns);
            prop_assert_eq!(parse_duration_ns(&text, default_unit_ns), Ok(duration_ns));
        }

        /// Any whole number of nanoseconds written as an exact decimal of a larger unit reads
        /// back to itself.
        #[test]
        fn exact_fractions_of_a_unit_read_back(duration_ns: u64, unit in 0usize..3) {
            let (unit_ns, digits, suffix) = [(NS_PER_US, 3, "us"), (NS_PER_MS, 6, "ms"), (NS_PER_S, 9, "s")][unit];
            let text = format!("{}.{:0digits$}{suffix}", duration_ns / unit_ns, duration_ns % unit_ns);
            prop_assert_eq!(parse_duration_ns(&text, 1), Ok(duration_ns), "{}", text);
        }
    }
}
