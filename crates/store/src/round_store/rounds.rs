//! The capabilities around a round itself: how it starts ([`Requests`]), how far the
//! watcher has read ([`Checkpoints`]), its state, progress and outcome as the engine
//! drives it ([`Rounds`]), and what operators see of all rounds ([`Overview`]).

use crate::RoundKey;
use crate::{
    LogRef, RequestDecision, RoundRecord, RoundSummary, Stage, StoreError, UpdatedBetween,
};
use alloy_primitives::B256;

/// How a round starts: the trigger logs the watcher reads (de-duplicated by transaction
/// hash and log index) and the manual requests of the API and the CLI. Used by the
/// pipeline's watch sink, the node's manual trigger and the CLI.
#[async_trait::async_trait]
pub trait Requests: Send + Sync {
    /// Records a trigger log and decides whether it starts a round. Idempotent. A done
    /// round is `AlreadyHandled` (the chain was not consulted).
    async fn record_request(
        &self,
        round: RoundKey,
        workflow: &str,
        log: &LogRef,
    ) -> Result<RequestDecision, StoreError> {
        self.record_request_judged(round, workflow, log, false)
            .await
    }
    /// [`Self::record_request`]; with `unresolved_on_chain` (the caller read the chain
    /// and the market is unresolved) a done round is served again, in the transaction
    /// that records the log: a `confirmed` one is reopened at the submission stage
    /// ([`RequestDecision::Resubmit`]), a `finalized` or `skipped` one gets a new
    /// attempt ([`RequestDecision::Renewed`]).
    async fn record_request_judged(
        &self,
        round: RoundKey,
        workflow: &str,
        log: &LogRef,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError>;
    /// Records a request that came without a log (HTTP trigger, CLI) and decides
    /// whether it starts a round. A done round is `AlreadyHandled`.
    async fn manual_request(
        &self,
        round: RoundKey,
        workflow: &str,
    ) -> Result<RequestDecision, StoreError> {
        self.manual_request_judged(round, workflow, false).await
    }
    /// Whether this exact log was recorded before (a rescan after a rewind meets it
    /// again).
    async fn log_seen(&self, log: &LogRef) -> Result<bool, StoreError>;
    /// [`Self::manual_request`] with the chain's word (see [`Self::record_request_judged`]).
    async fn manual_request_judged(
        &self,
        round: RoundKey,
        workflow: &str,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError>;
}

/// How far the watcher has read a chain: a block and its hash under a key, to resume
/// from after a restart and to notice a rewind. Used by the pipeline's watch sink and
/// by the node at start (the block it first acts from).
#[async_trait::async_trait]
pub trait Checkpoints: Send + Sync {
    /// The block number and hash stored under `key`, if any.
    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError>;
    /// Stores `block` and its `hash` under `key`, replacing what was there.
    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError>;
}

/// A round as the engine drives it: its record, its state, the progress of its current
/// attempt and its outcome. Used by the node's round driver, its DON rounds and its
/// resume of unfinished rounds at start. On PostgreSQL every write is fenced by the
/// round's lease.
#[async_trait::async_trait]
pub trait Rounds: Send + Sync {
    /// Moves a round to `state`, with an optional reason.
    async fn set_state(
        &self,
        round: RoundKey,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError>;
    /// Records what attempt `attempt` of a round has passed (`progress`) and moves the
    /// round to `state`, in one transaction.
    async fn save_progress(
        &self,
        round: RoundKey,
        attempt: u32,
        state: Stage,
        progress: &serde_json::Value,
    ) -> Result<(), StoreError>;
    /// What attempt `attempt` of a round recorded as passed (`None`: nothing, or only
    /// an earlier attempt's).
    async fn progress(
        &self,
        round: RoundKey,
        attempt: u32,
    ) -> Result<Option<serde_json::Value>, StoreError>;
    /// Records the block a round without a request log (a manual request) is judged at.
    async fn set_request_block(&self, round: RoundKey, block: u64) -> Result<(), StoreError>;
    /// Stores the round's outcome (its transcript) as JSON.
    async fn set_outcome(
        &self,
        round: RoundKey,
        outcome: &serde_json::Value,
    ) -> Result<(), StoreError>;
    /// [`Self::set_outcome`] and [`Self::set_state`] in one write: a round's last
    /// transcript and the state it ends in.
    async fn set_outcome_and_state(
        &self,
        round: RoundKey,
        outcome: &serde_json::Value,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError>;
    /// The round of a market, if there is one.
    async fn get(&self, round: RoundKey) -> Result<Option<RoundRecord>, StoreError>;
    /// The rounds that are not final (to resume after a restart).
    async fn unfinished(&self) -> Result<Vec<RoundRecord>, StoreError>;
}

/// What operators see of all rounds, and whether the store takes writes. Used by the
/// HTTP API (`GET /rounds`, `/metrics`, the readiness check), the status page and the
/// CLI's list of rounds.
#[async_trait::async_trait]
pub trait Overview: Send + Sync {
    /// A page of round summaries (no transcript), newest first; `before` is the cursor
    /// a previous page returned. Returns the page and the cursor of the next one.
    async fn list_summaries(
        &self,
        limit: usize,
        before: Option<i64>,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError> {
        self.list_summaries_updated(limit, before, UpdatedBetween::default())
            .await
    }
    /// [`Self::list_summaries`], keeping only the rounds last updated within `between`
    /// (filtered in the database: a page holds up to `limit` rounds that match, so a
    /// round updated recently is listed whatever its age).
    async fn list_summaries_updated(
        &self,
        limit: usize,
        before: Option<i64>,
        between: UpdatedBetween,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError>;
    /// How many rounds are in each state.
    async fn count_by_state(&self) -> Result<Vec<(Stage, u64)>, StoreError>;
    /// A write that changes nothing of note (the readiness probe): fails when the store
    /// cannot take writes.
    async fn probe_write(&self) -> Result<(), StoreError>;
}
