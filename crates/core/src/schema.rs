//! JSON Schema stand-ins for the chain's fixed-size hex types, which the configuration
//! files spell as strings: `#[schemars(with = "HexAddress")]` on an `Address` field; and
//! the schema of durations written as text ([`duration`]).

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use std::borrow::Cow;

pub mod duration;

/// The pattern of an address: `0x` and 40 hex digits.
pub const ADDRESS_PATTERN: &str = "^0x[0-9a-fA-F]{40}$";

/// The pattern of a 32-byte value: `0x` and 64 hex digits.
pub const B256_PATTERN: &str = "^0x[0-9a-fA-F]{64}$";

/// The schema of an Ethereum address written as text (`0x` and 40 hex digits).
pub struct HexAddress;

impl JsonSchema for HexAddress {
    fn schema_name() -> Cow<'static, str> {
        "Address".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": ADDRESS_PATTERN,
        })
    }
}

/// The schema of a 32-byte value written as text (`0x` and 64 hex digits).
pub struct HexB256;

impl JsonSchema for HexB256 {
    fn schema_name() -> Cow<'static, str> {
        "B256".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": B256_PATTERN,
        })
    }
}
