//! The `[submit]` section: where resolutions go (the forwarder and receiver of `report`
//! mode) and how the transaction manager prices, replaces and follows their transactions.

use super::duration;
use alloy::primitives::Address;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use validator::{Validate, ValidationError};

/// Where resolutions go (the forwarder and receiver of `report` mode) and how the
/// transaction manager prices, replaces and follows their transactions.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields, default)]
#[schemars(transform = duration::legacy_keys)]
pub struct SubmitTargets {
    /// Forwarder for `report` mode.
    #[schemars(with = "Option<cresolver_core::schema::HexAddress>")]
    pub forwarder: Option<Address>,
    /// Receiver for `report` mode.
    #[schemars(with = "Option<cresolver_core::schema::HexAddress>")]
    pub receiver: Option<Address>,
    /// Added to the gas estimate, in percent.
    pub gas_margin_percent: u64,
    /// Ignored since the transaction manager follows every attempt until it is mined;
    /// kept so that older configs still load.
    pub max_send_attempts: u32,
    /// How long a round follows its transaction before it yields and is retried later
    /// (`"2m"`; the nonce stays reserved and is followed again).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]
    pub receipt_timeout: Duration,
    /// Replace a transaction that is not mined after this many blocks.
    pub bump_after_blocks: u64,
    /// Raise both EIP-1559 fees by at least this much for a replacement (geth needs 10).
    // a custom check, not `range`: schemars would put the bound into the schema, and
    // the loader's schema check would refuse the value before this message says why
    #[validate(custom(function = "replaceable_bump"))]
    pub fee_bump_percent: u64,
    /// Never sign a max fee per gas above this, in gwei.
    #[validate(custom(function = "positive_gwei"))]
    pub max_fee_per_gas_gwei: f64,
}

impl Default for SubmitTargets {
    fn default() -> Self {
        Self {
            forwarder: None,
            receiver: None,
            gas_margin_percent: 25,
            max_send_attempts: 3,
            receipt_timeout: Duration::from_secs(120),
            bump_after_blocks: 3,
            fee_bump_percent: 20,
            max_fee_per_gas_gwei: 500.0,
        }
    }
}

/// A fee bump nodes accept for a replacement: at least 10 %.
fn replaceable_bump(v: u64) -> Result<(), ValidationError> {
    if v >= 10 {
        Ok(())
    } else {
        Err(ValidationError::new("range")
            .with_message("must be at least 10 (nodes refuse smaller replacements)".into()))
    }
}

/// A fee cap: a finite, positive number of gwei.
fn positive_gwei(v: f64) -> Result<(), ValidationError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ValidationError::new("range").with_message("must be a positive number of gwei".into()))
    }
}
