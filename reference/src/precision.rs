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

/// Where a column with declared precision `p` holds values a writer would
/// not have stored: values `x` whose [`round_to_quantum`] is not `x` bit
/// for bit. Rows whose flag in `valid` is false are skipped (a null row is
/// unconstrained); `row_width` is the number of values per row. Returns how
/// many there are and the index of the first, `None` when every value is on
/// the grid. A reader never rounds these (frame.md, "Declared precision");
/// a validator reports them.
pub fn off_grid(
    values: &[f64],
    row_width: usize,
    valid: Option<&[bool]>,
    p: f64,
) -> Option<(usize, usize)> {
    let q = quantum(p);
    let mut found: Option<(usize, usize)> = None;
    for (i, &x) in values.iter().enumerate() {
        let row = i.checked_div(row_width).unwrap_or(0);
        if valid.is_some_and(|m| !m.get(row).copied().unwrap_or(true)) {
            continue;
        }
        if round_to_quantum(x, q).to_bits() != x.to_bits() {
            found = Some(found.map_or((1, i), |(n, first)| (n + 1, first)));
        }
    }
    found
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
    fn off_grid_counts_values_a_writer_would_not_store() {
        // p = 0.9: the quantum is 0.5, so 1.0 and 1.5 are on the grid, 1.2
        // and 0.7 are not (a nearest-power-of-two quantum, 1.0, would call
        // 1.5 off the grid instead).
        let values = [1.0, 1.2, 1.5, 0.7, f64::NAN, -0.0];
        assert_eq!(off_grid(&values, 1, None, 0.9), Some((2, 1)));
        // Null rows are unconstrained: with rows of two values, row 0
        // (1.0, 1.2) is null and only 0.7 is left.
        let mask = [false, true, true];
        assert_eq!(off_grid(&values, 2, Some(&mask), 0.9), Some((1, 3)));
        assert_eq!(off_grid(&[0.5, 2.0, f64::INFINITY], 1, None, 0.9), None);
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
