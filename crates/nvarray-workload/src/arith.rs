//! Arithmetic in job-file values, as fio 3.33 evaluates it.
//!
//! fio has two ways, and nvarray takes both:
//!
//! - **Keywords and `bc`.** When a value of a job file had one of fio's keywords (`$pagesize`,
//!   `$mb_memory`, `$ncpus`) replaced and holds `+ - * /`, fio hands it to `bc`: integers, `/`
//!   truncating, `%`, `^` and parentheses, and no units (`size=5*1024*$pagesize`).
//! - **Parenthesised expressions** (fio's HOWTO, "provided it is surrounded by parentheses"):
//!   a value that starts with `(` is an expression whose numbers may carry size units
//!   (`k`, `m`, `g`, `t`, `p`, powers of 1024), e.g. `size=(2*512)m`. fio builds this only with
//!   lex and yacc, which Debian's fio 3.33 lacks (it refuses such values); nvarray evaluates
//!   them as the HOWTO says.
//!
//! Operators, lowest first: `+ -`, then `* / %`, then `^` (right to left), then unary `-`;
//! integers are 64-bit signed, and overflow or division by zero is an error, not a wrap.

/// The value of `expr`; `units` lets a number carry a size suffix.
pub(crate) fn evaluate(expr: &str, units: bool) -> Result<i64, String> {
    let mut p = Parser {
        text: expr.as_bytes(),
        at: 0,
        units,
    };
    let value = p.sum()?;
    p.skip_space();
    assert!(p.at <= p.text.len(), "the parser read past the expression");
    if p.at != p.text.len() {
        return Err(format!(
            "'{expr}': unexpected '{}' at character {}",
            &expr[p.at..],
            p.at + 1
        ));
    }
    Ok(value)
}

/// A parenthesised value's result followed by a unit, as the HOWTO's `(2*512)m`: the
/// expression and the suffix after its closing parenthesis.
pub(crate) fn evaluate_value(value: &str) -> Result<i64, String> {
    let value = value.trim();
    let close =
        matching_close(value).ok_or_else(|| format!("'{value}': unbalanced parentheses"))?;
    let (expr, suffix) = value.split_at(close + 1);
    let n = evaluate(expr, true)?;
    let unit = unit_multiplier(suffix.trim()).ok_or_else(|| {
        format!(
            "'{value}': unknown unit '{}' after the expression",
            suffix.trim()
        )
    })?;
    n.checked_mul(unit)
        .ok_or_else(|| format!("'{value}': the result overflows 64 bits"))
}

/// Index of the `)` closing the `(` at the start of `value`.
fn matching_close(value: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in value.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// A size unit's multiplier (`""` is 1); fio's `k`, `kb`, `kib` and so on are all 1024-based
/// here, as its default `kb_base` makes them.
fn unit_multiplier(unit: &str) -> Option<i64> {
    let u = unit.to_ascii_lowercase();
    let u = u
        .strip_suffix("ib")
        .or_else(|| u.strip_suffix('b'))
        .unwrap_or(&u);
    Some(match u {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        "p" => 1 << 50,
        _ => return None,
    })
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
    units: bool,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.text.get(self.at).copied()
    }

    fn sum(&mut self) -> Result<i64, String> {
        let mut value = self.product()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.at += 1;
            let rhs = self.product()?;
            value = if op == b'+' {
                value.checked_add(rhs)
            } else {
                value.checked_sub(rhs)
            }
            .ok_or("the expression overflows 64 bits")?;
        }
        Ok(value)
    }

    fn product(&mut self) -> Result<i64, String> {
        let mut value = self.power()?;
        while let Some(op @ (b'*' | b'/' | b'%')) = self.peek() {
            self.at += 1;
            let rhs = self.power()?;
            value = match op {
                b'*' => value
                    .checked_mul(rhs)
                    .ok_or("the expression overflows 64 bits")?,
                _ if rhs == 0 => return Err("division by zero".into()),
                b'/' => value / rhs,
                _ => value % rhs,
            };
        }
        Ok(value)
    }

    fn power(&mut self) -> Result<i64, String> {
        let base = self.unary()?;
        if self.peek() == Some(b'^') {
            self.at += 1;
            let exponent = self.power()?;
            let exponent = u32::try_from(exponent).map_err(|_| "a negative or huge exponent")?;
            return base
                .checked_pow(exponent)
                .ok_or_else(|| "the expression overflows 64 bits".to_string());
        }
        Ok(base)
    }

    fn unary(&mut self) -> Result<i64, String> {
        match self.peek() {
            Some(b'-') => {
                self.at += 1;
                self.unary()?
                    .checked_neg()
                    .ok_or_else(|| "the expression overflows 64 bits".to_string())
            }
            Some(b'(') => {
                self.at += 1;
                let value = self.sum()?;
                if self.peek() != Some(b')') {
                    return Err("a '(' without its ')'".into());
                }
                self.at += 1;
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() => self.number(),
            Some(c) => Err(format!("unexpected '{}'", c as char)),
            None => Err("the expression ends too soon".into()),
        }
    }

    fn number(&mut self) -> Result<i64, String> {
        let start = self.at;
        while self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        assert!(self.at > start, "a number read where no digit is");
        let digits = std::str::from_utf8(&self.text[start..self.at]).expect("ASCII digits");
        let n: i64 = digits
            .parse()
            .map_err(|_| format!("{digits} is too large"))?;
        if !self.units {
            return Ok(n);
        }
        let unit_start = self.at;
        while self.text.get(self.at).is_some_and(u8::is_ascii_alphabetic) {
            self.at += 1;
        }
        let unit = std::str::from_utf8(&self.text[unit_start..self.at]).expect("ASCII letters");
        let multiplier = unit_multiplier(unit).ok_or_else(|| format!("unknown unit '{unit}'"))?;
        n.checked_mul(multiplier)
            .ok_or_else(|| "the expression overflows 64 bits".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bc_arithmetic_on_integers() {
        for (expr, want) in [
            ("5*1024*4096", 5 * 1024 * 4096),
            ("4096*7/2", 14336),
            ("(4096*3)", 12288),
            ("10-2-3", 5),
            ("2^3^2", 512),
            ("-2^2", 4),
            ("7%3*10", 10),
            ("1+2*3", 7),
            (" 8 / 3 ", 2),
        ] {
            assert_eq!(evaluate(expr, false), Ok(want), "{expr}");
        }
    }

    #[test]
    fn parenthesised_values_take_units() {
        assert_eq!(evaluate_value("(2*512)m"), Ok(1 << 30));
        assert_eq!(evaluate_value("(1g+512m)"), Ok(3 << 29));
        assert_eq!(evaluate_value("(10-2)k"), Ok(8192));
    }

    #[test]
    fn bad_expressions_say_why() {
        for (expr, units, why) in [
            ("1/0", false, "division by zero"),
            ("9223372036854775807+1", false, "overflows"),
            ("2*", false, "ends too soon"),
            ("(1+2", false, "without its ')'"),
            ("4k*2", false, "unexpected 'k"),
            ("3q", true, "unknown unit"),
            ("2^-1", false, "exponent"),
        ] {
            let e = evaluate(expr, units).unwrap_err();
            assert!(e.contains(why), "{expr}: {e}");
        }
        assert!(evaluate_value("(1+1)x")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(evaluate_value("(1+1").unwrap_err().contains("unbalanced"));
    }
}
