//! One round run for real outside the node — read the market at a block, discover its
//! workers, fan out, challenge, evaluate, tally — with no store and no submission.
//! `cresolver dry-run` and `cresolver replay --live` both drive rounds through
//! [`run_live`]; what they do with the outcome (simulate, compare) is theirs.

use crate::round::{Engine, RoundError, RoundInput, RoundOutcome};
use alloy::eips::BlockNumberOrTag;
use alloy::primitives::Address;
use alloy::providers::{DynProvider, Provider};
use cresolver_chain::discovery::{DiscoveredWorker, DiscoveryConfig, discover, to_slots};
use cresolver_chain::reader::{MarketSnapshot, ReadError, read_market};
use cresolver_core::{MarketId, MarketIdTooLarge, RoundKey};

/// Where and how a live round reads and calls.
pub struct LiveContext<'a> {
    /// The chain the market is read from.
    pub provider: &'a DynProvider,
    /// Multicall3 for batched reads (`None`: concurrent calls).
    pub multicall: Option<Address>,
    /// How workers are discovered, and the protocols they may speak.
    pub discovery: &'a DiscoveryConfig,
    /// The client registration files are fetched with.
    pub http: &'a reqwest::Client,
}

/// What a live round saw and produced.
pub struct LiveRound {
    /// The market as read.
    pub snapshot: MarketSnapshot,
    /// Discovery of each registered worker, in registration order.
    pub found: Vec<DiscoveredWorker>,
    /// What the round was asked.
    pub input: RoundInput,
    /// The engine's result: an outcome, or why the round failed (quorum, evaluation, tally).
    pub result: Result<RoundOutcome, RoundError>,
}

/// Why a live round could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The market could not be read.
    #[error("reading market {market_id}: {source}")]
    Read {
        /// The market's id.
        market_id: MarketId,
        /// Why the read failed.
        source: ReadError,
    },
    /// The market id is larger than the worker protocol's `u64`.
    #[error(transparent)]
    MarketIdTooLarge(#[from] MarketIdTooLarge),
    /// A chain call failed.
    #[error("RPC error: {0}")]
    Rpc(#[from] cresolver_chain::RpcFailure),
}

/// The timestamp of `block` (`None`: the latest block).
pub async fn block_time(provider: &DynProvider, block: Option<u64>) -> Result<u64, LiveError> {
    let tag = block.map_or(BlockNumberOrTag::Latest, BlockNumberOrTag::Number);
    match provider.get_block_by_number(tag).await {
        Ok(Some(b)) => Ok(b.header.timestamp),
        Ok(None) => Err(LiveError::Rpc(cresolver_chain::RpcFailure::new(
            format!("block {tag}"),
            cresolver_chain::RpcCause::NotFound,
        ))),
        Err(e) => Err(LiveError::Rpc(cresolver_chain::RpcFailure::new(
            format!("eth_getBlockByNumber({tag})"),
            e,
        ))),
    }
}

/// Reads `market_id` at `block` (`None`: the head).
pub async fn read(
    ctx: &LiveContext<'_>,
    round: RoundKey,
    block: Option<u64>,
) -> Result<MarketSnapshot, LiveError> {
    read_market(ctx.provider, round, block, ctx.multicall)
        .await
        .map_err(|source| LiveError::Read {
            market_id: round.id,
            source,
        })
}

/// Discovers the snapshot's workers at its block and builds the round's input, judged at
/// that block's time: the one way every path (node, dry-run, replay --live) prepares a
/// round.
pub async fn collect_input(
    ctx: &LiveContext<'_>,
    snapshot: &MarketSnapshot,
) -> Result<(Vec<DiscoveredWorker>, RoundInput), LiveError> {
    // refused before any worker is discovered: the round's requests could not carry it
    snapshot.market_id.to_u64()?;
    // the block's time is read while the workers are discovered (one round trip less)
    let (found, reference_time) = tokio::join!(
        discover(
            ctx.provider,
            snapshot.identity_registry,
            &snapshot.workers,
            Some(snapshot.block),
            ctx.discovery,
            ctx.http,
        ),
        block_time(ctx.provider, Some(snapshot.block)),
    );
    let reference_time = reference_time?;
    let input = RoundInput {
        market_id: snapshot.market_id,
        question: snapshot.question.clone(),
        deadline: u64::try_from(snapshot.deadline).ok(),
        reference_time,
        workers: to_slots(&found, &ctx.discovery.protocols),
        reputations: snapshot.workers.iter().map(|w| w.reputation).collect(),
    };
    Ok((found, input))
}

/// Discovers the snapshot's workers at its block and runs one round with `engine`,
/// judged at the block's time. Nothing is stored, signed or sent.
pub async fn run_round(
    ctx: &LiveContext<'_>,
    engine: &Engine,
    snapshot: MarketSnapshot,
) -> Result<LiveRound, LiveError> {
    let (found, input) = collect_input(ctx, &snapshot).await?;
    let result = engine.run(&input).await;
    Ok(LiveRound {
        snapshot,
        found,
        input,
        result,
    })
}

/// [`read`] then [`run_round`].
pub async fn run_live(
    ctx: &LiveContext<'_>,
    engine: &Engine,
    round: RoundKey,
    block: Option<u64>,
) -> Result<LiveRound, LiveError> {
    let snapshot = read(ctx, round, block).await?;
    run_round(ctx, engine, snapshot).await
}
