//! The number that sizes and durations share: decimal digits with an optional fraction,
//! multiplied exactly by a unit.

/// Most digits accepted after the decimal point.
///
/// The bound keeps the exact arithmetic inside `u128`: a fraction of at most this many digits
/// is below 2^64, and times a unit below 2^64 it stays below 2^128. Eighteen digits are far
/// more than anyone types; a number that needs more to come out whole (one byte written in
/// megabytes) can be written in a smaller unit.
pub const FRACTION_DIGITS_MAX: usize = 18;

const _: () = assert!(10u128.pow(FRACTION_DIGITS_MAX as u32) <= u64::MAX as u128);

/// A decimal number as written: the digits before and after the point, either part possibly
/// empty but not both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decimal<'a> {
    whole_digits: &'a str,
    fraction_digits: &'a str,
}

/// Why a [`Decimal`] times a unit is not a `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScaleError {
    /// The product has a fractional part.
    NotWhole,
    /// More than [`FRACTION_DIGITS_MAX`] digits after the point.
    FractionTooLong,
    /// The product is larger than `u64::MAX`.
    Overflow,
}

/// Splits `1.5kb` into the number `1.5` and the suffix `kb`. `None` when the text does not
/// start with a number: no digit before the first other character, or a second point.
pub(crate) fn split_decimal(text: &str) -> Option<(Decimal<'_>, &str)> {
    let number_len = text
        .bytes()
        .position(|c| !(c.is_ascii_digit() || c == b'.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_len);
    let (whole_digits, fraction_digits) = number.split_once('.').unwrap_or((number, ""));
    if fraction_digits.contains('.') || whole_digits.len() + fraction_digits.len() == 0 {
        return None;
    }
    let decimal = Decimal {
        whole_digits,
        fraction_digits,
    };
    Some((decimal, suffix))
}

impl Decimal<'_> {
    /// The number times `unit`, exactly.
    pub(crate) fn scale(self, unit: u64) -> Result<u64, ScaleError> {
        assert!(unit > 0);
        if self.fraction_digits.len() > FRACTION_DIGITS_MAX {
            return Err(ScaleError::FractionTooLong);
        }
        let whole = parse_digits(self.whole_digits).ok_or(ScaleError::Overflow)?;
        let fraction = parse_digits(self.fraction_digits).expect("at most 18 digits fit in u64");
        // fraction / 10^digits * unit is whole exactly when 10^digits divides fraction * unit.
        let denominator = 10u128.pow(self.fraction_digits.len() as u32);
        let fraction_scaled = u128::from(fraction) * u128::from(unit);
        if fraction_scaled % denominator != 0 {
            return Err(ScaleError::NotWhole);
        }
        let total = u128::from(whole) * u128::from(unit) + fraction_scaled / denominator;
        u64::try_from(total).map_err(|_| ScaleError::Overflow)
    }
}

/// Decimal digits as a `u64`; the empty string is 0, `None` when the value does not fit.
fn parse_digits(digits: &str) -> Option<u64> {
    if digits.is_empty() {
        return Some(0);
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, unit: u64, expected: Option<(Result<u64, ScaleError>, &str)>) {
        let actual = split_decimal(text).map(|(decimal, suffix)| (decimal.scale(unit), suffix));
        assert_eq!(actual, expected, "{text:?} times {unit}");
    }

    #[test]
    fn numbers_split_and_scale_exactly() {
        check("4", 1, Some((Ok(4), "")));
        check("4k", 1024, Some((Ok(4096), "k")));
        check("1.5", 1000, Some((Ok(1500), "")));
        check(".5x", 1024, Some((Ok(512), "x")));
        check("5.", 3, Some((Ok(15), "")));
        check("007", 1, Some((Ok(7), "")));
        check("0.125", 8, Some((Ok(1), "")));
        check("0.3", 1024, Some((Err(ScaleError::NotWhole), "")));
        check("1.3", 1, Some((Err(ScaleError::NotWhole), "")));
        // Eighteen digits are accepted, nineteen are not, whatever they are.
        check("0.000000000000000001", 10u64.pow(18), Some((Ok(1), "")));
        check(
            "0.0000000000000000010",
            10u64.pow(18),
            Some((Err(ScaleError::FractionTooLong), "")),
        );
        check("18446744073709551615", 1, Some((Ok(u64::MAX), "")));
        check(
            "18446744073709551616",
            1,
            Some((Err(ScaleError::Overflow), "")),
        );
        check("9223372036854775807.5", 2, Some((Ok(u64::MAX), "")));
        check(
            "9223372036854775808",
            2,
            Some((Err(ScaleError::Overflow), "")),
        );
        // The largest products stay exact: (2^64 - 1) * (2^64 - 1) does not wrap.
        check(
            "18446744073709551615.999999999999999999",
            u64::MAX,
            Some((Err(ScaleError::NotWhole), "")),
        );
        check(
            "18446744073709551615",
            u64::MAX,
            Some((Err(ScaleError::Overflow), "")),
        );
        for not_a_number in ["", ".", "k", "-1", "+1", "1.2.3", " 1"] {
            check(not_a_number, 1, None);
        }
    }
}
