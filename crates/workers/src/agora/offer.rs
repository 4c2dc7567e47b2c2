//! Whether an OFFER can be accepted: its price within the node's budget, in USD, and
//! still valid. A refused offer is skipped (and named in the notes or the failure), not
//! answered: another may follow.

use super::envelope::{clip, parse_ts};
use serde_json::Value;

/// Why an offer is skipped. The `Display` text is what the answer's notes and the
/// `NO_ACCEPTABLE_OFFER` failure record (`offer <id>: <text>`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OfferSkip {
    /// `price.amount` is there but not a number; holds the JSON type it has.
    #[error("`price.amount` must be a number, got {0}")]
    AmountType(&'static str),
    /// `price.amount` is missing.
    #[error("`price.amount` is missing")]
    AmountMissing,
    /// `price.amount` is negative, or not a finite number.
    #[error("`price.amount` = {0} is not a valid price")]
    InvalidAmount(f64),
    /// `price.currency` is given and is not USD; holds it as JSON text (clipped).
    #[error("currency {0} is not USD")]
    Currency(String),
    /// The price is above the node's budget.
    #[error("price {amount} USD exceeds the budget of {max} USD")]
    OverBudget {
        /// The offer's price (USD).
        amount: f64,
        /// The node's budget per request (USD).
        max: f64,
    },
    /// `valid_until` has passed; holds it (clipped).
    #[error("expired at {0}")]
    Expired(String),
    /// `valid_until` is a string but not an RFC 3339 timestamp.
    #[error("`valid_until` is not an RFC 3339 timestamp")]
    ValidUntilFormat,
    /// `valid_until` is neither a string nor null; holds the JSON type it has.
    #[error("`valid_until` must be a string, got {0}")]
    ValidUntilType(&'static str),
}

/// The price of the OFFER payload `p` if it can be accepted within the budget `max`
/// (USD) at `now` (Unix ms), else why it is skipped.
pub(crate) fn check(p: &Value, max: f64, now: i64) -> Result<f64, OfferSkip> {
    let amount = match p.pointer("/price/amount") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(v) => return Err(OfferSkip::AmountType(crate::protocol::type_name(v))),
        None => return Err(OfferSkip::AmountMissing),
    };
    if !amount.is_finite() || amount < 0.0 {
        return Err(OfferSkip::InvalidAmount(amount));
    }
    match p.pointer("/price/currency") {
        None => {}
        Some(Value::String(c)) if c.eq_ignore_ascii_case("USD") => {}
        Some(c) => return Err(OfferSkip::Currency(clip(&c.to_string(), 16))),
    }
    if amount > max {
        return Err(OfferSkip::OverBudget { amount, max });
    }
    match p.get("valid_until") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => match parse_ts(s) {
            Some(until) if until > now => {}
            Some(_) => return Err(OfferSkip::Expired(clip(s, 40))),
            None => return Err(OfferSkip::ValidUntilFormat),
        },
        Some(v) => return Err(OfferSkip::ValidUntilType(crate::protocol::type_name(v))),
    }
    Ok(amount)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn offers_are_checked_and_skips_named() {
        let now = parse_ts("2025-01-01T00:00:00Z").unwrap();
        let ok = json!({"price": {"amount": 0.5, "currency": "usd"},
            "valid_until": "2025-01-01T00:01:00Z"});
        assert_eq!(check(&ok, 1.0, now), Ok(0.5));
        assert_eq!(check(&json!({"price": {"amount": 0}}), 0.0, now), Ok(0.0));
        let cases = [
            (
                json!({"price": {"amount": "1"}}),
                "`price.amount` must be a number, got a string",
            ),
            (json!({}), "`price.amount` is missing"),
            (
                json!({"price": {"amount": -1}}),
                "`price.amount` = -1 is not a valid price",
            ),
            (
                json!({"price": {"amount": 0, "currency": "EUR"}}),
                "currency \"EUR\" is not USD",
            ),
            (
                json!({"price": {"amount": 2.5}}),
                "price 2.5 USD exceeds the budget of 1 USD",
            ),
            (
                json!({"price": {"amount": 0}, "valid_until": "2024-12-31T23:59:59Z"}),
                "expired at 2024-12-31T23:59:59Z",
            ),
            (
                json!({"price": {"amount": 0}, "valid_until": "soon"}),
                "`valid_until` is not an RFC 3339 timestamp",
            ),
            (
                json!({"price": {"amount": 0}, "valid_until": 5}),
                "`valid_until` must be a string, got a number",
            ),
        ];
        for (payload, text) in cases {
            assert_eq!(check(&payload, 1.0, now).unwrap_err().to_string(), text);
        }
        assert_eq!(
            check(&json!({"price": {"amount": 2}}), 1.0, now),
            Err(OfferSkip::OverBudget {
                amount: 2.0,
                max: 1.0
            })
        );
    }
}
