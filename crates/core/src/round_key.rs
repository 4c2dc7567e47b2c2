//! A round's identity: the market contract and the market's id in it ([`RoundKey`]),
//! and the one integer type of a market id ([`MarketId`]).
//!
//! The contract's `uint256` is the identity. The worker protocols carry the id as a JSON
//! number (a `u64`): [`MarketId::to_u64`] narrows it there, and only there.

use alloy_primitives::{Address, U256};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A market's id in its contract (the contract's `uint256`).
///
/// Serialized as the `U256` it wraps (a `0x` hex string, as transcripts and the API have
/// always written it); displayed in decimal; parsed from decimal or `0x` hex.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MarketId(U256);

/// A market id larger than the worker protocols' number (`u64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("market id {0} does not fit the worker protocol's number (u64)")]
pub struct MarketIdTooLarge(pub MarketId);

impl MarketId {
    /// The id `0`.
    pub const ZERO: MarketId = MarketId(U256::ZERO);

    /// The id as the contract's `uint256`.
    pub const fn get(self) -> U256 {
        self.0
    }

    /// The id as the worker protocols' number: the one place it is narrowed.
    pub fn to_u64(self) -> Result<u64, MarketIdTooLarge> {
        u64::try_from(self.0).map_err(|_| MarketIdTooLarge(self))
    }
}

impl fmt::Display for MarketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for MarketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl From<u64> for MarketId {
    fn from(id: u64) -> Self {
        MarketId(U256::from(id))
    }
}

impl From<U256> for MarketId {
    fn from(id: U256) -> Self {
        MarketId(id)
    }
}

impl From<MarketId> for U256 {
    fn from(id: MarketId) -> Self {
        id.0
    }
}

impl FromStr for MarketId {
    type Err = <U256 as FromStr>::Err;
    /// Decimal, or hex with a `0x` prefix (as [`U256`] parses).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        U256::from_str(s).map(MarketId)
    }
}

/// Serde for a [`MarketId`] field that the worker protocols carry as a JSON number:
/// `#[serde(with = "cresolver_core::round_key::as_number")]`. An id past `u64` does not
/// serialize ([`MarketIdTooLarge`]).
pub mod as_number {
    use super::MarketId;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the id as a JSON number.
    pub fn serialize<S: Serializer>(id: &MarketId, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(id.to_u64().map_err(serde::ser::Error::custom)?)
    }

    /// Reads the id from a JSON number.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MarketId, D::Error> {
        u64::deserialize(d).map(MarketId::from)
    }
}

/// A round's identity: the market contract and the market's id in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RoundKey {
    /// The market contract.
    pub market: Address,
    /// The market's id in that contract.
    pub id: MarketId,
}

impl RoundKey {
    /// The round of market `id` in contract `market`.
    pub fn new(market: Address, id: impl Into<MarketId>) -> Self {
        RoundKey {
            market,
            id: id.into(),
        }
    }
}

/// `market / id`, as the store's errors have always named a round.
impl fmt::Display for RoundKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} / {}", self.market, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_is_the_u256_hex_string() {
        let id = MarketId::from(255u64);
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"0xff\"");
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            serde_json::to_string(&U256::from(255u64)).unwrap()
        );
        assert_eq!(serde_json::from_str::<MarketId>("\"0xff\"").unwrap(), id);
        assert_eq!(serde_json::to_string(&MarketId::ZERO).unwrap(), "\"0x0\"");
    }

    #[test]
    fn as_number_is_a_json_number() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct W {
            #[serde(with = "as_number")]
            market_id: MarketId,
        }
        let w = W {
            market_id: MarketId::from(7u64),
        };
        assert_eq!(serde_json::to_string(&w).unwrap(), r#"{"market_id":7}"#);
        assert_eq!(serde_json::from_str::<W>(r#"{"market_id":7}"#).unwrap(), w);
        let big = W {
            market_id: MarketId::from(U256::MAX),
        };
        assert!(serde_json::to_string(&big).is_err());
    }

    #[test]
    fn display_and_parse_are_decimal_or_hex() {
        let id = MarketId::from(255u64);
        assert_eq!(id.to_string(), "255");
        assert_eq!(format!("{id:?}"), format!("{:?}", U256::from(255u64)));
        assert_eq!("255".parse::<MarketId>().unwrap(), id);
        assert_eq!("0xff".parse::<MarketId>().unwrap(), id);
        assert!("x".parse::<MarketId>().is_err());
    }

    #[test]
    fn narrowing_refuses_ids_past_u64() {
        assert_eq!(MarketId::from(u64::MAX).to_u64(), Ok(u64::MAX));
        let big = MarketId::from(U256::from(u64::MAX) + U256::from(1u64));
        let e = big.to_u64().unwrap_err();
        assert_eq!(e, MarketIdTooLarge(big));
        assert_eq!(
            e.to_string(),
            "market id 18446744073709551616 does not fit the worker protocol's number (u64)"
        );
    }

    #[test]
    fn a_round_shows_as_market_slash_id() {
        let k = RoundKey::new(Address::repeat_byte(0xaa), 7u64);
        assert_eq!(k.to_string(), format!("{} / 7", Address::repeat_byte(0xaa)));
    }
}
