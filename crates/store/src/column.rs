//! How typed values sit in the stores' columns, for both backends: newtypes over
//! [`Address`], [`U256`], [`B256`], fees (`u128`) and JSON, and the [`Stage`] and
//! [`NonceState`] enums, each with `rusqlite` and `tokio_postgres` `ToSql`/`FromSql`.
//! Every one is stored as text, exactly as the stores always wrote it (an address in
//! its checksummed form, a number in decimal, a hash as `0x` hex, JSON as its text), so
//! existing databases read as before; a value that does not parse is an error naming
//! what it should have been, never a panic.

use crate::{NonceState, Stage};
use alloy_primitives::{Address, B256, U256};
use rusqlite::types::{FromSql as SqliteFrom, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use std::error::Error;
use std::fmt::Display;
use tokio_postgres::types::{FromSql as PgFrom, IsNull, ToSql as PgTo, Type, to_sql_checked};

/// An address column (a market, a contract, a signer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Addr(pub Address);

/// A 256-bit number column (a market id), in decimal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Num(pub U256);

impl From<cresolver_core::MarketId> for Num {
    fn from(id: cresolver_core::MarketId) -> Self {
        Num(id.get())
    }
}

impl From<Num> for cresolver_core::MarketId {
    fn from(n: Num) -> Self {
        n.0.into()
    }
}

/// A hash column (a transaction, a block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hash(pub B256);

/// A fee column (wei per gas), in decimal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wei(pub u128);

/// A JSON column (a transcript, a round's progress), as its text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Json(pub serde_json::Value);

/// A value stored as its text: how it is written, and how that text is read back.
trait Text: Sized {
    /// What the column holds, for errors.
    const WHAT: &'static str;
    /// The stored text.
    fn text(&self) -> String;
    /// The value of stored text.
    fn parse(s: &str) -> Result<Self, String>;
}

fn why(what: &str, s: &str, e: impl Display) -> String {
    format!("{what} {s:?}: {e}")
}

impl Text for Addr {
    const WHAT: &'static str = "address";
    fn text(&self) -> String {
        self.0.to_string()
    }
    fn parse(s: &str) -> Result<Self, String> {
        s.parse().map(Addr).map_err(|e| why(Self::WHAT, s, e))
    }
}

impl Text for Num {
    const WHAT: &'static str = "number";
    fn text(&self) -> String {
        self.0.to_string()
    }
    fn parse(s: &str) -> Result<Self, String> {
        s.parse().map(Num).map_err(|e| why(Self::WHAT, s, e))
    }
}

impl Text for Hash {
    const WHAT: &'static str = "hash";
    fn text(&self) -> String {
        self.0.to_string()
    }
    fn parse(s: &str) -> Result<Self, String> {
        s.parse().map(Hash).map_err(|e| why(Self::WHAT, s, e))
    }
}

impl Text for Wei {
    const WHAT: &'static str = "fee";
    fn text(&self) -> String {
        self.0.to_string()
    }
    fn parse(s: &str) -> Result<Self, String> {
        s.parse().map(Wei).map_err(|e| why(Self::WHAT, s, e))
    }
}

impl Text for Json {
    const WHAT: &'static str = "JSON";
    fn text(&self) -> String {
        self.0.to_string()
    }
    fn parse(s: &str) -> Result<Self, String> {
        serde_json::from_str(s)
            .map(Json)
            .map_err(|e| format!("{}: {e}", Self::WHAT))
    }
}

impl Text for Stage {
    const WHAT: &'static str = "round state";
    fn text(&self) -> String {
        self.as_str().to_string()
    }
    fn parse(s: &str) -> Result<Self, String> {
        Stage::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown {} {s:?}", Self::WHAT))
    }
}

impl Text for NonceState {
    const WHAT: &'static str = "nonce state";
    fn text(&self) -> String {
        self.as_str().to_string()
    }
    fn parse(s: &str) -> Result<Self, String> {
        NonceState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown {} {s:?}", Self::WHAT))
    }
}

/// `rusqlite` and `tokio_postgres` `ToSql`/`FromSql` for each [`Text`] type.
macro_rules! text_columns {
    ($($t:ty),*) => {$(
        impl rusqlite::ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.text()))
            }
        }

        impl SqliteFrom for $t {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                <$t as Text>::parse(value.as_str()?).map_err(|e| FromSqlError::Other(e.into()))
            }
        }

        impl PgTo for $t {
            fn to_sql(
                &self,
                ty: &Type,
                out: &mut tokio_postgres::types::private::BytesMut,
            ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
                self.text().as_str().to_sql(ty, out)
            }
            fn accepts(ty: &Type) -> bool {
                <&str as PgTo>::accepts(ty)
            }
            to_sql_checked!();
        }

        impl<'a> PgFrom<'a> for $t {
            fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
                Ok(<$t as Text>::parse(<&str as PgFrom>::from_sql(ty, raw)?)?)
            }
            fn accepts(ty: &Type) -> bool {
                <&str as PgFrom>::accepts(ty)
            }
        }
    )*};
}

text_columns!(Addr, Num, Hash, Wei, Json, Stage, NonceState);

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    /// The text each type is stored as, unchanged: what existing databases hold.
    #[test]
    fn values_are_stored_as_the_stores_always_wrote_them() {
        let c = Connection::open_in_memory().unwrap();
        let text = |v: &dyn rusqlite::ToSql| -> String {
            c.query_row("SELECT ?1", [v], |r| r.get(0)).unwrap()
        };
        let a = Address::repeat_byte(0xab);
        assert_eq!(text(&Addr(a)), a.to_string());
        assert_eq!(text(&Num(U256::from(1234u64))), "1234");
        assert_eq!(
            text(&Hash(B256::repeat_byte(1))),
            B256::repeat_byte(1).to_string()
        );
        assert_eq!(text(&Wei(u128::MAX)), u128::MAX.to_string());
        assert_eq!(text(&Json(serde_json::json!({"a": [1]}))), r#"{"a":[1]}"#);
        assert_eq!(text(&Stage::Confirmed), "confirmed");
        assert_eq!(text(&NonceState::Lost), "lost");
        let back: (Addr, Num, Stage) = c
            .query_row(
                "SELECT ?1, ?2, ?3",
                rusqlite::params![Addr(a), Num(U256::MAX), Stage::Failed],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(back, (Addr(a), Num(U256::MAX), Stage::Failed));
    }

    #[test]
    fn a_value_that_does_not_parse_is_an_error() {
        let c = Connection::open_in_memory().unwrap();
        let bad = c.query_row("SELECT 'sideways'", [], |r| r.get::<_, Stage>(0));
        assert!(bad.unwrap_err().to_string().contains("unknown round state"));
        let bad = c.query_row("SELECT '0x12'", [], |r| r.get::<_, Addr>(0));
        assert!(bad.is_err());
        let bad = c.query_row("SELECT 'x'", [], |r| r.get::<_, Num>(0));
        assert!(bad.is_err());
    }
}
