//! The stage a round is at: one vocabulary for the store's state column, the engine's
//! persisted progress, the HTTP API, the status page and the metrics' `stage` labels.

use crate::StoreError;
use serde::Serialize;
use std::str::FromStr;

/// Where a round is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// A request is recorded; nothing of the round has run yet.
    Requested,
    /// The market was read and its workers discovered.
    Discovered,
    /// The resolve stage met its quorum (the answers are persisted).
    Answered,
    /// Every responder was challenged (the defences are persisted).
    Challenged,
    /// The responders were scored (and, where the workflow asks, the outcome ratified).
    Evaluated,
    /// A nonce is reserved for the round's transaction (see [`crate::NonceRecord`]): its attempts may or
    /// may not have been broadcast or mined; it is not yet `confirmations` deep.
    Submitted,
    /// Our transaction resolved the market and is `confirmations` deep; the finality
    /// watch follows it until its block is final (a reorg before then reopens the round
    /// at `submitted`).
    Confirmed,
    /// Our transaction's block is final (the chain's `finalized` block, or
    /// `finality_depth` deep): nothing more happens.
    Finalized,
    /// The round ended without resolving the market; `reason` says why.
    Failed,
    /// Nothing to do: the market was already resolved by someone else.
    Skipped,
}

impl Stage {
    /// The stage as stored, shown and labelled (lowercase).
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Requested => "requested",
            Stage::Discovered => "discovered",
            Stage::Answered => "answered",
            Stage::Challenged => "challenged",
            Stage::Evaluated => "evaluated",
            Stage::Submitted => "submitted",
            Stage::Confirmed => "confirmed",
            Stage::Finalized => "finalized",
            Stage::Failed => "failed",
            Stage::Skipped => "skipped",
        }
    }

    /// States where the round's drive is over: nothing more happens unless a new request
    /// reopens the round, or (for `confirmed`) the finality watch sees its transaction
    /// reorged away.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Stage::Confirmed | Stage::Finalized | Stage::Failed | Stage::Skipped
        )
    }

    /// Our transaction resolved the market and is deep enough: `confirmed`, or
    /// `finalized` once its block is final.
    pub fn is_confirmed(self) -> bool {
        matches!(self, Stage::Confirmed | Stage::Finalized)
    }

    /// Done states where the market was (or was found) resolved: a new request is served
    /// only when the chain says the market is unresolved.
    pub fn is_resolved(self) -> bool {
        matches!(self, Stage::Confirmed | Stage::Finalized | Stage::Skipped)
    }

    /// Every stage, in the order a round passes them (then the two endings).
    pub const ALL: [Stage; 10] = [
        Stage::Requested,
        Stage::Discovered,
        Stage::Answered,
        Stage::Challenged,
        Stage::Evaluated,
        Stage::Submitted,
        Stage::Confirmed,
        Stage::Finalized,
        Stage::Failed,
        Stage::Skipped,
    ];
}

impl FromStr for Stage {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        Stage::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown round state {s:?}")))
    }
}

/// The states where a round's drive is over ([`Stage::is_final`]), as SQL (both
/// backends).
pub(crate) const DONE_SQL: &str = "('confirmed', 'finalized', 'failed', 'skipped')";
