//! Range checks for a policy's parameters, with one message shape for every policy:
//!
//! ```text
//! field `<path>`: <value> is out of range <interval>
//! ```
//!
//! The interval is written in mathematical notation (`[1, 4096]`, `[1, ∞)`, `(0, ∞)`,
//! `[0, 1]`), which says whether each end is included and reads the same for integers
//! and numbers. Parameter type errors from [`parse_parameters`](crate::parse_parameters)
//! start the same way (``field `<path>`: …``), so a tenant sees one shape for every
//! parameter error, and [`nested`] keeps it when a policy validates another's parameters
//! under a path of its own.
//!
//! Every check returns [`PolicyError::invalid_parameters`]. A float check fails for NaN,
//! and, since every interval here is finite or open at infinity, for ±∞ too.

use std::fmt::Display;
use std::ops::RangeInclusive;

use crate::PolicyError;
use crate::json::float::display;

/// The error for a parameter at `path` whose value lies outside `interval` (already
/// written in interval notation): the one shape all checks here use.
pub fn out_of_range(path: &str, value: impl Display, interval: impl Display) -> PolicyError {
    field(path, format_args!("{value} is out of range {interval}"))
}

/// An error about the parameter at `path`: ``field `<path>`: <detail>``.
pub fn field(path: &str, detail: impl Display) -> PolicyError {
    PolicyError::invalid_parameters(format!("field `{path}`: {detail}"))
}

/// `value ≥ min` (e.g. a count of blocks that must be at least 1).
pub fn at_least<T: PartialOrd + Display>(path: &str, value: T, min: T) -> Result<(), PolicyError> {
    if value >= min { Ok(()) } else { Err(out_of_range(path, value, format_args!("[{min}, ∞)"))) }
}

/// `value ∈ range`, both ends included. For floats, NaN is outside every range.
pub fn in_range<T: PartialOrd + Display>(
    path: &str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<(), PolicyError> {
    if range.contains(&value) {
        Ok(())
    } else {
        let (start, end) = range.into_inner();
        Err(out_of_range(path, value, format_args!("[{start}, {end}]")))
    }
}

/// [`in_range`] for an f64, written the same way (`1.5 is out of range [0, 1]`) by the
/// SDK's own float printing: a guest that formats no f64 with `Display` then links none
/// of core's (about 18 KB of a guest's code).
pub fn in_range_f64(path: &str, value: f64, range: RangeInclusive<f64>) -> Result<(), PolicyError> {
    if range.contains(&value) {
        Ok(())
    } else {
        let (start, end) = (display(*range.start()), display(*range.end()));
        Err(out_of_range(path, display(value), format_args!("[{start}, {end}]")))
    }
}

/// `0 < value < ∞` (a factor or a bound that must be a real, positive number).
pub fn finite_positive(path: &str, value: f64) -> Result<(), PolicyError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(out_of_range(path, display(value), "(0, ∞)"))
    }
}

/// `0 ≤ value < ∞` (a weight or a threshold that may be zero). `-0.0` is accepted, as
/// `-0.0 >= 0.0` holds.
pub fn finite_non_negative(path: &str, value: f64) -> Result<(), PolicyError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(out_of_range(path, display(value), "[0, ∞)"))
    }
}

/// `error` from checking parameters that sit at `prefix` in the caller's own (a
/// composite policy's row or sub-table): a ``field `<path>`: …`` message becomes
/// ``field `<prefix>.<path>`: …``, any other message ``field `<prefix>`: <message>``, so
/// the path is the whole way from the top of the tenant's parameters. The kind is kept.
pub fn nested(prefix: &str, error: PolicyError) -> PolicyError {
    let message = match error.message.strip_prefix("field `") {
        Some(rest) => format!("field `{prefix}.{rest}"),
        None => format!("field `{prefix}`: {}", error.message),
    };
    PolicyError { kind: error.kind, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn message(r: Result<(), PolicyError>) -> String {
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParameters);
        e.message
    }

    #[test]
    fn every_check_says_the_same_thing_the_same_way() {
        assert_eq!(
            message(at_least("prefix_blocks", 0u32, 1)),
            "field `prefix_blocks`: 0 is out of range [1, ∞)"
        );
        assert_eq!(
            message(in_range("replication", 5000u32, 1..=4096)),
            "field `replication`: 5000 is out of range [1, 4096]"
        );
        assert_eq!(
            message(in_range("threshold", 1.5, 0.0..=1.0)),
            "field `threshold`: 1.5 is out of range [0, 1]"
        );
        assert_eq!(
            message(finite_positive("load_factor", 0.0)),
            "field `load_factor`: 0 is out of range (0, ∞)"
        );
        assert_eq!(message(finite_non_negative("weight", -1.0)), "field `weight`: -1 is out of range [0, ∞)");
    }

    #[test]
    fn the_f64_range_check_says_what_the_generic_one_does() {
        for v in
            [1.5, -0.0, 0.5, 1.0, 2.0, -1e-300, 1e300, 0.1 + 0.2, f64::NAN, f64::INFINITY, -f64::INFINITY]
        {
            for range in [0.0..=1.0, 0.25..=0.75, -0.5..=1e20] {
                assert_eq!(
                    in_range_f64("x", v, range.clone()),
                    in_range("x", v, range.clone()),
                    "{v} {range:?}"
                );
            }
        }
    }

    #[test]
    fn bounds_are_where_the_intervals_say() {
        assert!(at_least("x", 1u32, 1).is_ok());
        assert!(in_range("x", 1u32, 1..=4096).is_ok() && in_range("x", 4096u32, 1..=4096).is_ok());
        assert!(in_range("x", 0u32, 1..=4096).is_err());
        assert!(in_range("x", 0.0, 0.0..=1.0).is_ok() && in_range("x", 1.0, 0.0..=1.0).is_ok());
        assert!(finite_positive("x", f64::MIN_POSITIVE).is_ok() && finite_positive("x", -0.0).is_err());
        assert!(finite_non_negative("x", 0.0).is_ok() && finite_non_negative("x", -0.0).is_ok());
    }

    #[test]
    fn nan_and_infinities_are_out_of_every_range() {
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(in_range("x", v, 0.0..=1.0).is_err(), "{v}");
            assert!(finite_positive("x", v).is_err(), "{v}");
            assert!(finite_non_negative("x", v).is_err(), "{v}");
        }
        assert_eq!(message(finite_positive("x", f64::INFINITY)), "field `x`: inf is out of range (0, ∞)");
    }

    #[test]
    fn nested_errors_carry_the_whole_path() {
        let inner = finite_non_negative("prefill_load_scale", -2.0).unwrap_err();
        assert_eq!(
            nested("cost", inner).message,
            "field `cost.prefill_load_scale`: -2 is out of range [0, ∞)"
        );
        let twice = nested("classes.gold", nested("row", field("x", "bad")));
        assert_eq!(twice.message, "field `classes.gold.row.x`: bad");
        let other = nested("cost", PolicyError::internal("broke"));
        assert_eq!((other.kind, other.message.as_str()), (ErrorKind::Internal, "field `cost`: broke"));
    }
}
