//! Replay: re-runs markets that were resolved (or not) and compares with what happened
//! on chain. Never sends a transaction.
//!
//! - **From a transcript** ([`replay_transcript`], deterministic, no network to workers
//!   or an LLM): the recorded answers and challenge responses go through the
//!   workflow's quorum rule, evaluator and tally. The rubric recomputes its scores; the
//!   LLM evaluator's recorded raw reply goes through the same parser (a recorded
//!   fallback goes through the workflow's fallback policy). With the recorded workflow
//!   the report bytes come out bit for bit as recorded; with another workflow
//!   ([`workflow_changes`]) every changed parameter is named.
//! - **Live** ([`replay_live`]): today's workers are asked again, with the market read at
//!   the request's block (historic `eth_call`).
//!
//! The chain side ([`onchain_outcome`]): `getMarket` says whether the market is resolved;
//! the `MarketResolved` log gives the transaction, whose calldata (`resolveMarket`, or a
//! forwarder `report`) gives the weights and scores that went on chain. Log scans
//! ([`scan_logs`]) are chunked and halve their range when the provider refuses one.
//!
//! A market *agrees* when the replay ends where the chain did: the same resolution with
//! the same weights and scores (when the submitted report is known), or no resolution
//! (quorum not met, round failed) for a market that is unresolved.

use crate::round::{Engine, RoundError, RoundOutcome};
use crate::transcript::{TallyRecord, Transcript};
use crate::workflow::{EvaluatorKind, Workflow};
use alloy::consensus::Transaction as _;
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{Filter, Log};
use alloy::sol_types::{SolCall, SolEvent};
use cresolver_chain::bindings::{ICREsolverMarket, IKeystoneForwarder};
use cresolver_chain::reader::{MarketSnapshot, read_market};
use cresolver_core::MarketId;
use cresolver_core::report::split_raw_report;
use cresolver_core::{Dimensions, decode_report};
use cresolver_evaluate::recorded::RecordedLlm;
use cresolver_evaluate::{Evaluation, Evaluator, RubricEvaluator};
use cresolver_workers::ChallengeOutcome;
use cresolver_workers::challenge::{challenges_for, votes};
use cresolver_workers::registry::ProtocolKind;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

mod chain;
mod compare;
mod offline;
mod output;
pub use chain::*;
pub use compare::*;
pub use offline::*;
pub use output::*;

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A chain call failed.
    #[error("RPC error: {0}")]
    Rpc(#[from] cresolver_chain::RpcFailure),
    /// The scan's range is empty.
    #[error("invalid block range: --from-block {from} is after --to-block {to}")]
    BadRange {
        /// The first block.
        from: u64,
        /// The last block.
        to: u64,
    },
    /// A live round could not be prepared.
    #[error(transparent)]
    Live(#[from] crate::live::LiveError),
}

// ─── Log scans ──────────────────────────────────────────────────────────────────────

/// `eth_getLogs` of `filter` over `from..=to` in chunks of at most `max_range` blocks,
/// halving the chunk when the provider says the range is too large.
/// `on_progress(last_block_done)` is called after each chunk.
pub async fn scan_logs(
    provider: &DynProvider,
    filter: &Filter,
    from: u64,
    to: u64,
    max_range: u64,
    on_progress: &mut (dyn FnMut(u64) + Send),
) -> Result<Vec<Log>, ReplayError> {
    if from > to {
        return Err(ReplayError::BadRange { from, to });
    }
    let mut scanner = cresolver_chain::scan::LogScanner::new(max_range);
    let mut out = Vec::new();
    let mut start = from;
    while start <= to {
        let (end, logs) = scanner
            .next_chunk(provider, filter, start, to)
            .await
            .map_err(ReplayError::Rpc)?;
        out.extend(logs);
        on_progress(end);
        if end == u64::MAX {
            break;
        }
        start = end + 1;
    }
    Ok(out)
}

/// A `ResolutionRequested` log: the first request of a market in a scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestRef {
    /// The market's id.
    pub market_id: MarketId,
    /// The log's block.
    pub block: u64,
    /// The log's transaction.
    pub tx: Option<B256>,
}

/// The first `ResolutionRequested` of every market in `from..=to`, in chain order.
pub async fn scan_requests(
    provider: &DynProvider,
    market: Address,
    market_id: Option<MarketId>,
    from: u64,
    to: u64,
    max_range: u64,
    on_progress: &mut (dyn FnMut(u64) + Send),
) -> Result<Vec<RequestRef>, ReplayError> {
    let mut filter = Filter::new()
        .address(market)
        .event_signature(ICREsolverMarket::ResolutionRequested::SIGNATURE_HASH);
    if let Some(id) = market_id {
        filter = filter.topic1(B256::from(id.get()));
    }
    let logs = scan_logs(provider, &filter, from, to, max_range, on_progress).await?;
    let mut out: Vec<RequestRef> = Vec::new();
    for log in logs {
        let Ok(ev) = ICREsolverMarket::ResolutionRequested::decode_log(&log.inner) else {
            tracing::warn!(tx = ?log.transaction_hash, "undecodable ResolutionRequested log: skipped");
            continue;
        };
        let Some(block) = log.block_number else {
            continue;
        };
        if out.iter().all(|r| r.market_id.get() != ev.data.marketId) {
            out.push(RequestRef {
                market_id: ev.data.marketId.into(),
                block,
                tx: log.transaction_hash,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
