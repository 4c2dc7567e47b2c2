//! JavaScript-compatible numeric helpers, so results are bit-exact with the reference
//! TypeScript workflow (which computes in f64 and rounds with `Math.round`).

/// `Math.round` semantics: round to the nearest integer, halves toward +∞.
///
/// `x - x.floor()` is exact for every finite f64, so the comparison with 0.5 decides
/// halves exactly (unlike the naive `(x + 0.5).floor()`, which misrounds
/// 0.49999999999999994).
pub fn js_round(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let f = x.floor();
    if x - f >= 0.5 { f + 1.0 } else { f }
}

#[cfg(test)]
mod tests {
    use super::js_round;

    #[test]
    fn matches_math_round() {
        assert_eq!(js_round(0.5), 1.0);
        assert_eq!(js_round(1.5), 2.0);
        assert_eq!(js_round(2.5), 3.0);
        assert_eq!(js_round(-0.5), 0.0);
        assert_eq!(js_round(-1.5), -1.0);
        assert_eq!(js_round(-2.6), -3.0);
        assert_eq!(js_round(0.49999999999999994), 0.0);
        assert_eq!(js_round(70.0), 70.0);
        assert_eq!(js_round(66.66666666666667), 67.0);
        assert_eq!(js_round(4503599627370495.5), 4503599627370496.0);
    }
}
