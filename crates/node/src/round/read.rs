//! The `read` and `discover` steps: the market as it was at the request block (nobody
//! is asked about a market already resolved at the head), then each worker's endpoint
//! from the identity registry. Discovery starts the round's transcript.

use super::{Carried, Ending, Next, Round, StepError, Steps, step};
use alloy::providers::Provider;
use cresolver_chain::reader::{MarketSnapshot, ReadError, read_market, resolved_at_head};
use cresolver_metrics::TimedStage;
use cresolver_pipeline::live::{LiveContext, LiveError, collect_input};
use cresolver_pipeline::transcript::{RequestRecord, TRANSCRIPT_VERSION, Transcript};
use cresolver_store::RoundKey;
use cresolver_store::Stage;
use std::time::Instant;
use tracing::Instrument;

/// The market as read for the round.
pub(crate) struct Read {
    /// The block the round is judged at (the request's).
    pub block: u64,
    /// The market's terms and workers (read at `block`, or at the head where the
    /// endpoint pruned that block's state).
    pub snapshot: MarketSnapshot,
    /// When the read began (the `discover` stage metric covers read and discovery).
    pub started: Instant,
}

/// A chain read's error as a step: the RPC's is retried, any other fails the round.
fn read_step(context: &'static str, e: ReadError) -> StepError {
    match e {
        e @ ReadError::Rpc(_) => StepError::retry_from(context, e),
        e => StepError::fail_with(e),
    }
}

impl Steps<'_> {
    /// Reads the market at the request block together with its state at the head (one
    /// round trip).
    pub(super) async fn read(&self, round: &mut Round<'_>) -> Result<Next, StepError> {
        let (market, market_id) = (round.market(), round.market_id);
        let started = Instant::now();
        let block = self.judging_block(round).await?;
        let multicall = self.multicall;
        let (at_head, read) = async {
            tokio::join!(
                resolved_at_head(self.provider, RoundKey::new(market, market_id)),
                read_market(
                    self.provider,
                    RoundKey::new(market, market_id),
                    Some(block),
                    multicall
                ),
            )
        }
        .instrument(step("read", market_id))
        .await;
        if at_head.map_err(|e| read_step("reading the market", e))? {
            return Ok(Ending::skipped("the market is already resolved on chain"));
        }
        let read = match read {
            // A full (non-archive) endpoint has pruned the state of an old block: the
            // market's terms and workers are read at the head instead (they do not change
            // after the request); the round is still judged at the request block's time.
            Err(ReadError::Rpc(e)) if e.is_pruned_state() => {
                tracing::warn!(market_id = %market_id, block, error = %e, "the endpoint has no state at the request block (pruned): reading the market at the head");
                read_market(
                    self.provider,
                    RoundKey::new(market, market_id),
                    None,
                    multicall,
                )
                .await
            }
            other => other,
        };
        let snapshot = read.map_err(|e| read_step("reading the market at the request block", e))?;
        Ok(Next::Discover(Box::new(Read {
            block,
            snapshot,
            started,
        })))
    }

    /// The round's one judging point: the request's block. A manual request has no
    /// request log; it is judged at the head block of its first run, which is kept for
    /// every resume (the transcript of that first run records no request block).
    async fn judging_block(&self, round: &Round<'_>) -> Result<u64, StepError> {
        if let Some(b) = round.rec.request_block {
            return Ok(b);
        }
        let head = self
            .provider
            .get_block_number()
            .await
            .map_err(|e| StepError::retry_from("eth_blockNumber", e))?;
        self.store.set_request_block(round.key(), head).await?;
        tracing::info!(market_id = %round.market_id, block = head, "manual request: judged at this block from now on");
        Ok(head)
    }

    /// Finds every worker's endpoint, starts the transcript and persists `discovered`.
    pub(super) async fn discover(
        &self,
        round: &mut Round<'_>,
        read: Read,
    ) -> Result<Next, StepError> {
        let (market, market_id) = (round.market(), round.market_id);
        let Read {
            block,
            snapshot,
            started,
        } = read;
        let ctx = LiveContext {
            provider: self.provider,
            multicall: self.multicall,
            discovery: self.discovery,
            http: self.http,
        };
        let (found, mut input) = collect_input(&ctx, &snapshot)
            .instrument(step("discover", market_id))
            .await
            .map_err(|e| match e {
                e @ LiveError::Rpc(_) => StepError::retry_with(e),
                e => StepError::fail_with(e),
            })?;
        if snapshot.block != block {
            // read at the head (pruned state): still judged at the request block's time
            input.reference_time = cresolver_pipeline::live::block_time(self.provider, Some(block))
                .await
                .map_err(StepError::retry_with)?;
        }
        self.metrics
            .observe_stage(TimedStage::Discover, started.elapsed().as_secs_f64());
        if round.stage == Stage::Requested {
            self.store
                .set_state(RoundKey::new(market, market_id), Stage::Discovered, None)
                .await?;
            round.stage = Stage::Discovered;
        }
        let transcript = Transcript {
            version: TRANSCRIPT_VERSION,
            chain_id: Some(self.chain_id),
            request: Some(RequestRecord {
                tx: round.rec.request_tx,
                block: round.rec.request_block,
            }),
            workflow: round.p.workflow.clone(),
            market: snapshot,
            discovery: found,
            question: input.question.clone(),
            reference_time: input.reference_time,
            resolve: None,
            outcome: None,
            submission: None,
            confirmation: None,
            transactions: None,
            finality: None,
            round: None,
            don: None,
        };
        Ok(Next::Run(Carried::next(input, transcript)))
    }
}
