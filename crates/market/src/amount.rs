//! Amounts and durations as an operator types them: `0.1ether`, `0.1eth`, `100gwei`,
//! `5000wei` or a bare number of ETH; `3600`, `90s`, `30m`, `12h`, `7d`.

use alloy::primitives::U256;
use alloy::primitives::utils::parse_units;

/// An amount or a duration that cannot be read (what was given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not an amount.
    #[error(
        "{0:?} is not an amount: a number of ETH (0.1), or with a unit: 0.1ether, 100gwei, 5000wei"
    )]
    Amount(String),
    /// Not a duration.
    #[error("{0:?} is not a duration: seconds (3600), or with a unit: 90s, 30m, 12h, 7d")]
    Duration(String),
}

/// An amount in wei: a number with the unit `ether`/`eth`, `gwei` or `wei`; a bare number
/// is ETH.
pub fn parse_amount(s: &str) -> Result<U256, ParseError> {
    let t = s.trim().to_ascii_lowercase();
    let err = || ParseError::Amount(s.to_string());
    let (num, unit) = if let Some(n) = t.strip_suffix("ether") {
        (n, "ether")
    } else if let Some(n) = t.strip_suffix("gwei") {
        (n, "gwei")
    } else if let Some(n) = t.strip_suffix("wei") {
        (n, "wei")
    } else if let Some(n) = t.strip_suffix("eth") {
        (n, "ether")
    } else {
        (t.as_str(), "ether")
    };
    let num = num.trim();
    if num.is_empty() || num.starts_with('-') || num.starts_with('+') {
        return Err(err());
    }
    // no fraction of a wei: at most 0, 9 or 18 decimals
    let decimals = num.split_once('.').map_or(0, |(_, f)| f.len());
    let allowed = match unit {
        "wei" => 0,
        "gwei" => 9,
        _ => 18,
    };
    if decimals > allowed {
        return Err(err());
    }
    parse_units(num, unit)
        .map(|v| v.get_absolute())
        .map_err(|_| err())
}

/// A duration in seconds: a number with the unit `s`, `m`, `h` or `d`; a bare number is
/// seconds.
pub fn parse_duration(s: &str) -> Result<u64, ParseError> {
    let t = s.trim().to_ascii_lowercase();
    let err = || ParseError::Duration(s.to_string());
    let (num, mult) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1),
        Some((i, 'm')) => (&t[..i], 60),
        Some((i, 'h')) => (&t[..i], 3600),
        Some((i, 'd')) => (&t[..i], 86_400),
        _ => (t.as_str(), 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| err())?;
    n.checked_mul(mult).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts() {
        let eth = U256::from(10u64).pow(U256::from(18));
        assert_eq!(parse_amount("1").unwrap(), eth);
        assert_eq!(parse_amount("0.5ether").unwrap(), eth / U256::from(2));
        assert_eq!(parse_amount("0.5 eth").unwrap(), eth / U256::from(2));
        assert_eq!(
            parse_amount("100gwei").unwrap(),
            U256::from(100_000_000_000u64)
        );
        assert_eq!(parse_amount("5000wei").unwrap(), U256::from(5000));
        for bad in ["", "-1", "eth", "1.5wei", "abc", "1 dollar"] {
            assert!(parse_amount(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("3600").unwrap(), 3600);
        assert_eq!(parse_duration("90s").unwrap(), 90);
        assert_eq!(parse_duration("30m").unwrap(), 1800);
        assert_eq!(parse_duration("7d").unwrap(), 604_800);
        for bad in ["", "d", "1.5h", "-1", "1w"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
