//! Sizes in bytes and durations in nanoseconds, read and written one way for all of nvarray.
//!
//! # What this crate owns
//!
//! - [`parse_size`] and [`format_size`]: byte counts such as `4k`, `1.5m` or `0x1000`.
//! - [`parse_duration_ns`] and [`format_duration_ns`]: durations such as `500us` or `1.5s`.
//! - The one rule set both follow, below. Device overrides (`--set key=value` in
//!   `nvarray-model`) and fio keys (`nvarray-workload`) both read numbers here, so the same
//!   text gives the same number wherever it is typed.
//!
//! # The rules
//!
//! - A number is decimal digits with an optional fraction (`4`, `1.5`, `.5`), then a suffix
//!   with no space before it. Suffixes are case-insensitive.
//! - Sizes: `k`, `m`, `g`, `t`, `p` are powers of 1024, each optionally followed by `b`
//!   (`4kb` is 4096, as in fio); a bare `b` or no suffix means bytes. `0x` followed by hex
//!   digits (no fraction, no suffix) is a size too.
//! - Durations: `ns`/`nsec`, `us`/`usec`, `ms`/`msec`, `s`/`sec`, `m`/`min`, `h`, `d`; no
//!   suffix means the caller's default unit (fio: seconds for `runtime`, microseconds for
//!   `thinktime`).
//! - A fraction is accepted only when the result is a whole number of bytes or nanoseconds:
//!   `0.5k` is 512 and `1.5us` is 1500, but `1.3` bytes and `0.5ns` are refused. At most
//!   [`FRACTION_DIGITS_MAX`] digits may follow the point.
//! - Refused, each with a message that says what to write instead: IEC suffixes (`KiB`, see
//!   [`SizeErrorKind::IecSuffix`] for why), percentages, signs, exponents, spaces inside,
//!   unknown suffixes and anything that does not fit in a `u64`.
//!
//! # What it must never do
//!
//! - Depend on another nvarray crate: it is the bottom of the crate graph.
//! - Panic on input, or round: a number is exact or it is an error.

#![warn(missing_docs)]

mod decimal;
mod duration;
mod size;

pub use decimal::FRACTION_DIGITS_MAX;
pub use duration::{
    format_duration_ns, parse_duration_ns, DurationError, DurationErrorKind, NS_PER_MS, NS_PER_S,
    NS_PER_US,
};
pub use size::{format_size, parse_size, SizeError, SizeErrorKind};
