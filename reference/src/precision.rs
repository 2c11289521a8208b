//! Declared precision (DIGEST §6) and bitwise change detection.

/// Whether `p` is an allowed precision: finite and within `2^-1000 ..= 2^1000`.
pub fn precision_in_range(p: f64) -> bool {
    p.is_finite() && p >= f64::powi(2.0, -1000) && p <= f64::powi(2.0, 1000)
}

/// The quantum of precision `p`: the largest power of two not above `p`.
/// `p` must be in range (normal, so the exponent bits give it exactly).
pub fn quantum(p: f64) -> f64 {
    f64::from_bits(p.to_bits() & 0x7ff0_0000_0000_0000)
}

/// Rounds `x` to the quantum `q`, ties to even; NaN, infinities and values
/// with `|x| >= 2^52 * q` are returned unchanged.
pub fn round_to_quantum(x: f64, q: f64) -> f64 {
    if !x.is_finite() || x.abs() >= q * f64::powi(2.0, 52) {
        return x;
    }
    // x / q and the product are exact: q is a power of two, and the result is
    // an integer of at most 52 bits times q.
    let r = (x / q).round_ties_even() * q;
    // Keep the sign of a value that rounds to zero, as the IEEE multiplication does.
    if r == 0.0 {
        0.0f64.copysign(x)
    } else {
        r
    }
}

/// Rounds every value of a column with declared precision `p` in place.
pub fn round_column(values: &mut [f64], p: f64) {
    let q = quantum(p);
    for v in values {
        *v = round_to_quantum(*v, q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantum_is_largest_power_of_two_not_above() {
        assert_eq!(quantum(0.001), 1.0 / 1024.0);
        assert_eq!(quantum(1.0), 1.0);
        assert_eq!(quantum(0.75), 0.5);
        assert_eq!(quantum(3.0), 2.0);
    }

    #[test]
    fn ties_go_to_even() {
        let q = 0.5;
        assert_eq!(round_to_quantum(0.25, q), 0.0);
        assert_eq!(round_to_quantum(0.75, q), 1.0);
        assert_eq!(round_to_quantum(1.25, q), 1.0);
        assert_eq!(round_to_quantum(-0.75, q), -1.0);
        assert_eq!(round_to_quantum(-1.25, q), -1.0);
        assert_eq!(round_to_quantum(1.3, q), 1.5);
        assert!(round_to_quantum(-0.1, q).is_sign_negative());
    }

    #[test]
    fn bound_and_specials_untouched() {
        let q = 1.0 / 1024.0;
        let big = q * f64::powi(2.0, 52);
        assert_eq!(round_to_quantum(big + 1.0, q), big + 1.0);
        assert_eq!(round_to_quantum(big, q), big);
        assert!(round_to_quantum(f64::NAN, q).is_nan());
        assert_eq!(round_to_quantum(f64::INFINITY, q), f64::INFINITY);
        assert_eq!(round_to_quantum(f64::NEG_INFINITY, q), f64::NEG_INFINITY);
        // Just below the bound is rounded.
        let below = big - 0.3;
        assert_eq!(
            round_to_quantum(below, q),
            (below / q).round_ties_even() * q
        );
    }

    #[test]
    fn range_check() {
        assert!(precision_in_range(1e-3));
        assert!(!precision_in_range(0.0));
        assert!(!precision_in_range(-1.0));
        assert!(!precision_in_range(f64::NAN));
        assert!(!precision_in_range(f64::INFINITY));
        assert!(!precision_in_range(f64::powi(2.0, -1001)));
        assert!(precision_in_range(f64::powi(2.0, 1000)));
        assert!(!precision_in_range(f64::powi(2.0, 1001)));
    }
}
