//! The JSON the status page reads, as types: what `GET /status/rounds`,
//! `GET /status/rounds/{market_id}`, `GET /events` and `GET /status/don` answer, and
//! what the OpenAPI description (`GET /openapi.json`) says of them.

use alloy::primitives::{Address, B256};
use cresolver_store::{NonceState, Stage};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// A round as the status page shows it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RoundView {
    /// The market contract.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub market: Address,
    /// The market id, in decimal.
    #[schema(pattern = "^[0-9]+$")]
    pub market_id: String,
    /// Where the round is.
    pub state: Stage,
    /// The round's attempt (1 for the market's first).
    pub attempt: u32,
    /// Why the round is in its state, cut to 512 bytes.
    #[schema(required = true)]
    pub reason: Option<String>,
    /// The transaction of the request log (`null`: a manual request).
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub request_tx: Option<B256>,
    /// The block the round is judged at.
    #[schema(required = true)]
    pub request_block: Option<u64>,
    /// The node that holds the round's lease, while it is unfinished.
    #[schema(required = true)]
    pub holder: Option<String>,
    /// When the round last changed, in unix seconds.
    pub updated_at: u64,
    /// The resolve stage's quorum, once the workers answered.
    #[schema(required = true)]
    pub quorum: Option<QuorumView>,
    /// Each worker of the resolve stage.
    pub workers: Vec<WorkerView>,
    /// The tallied resolution (`true`: YES), once evaluated.
    #[schema(required = true)]
    pub resolution: Option<bool>,
    /// What the market was resolved to and the weight behind it, or why there is none.
    pub outcome: OutcomeView,
    /// Each nonce reserved for the round's transaction.
    pub transactions: Vec<TxView>,
    /// How the submission ended.
    #[schema(required = true)]
    pub confirmation: Option<ConfirmationView>,
    /// A DON member's agreement on the round.
    #[schema(required = true)]
    pub don: Option<DonRoundView>,
    /// What the finality watch saw.
    #[schema(required = true)]
    pub finality: Option<FinalityView>,
    /// The node that claimed the round last (a cluster; list views only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driven_by: Option<String>,
    /// The market's question (one round's view only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The round's whole transcript (one round's view only, once discovered).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub transcript: Option<Value>,
}

/// The resolve stage's quorum.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct QuorumView {
    /// Whether enough workers answered.
    pub met: bool,
    /// Valid answers.
    pub valid: usize,
    /// Answers required.
    pub required: usize,
    /// Workers registered on the market.
    pub registered: usize,
}

/// One worker of the resolve stage.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct WorkerView {
    /// The worker's address.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub address: Address,
    /// `YES`, `NO` or `abstain`; `null` when it failed.
    #[schema(required = true, value_type = Option<String>, pattern = "^(YES|NO|abstain)$")]
    pub answer: Option<&'static str>,
    /// Its confidence (0 to 1).
    #[schema(required = true)]
    pub confidence: Option<f64>,
    /// Its three on-chain scores (resolution quality, source quality, analysis depth),
    /// once evaluated.
    #[schema(required = true, value_type = Option<Vec<u8>>, min_items = 3, max_items = 3)]
    pub scores: Option<[u8; 3]>,
    /// Its vote weight in the tally.
    #[schema(required = true)]
    pub weight: Option<u64>,
    /// What the market pays it, in wei (decimal).
    #[schema(required = true, pattern = "^[0-9]+$")]
    pub payout_wei: Option<String>,
    /// What the market pays it, in ether.
    #[schema(required = true)]
    pub payout_eth: Option<String>,
    /// Why it gave no answer.
    #[schema(required = true)]
    pub failure: Option<String>,
    /// Its evidence, cut to 16 KiB (one round's view only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// Its sources, at most 50 (one round's view only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<String>>,
}

/// What the market was resolved to by the round, or why there is none: with a
/// `resolution`, the weights; without, `none` says why.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct OutcomeView {
    /// `YES` or `NO`; `null` when there is none.
    #[schema(required = true, value_type = Option<String>, pattern = "^(YES|NO)$")]
    pub resolution: Option<&'static str>,
    /// The transaction is not confirmed yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<bool>,
    /// The winning side's weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// The weight behind YES.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub yes_weight: Option<f64>,
    /// The weight behind NO.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_weight: Option<f64>,
    /// The weights tied (the workflow's tie rule decided).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tie: Option<bool>,
    /// Why there is no resolution (`quorum not met`, the reason, `not yet (<state>)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub none: Option<String>,
}

/// One nonce reserved for the round's transaction.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TxView {
    /// The nonce.
    pub nonce: u64,
    /// Where it is.
    pub state: NonceState,
    /// How many attempts were signed at it.
    pub attempts: usize,
    /// The attempts' transaction hashes.
    #[schema(value_type = Vec<String>)]
    pub hashes: Vec<B256>,
    /// The attempt that was mined.
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub mined_tx: Option<B256>,
    /// The block it was mined in.
    #[schema(required = true)]
    pub mined_block: Option<u64>,
}

/// How the round's submission ended.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ConfirmationView {
    /// `confirmed`, `failed` or `skipped`.
    pub status: cresolver_pipeline::transcript::ConfirmationStatus,
    /// The transaction.
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub tx_hash: Option<B256>,
    /// The block it was mined in.
    #[schema(required = true)]
    pub block_number: Option<u64>,
}

/// A DON round at a glance.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DonRoundView {
    /// How many members the DON has.
    pub members: usize,
    /// The observers whose observations made the set.
    #[schema(value_type = Vec<String>)]
    pub set: Vec<Address>,
    /// The members whose observations are not in the set.
    #[schema(value_type = Vec<String>)]
    pub missing: Vec<Address>,
    /// The leader that proposed the set.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub leader: Address,
    /// The consensus round that decided the set (kept for older readers).
    pub attempt: u32,
    /// The consensus round that decided the set.
    pub round: u32,
    /// The members whose precommits decided the set (its commit certificate).
    #[schema(value_type = Vec<String>)]
    pub precommits: Vec<Address>,
    /// The f+1 signers of the agreed report.
    #[schema(value_type = Vec<String>)]
    pub signers: Vec<Address>,
    /// The member whose transmission delivered the report.
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub transmitter: Option<Address>,
}

/// What the finality watch saw after `confirmed`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct FinalityView {
    /// `final` or `reorged`.
    pub status: String,
    /// The finalized block that covered the transaction's block.
    #[schema(required = true)]
    pub finalized_block: Option<u64>,
    /// Where finality came from (the chain's `finalized` tag or the configured depth).
    #[schema(required = true)]
    pub source: Option<String>,
    /// Reorgs seen.
    pub reorgs: usize,
}

/// A page of round views, with the chain as the node sees it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RoundsPage {
    /// The rounds, newest first (20 a page).
    pub rounds: Vec<RoundView>,
    /// The cursor of the next page, when there is one.
    #[schema(required = true)]
    pub next: Option<i64>,
    /// The chain id the node serves.
    #[schema(required = true)]
    pub chain_id: Option<u64>,
    /// The newest head any endpoint reported.
    #[schema(required = true)]
    pub head: Option<u64>,
    /// The watcher's lag, in blocks.
    #[schema(required = true)]
    pub lag_blocks: Option<u64>,
    /// `ok`, `degraded` or `down` (`null`: no chain attached).
    #[schema(required = true, value_type = Option<String>, pattern = "^(ok|degraded|down)$")]
    pub status: Option<&'static str>,
}

/// A DON member's consensus, as `GET /status/don` shows it on a member.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DonStatus {
    /// This member's address.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub member: Address,
    /// Every member, in configuration order.
    #[schema(value_type = Vec<String>)]
    pub members: Vec<Address>,
    /// The Byzantine members tolerated.
    pub f: u8,
    /// Votes that decide (2f+1 when n = 3f+1).
    pub quorum: usize,
    /// The executions in consensus now (an agreed one moves to `decided`).
    pub executions: Vec<cresolver_don::InstanceStatus>,
    /// The executions decided lately, newest first (at most 32).
    pub decided: Vec<cresolver_don::DecidedExecution>,
    /// How many books (inboxes of peers' messages) are open.
    pub books: usize,
    /// The bytes waiting in them.
    pub book_bytes: usize,
}
