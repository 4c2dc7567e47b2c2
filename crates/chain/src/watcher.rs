//! The chain watcher: turns `ResolutionRequested` logs into durable round requests.
//! It scans with `eth_getLogs` from the checkpoint (or the start block) up to the head
//! minus the confirmation depth, in chunks that are halved when the provider says the
//! range is too large; every log is recorded in the store (de-duplicated by tx hash and
//! log index) *before* the checkpoint moves past it. A changed block hash at the
//! checkpoint rewinds the scan by the reorg window, never below the start block: no
//! request below it is acted on. A request for a market whose round is done
//! (`confirmed`, `finalized`, `skipped`) is served again only when the chain says the
//! market is unresolved at the request's block and at the head ([`judge_request`]);
//! otherwise it is ignored with that reason. Besides its poll tick, a scan runs
//! whenever the head feed (`chain::heads`) reports a new head, which on a websocket
//! endpoint is pushed by a `newHeads` subscription.
//!
//! A pass woken by a pushed head first tries the short way ([`Watcher::scan_pushed`]):
//! when the pushed headers link the new blocks to the checkpoint by parent hash, each
//! block is scanned by its hash (`eth_getLogs` with `blockHash`, which an endpoint that
//! does not have the block answers with an error, EIP-234), one call per block instead
//! of four (the head, the checkpoint's block, the logs, the scanned block). Anything
//! else (no link, a reorg, a subscription behind the probe, many blocks at once, any
//! error) takes the full pass, and so does every poll tick.
//!
//! The watcher persists nothing itself: what it saw goes to a [`WatchSink`] (the
//! ack-height pattern of reth's ExEx): the sink records each request durably and
//! acknowledges the block the scan reached, and the watcher resumes from the sink's
//! last acknowledged block. The node's sink is its round store.

use crate::bindings::ICREsolverMarket;
use crate::heads::{HeadFeed, PushedHead};
use crate::reader::{ReadError, resolved_at};
use crate::rpc_failure::{RpcCause, RpcFailure};
use crate::scan::LogScanner;
use alloy::eips::BlockNumberOrTag;
use alloy::primitives::{Address, B256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{Filter, Log};
use alloy::sol_types::SolEvent;
use cresolver_core::{LogRef, RoundKey};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

/// A recorded trigger that starts (or restarts) a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    /// The round: the market contract and the market's id on it.
    pub round: RoundKey,
    /// The question the request carried (empty for a round resumed from the store).
    pub question: String,
    /// The `ResolutionRequested` log that asked for the round; `None` for a round resumed
    /// from the store.
    pub log: Option<LogRef>,
}

/// What the watcher scans and how.
#[derive(Debug, Clone)]
pub struct WatcherConfig {
    /// The market contract whose `ResolutionRequested` logs are scanned.
    pub market: Address,
    /// The workflow the requests are recorded for (part of the checkpoint's key).
    pub workflow: String,
    /// Blocks below the head a log must be before it is acted on.
    pub confirmations: u64,
    /// First block when there is no checkpoint, and the floor of every scan and rewind.
    pub start_block: u64,
    /// Time between two scans.
    pub poll_interval: Duration,
    /// Largest block range of one `eth_getLogs` call.
    pub max_range: u64,
    /// Blocks to rescan when the checkpoint's block hash changed.
    pub reorg_window: u64,
    /// Longest wait between scans after errors.
    pub max_backoff: Duration,
}

/// Why a scan stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// A call to the chain failed.
    #[error("RPC error: {0}")]
    Rpc(#[from] RpcFailure),
    /// The sink could not record or answer.
    #[error("cannot record what was seen: {0}")]
    Sink(#[from] SinkError),
}

/// The sink could not record or answer (its store is down, say): the scan stops and is
/// retried; nothing past the last acknowledged block is taken as seen.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SinkError(pub String);

/// A `ResolutionRequested` log the watcher saw, with the chain's word on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRequest<'a> {
    /// The round: the market contract and the market's id on it.
    pub round: RoundKey,
    /// The watcher's workflow.
    pub workflow: &'a str,
    /// The log's identity and position.
    pub log: &'a LogRef,
    /// Only meaningful for a market whose round is done: the chain says the market is
    /// unresolved at the request's block and at the head.
    pub unresolved_on_chain: bool,
}

/// What the sink made of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// A round is (re)started: the trigger goes to the dispatcher.
    pub starts_round: bool,
    /// The market's round was already handled, in this state: nothing to do.
    pub already_handled: Option<&'static str>,
    /// The decision, for the log line.
    pub decision: String,
}

/// Where the watcher hands what it saw; every method has stored what it was given before
/// it returns (it survives the process's crash; see the store for a power loss).
#[async_trait::async_trait]
pub trait WatchSink: Send + Sync {
    /// The last acknowledged block of the scan named `key`, with its hash.
    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, SinkError>;
    /// Acknowledges that every request up to `block` (hash `hash`) was recorded.
    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), SinkError>;
    /// Whether this very log was recorded before (a rescan after a rewind).
    async fn log_seen(&self, log: &LogRef) -> Result<bool, SinkError>;
    /// Whether the market's round is done (`confirmed`, `finalized` or `skipped`): only
    /// then is the chain asked whether the market is still unresolved.
    async fn round_done(&self, round: RoundKey) -> Result<bool, SinkError>;
    /// Records the request (de-duplicated by its log) and decides what it starts.
    async fn record_request(&self, req: SeenRequest<'_>) -> Result<Recorded, SinkError>;
}

/// What one scan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// The first block of the scan.
    pub from: u64,
    /// The last block scanned and acknowledged; `None` when the scan reached none.
    pub to: Option<u64>,
    /// The chain head when the scan began.
    pub head: u64,
    /// `ResolutionRequested` logs fetched.
    pub logs: usize,
    /// Triggers sent to start a round.
    pub triggers: usize,
    /// Where the scan rewound to after the checkpoint's block hash changed.
    pub rewound_to: Option<u64>,
    /// The range size in use at the end (after any halving).
    pub range: u64,
    /// The pass scanned pushed blocks by hash ([`Watcher::scan_pushed`]).
    pub pushed: bool,
}

/// Scans a market's `ResolutionRequested` logs into a [`WatchSink`] (see the module
/// documentation).
pub struct Watcher {
    provider: DynProvider,
    sink: Arc<dyn WatchSink>,
    cfg: WatcherConfig,
    scanner: LogScanner,
    /// The pushed headers, for passes by block hash.
    heads: Option<HeadFeed>,
}

/// The most blocks a pass by hash scans (one call each); more take a ranged pass.
const PUSHED_BLOCKS: usize = 8;

/// What the chain says of a new request for a market whose round is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainWord {
    /// Unresolved at the request's block and at the head: the request is served.
    Unresolved,
    /// Resolved: why the request is ignored.
    Resolved(String),
}

/// Reads whether the market is resolved at `request_block` (a log's block; `None`: a
/// manual request) and at the head. A node whose endpoint has pruned the request
/// block's state judges at the head alone.
pub async fn judge_request(
    provider: &DynProvider,
    round: RoundKey,
    request_block: Option<u64>,
) -> Result<ChainWord, ReadError> {
    if let Some(b) = request_block {
        match resolved_at(provider, round, Some(b)).await {
            Ok(true) => {
                return Ok(ChainWord::Resolved(format!(
                    "the market is resolved on chain at the request's block {b}"
                )));
            }
            Ok(false) => {}
            Err(ReadError::Rpc(e)) if e.is_pruned_state() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(if resolved_at(provider, round, None).await? {
        ChainWord::Resolved("the market is resolved on chain (at the head)".into())
    } else {
        ChainWord::Unresolved
    })
}

impl Watcher {
    /// A watcher of `cfg.market` reading through `provider`, resuming from `sink`'s
    /// checkpoint.
    pub fn new(provider: DynProvider, sink: Arc<dyn WatchSink>, cfg: WatcherConfig) -> Self {
        let scanner = LogScanner::new(cfg.max_range);
        Self {
            provider,
            sink,
            cfg,
            scanner,
            heads: None,
        }
    }

    /// Scans blocks the head feed's subscription pushed by their hash when it can (see
    /// the module documentation); [`Watcher::run`] then tries that first when the feed
    /// wakes it.
    pub fn with_heads(mut self, heads: HeadFeed) -> Self {
        self.heads = Some(heads);
        self
    }

    fn checkpoint_key(&self) -> String {
        format!("watch:{}:{}", self.cfg.market, self.cfg.workflow)
    }

    fn filter(&self) -> Filter {
        Filter::new()
            .address(self.cfg.market)
            .event_signature(ICREsolverMarket::ResolutionRequested::SIGNATURE_HASH)
    }

    async fn block_hash(&self, n: u64) -> Result<Option<B256>, WatchError> {
        let b = self
            .provider
            .get_block_by_number(BlockNumberOrTag::Number(n))
            .await
            .map_err(|e| RpcFailure::new(format!("eth_getBlockByNumber({n})"), e))?;
        Ok(b.map(|b| b.header.hash))
    }

    /// One pass from the checkpoint to the safe head. Triggers that start a round are
    /// sent on `out` after they are durably recorded.
    pub async fn scan_once(
        &mut self,
        out: &mpsc::Sender<Trigger>,
    ) -> Result<ScanReport, WatchError> {
        let key = self.checkpoint_key();
        // the head and the checkpoint's block hash in one round trip
        let head = async {
            self.provider
                .get_block_number()
                .await
                .map_err(|e| WatchError::Rpc(RpcFailure::new("eth_blockNumber", e)))
        };
        let checkpoint = async {
            match self.sink.checkpoint(&key).await? {
                Some((n, hash)) => Ok::<_, WatchError>(Some((n, hash, self.block_hash(n).await?))),
                None => Ok(None),
            }
        };
        let (head, checkpoint) = tokio::join!(head, checkpoint);
        let (head, checkpoint) = (head?, checkpoint?);
        let safe = head.saturating_sub(self.cfg.confirmations);
        let mut report = ScanReport {
            head,
            range: self.scanner.range(),
            ..Default::default()
        };
        let from = match checkpoint {
            Some((n, hash, now)) => match now {
                Some(h) if h == hash => n.saturating_add(1),
                other => {
                    let back = n
                        .saturating_sub(self.cfg.reorg_window)
                        .max(self.cfg.start_block);
                    tracing::warn!(checkpoint = n, stored = %hash, now = ?other, rewind_to = back, "block hash at checkpoint changed: rewinding");
                    report.rewound_to = Some(back);
                    back
                }
            },
            None => self.cfg.start_block,
        };
        // a start block raised above an old checkpoint: nothing below it is scanned
        let mut from = from.max(self.cfg.start_block);
        report.from = from;
        while from <= safe {
            let (to, logs) = self
                .scanner
                .next_chunk(&self.provider, &self.filter(), from, safe)
                .instrument(tracing::debug_span!(target: "cresolver::step", "step", step = "logs"))
                .await
                .map_err(WatchError::Rpc)?;
            self.record_all(&logs, out, &mut report).await?;
            // An endpoint that does not have `to` yet (another endpoint answered the head)
            // may have returned only part of the logs: scan the range again later.
            let hash = self.block_hash(to).await?.ok_or_else(|| {
                WatchError::Rpc(RpcFailure::new(
                    format!("the endpoint has no block {to} yet: the range is scanned again"),
                    RpcCause::NotFound,
                ))
            })?;
            self.sink.set_checkpoint(&key, to, hash).await?;
            report.to = Some(to);
            // (a head of u64::MAX from a hostile endpoint ends the pass, not the process)
            let Some(next) = to.checked_add(1) else { break };
            from = next;
        }
        report.range = self.scanner.range();
        Ok(report)
    }

    /// A pass over the blocks the subscription pushed since the checkpoint, each scanned
    /// by its hash, when the pushed headers link them to the checkpoint's block and hash
    /// and there are at most [`PUSHED_BLOCKS`] to scan; `None` (nothing done) otherwise,
    /// and the caller makes a full pass. Triggers go out as in [`Watcher::scan_once`].
    pub async fn scan_pushed(
        &mut self,
        out: &mpsc::Sender<Trigger>,
    ) -> Result<Option<ScanReport>, WatchError> {
        // (an http-only node's feed has no pushed headers: no checkpoint read for nothing)
        let Some(feed) = self.heads.as_ref().filter(|f| f.pushed_is_current()) else {
            return Ok(None);
        };
        let key = self.checkpoint_key();
        let Some((n, hash)) = self.sink.checkpoint(&key).await? else {
            return Ok(None);
        };
        // a start block raised above the checkpoint: the full pass moves to it
        if n.saturating_add(1) < self.cfg.start_block {
            return Ok(None);
        }
        let Some(above) = feed.pushed_after(n, hash) else {
            return Ok(None);
        };
        let head = above.last().map_or(n, |h| h.number);
        let safe = head.saturating_sub(self.cfg.confirmations);
        let blocks: Vec<PushedHead> = above.into_iter().filter(|h| h.number <= safe).collect();
        if blocks.len() > PUSHED_BLOCKS {
            return Ok(None);
        }
        let mut report = ScanReport {
            from: n.saturating_add(1),
            head,
            range: self.scanner.range(),
            pushed: true,
            ..Default::default()
        };
        for block in blocks {
            let logs = self
                .logs_of(block)
                .instrument(tracing::debug_span!(target: "cresolver::step", "step", step = "logs"))
                .await?;
            self.record_all(&logs, out, &mut report).await?;
            self.sink
                .set_checkpoint(&key, block.number, block.hash)
                .await?;
            report.to = Some(block.number);
        }
        Ok(Some(report))
    }

    /// The market's `ResolutionRequested` logs of one pushed block, asked for by its
    /// hash and held to that request ([`crate::scan::matching`]: a log of another block
    /// or contract fails the pass, and the next one is a full pass).
    async fn logs_of(&self, block: PushedHead) -> Result<Vec<Log>, WatchError> {
        let call = format!("eth_getLogs(blockHash of block {})", block.number);
        let filter = self.filter().at_block_hash(block.hash);
        let logs = self
            .provider
            .get_logs(&filter)
            .await
            .map_err(|e| RpcFailure::new(call.clone(), e))?;
        Ok(crate::scan::matching(&call, &filter, logs)?)
    }

    /// Records each log of a chunk and sends the triggers of the rounds they start (once
    /// each is durable), counting both in `report`.
    async fn record_all(
        &self,
        logs: &[Log],
        out: &mpsc::Sender<Trigger>,
        report: &mut ScanReport,
    ) -> Result<(), WatchError> {
        report.logs += logs.len();
        for log in logs {
            if let Some(t) = self
                .record(log)
                .instrument(
                    tracing::debug_span!(target: "cresolver::step", "step", step = "record"),
                )
                .await?
            {
                report.triggers += 1;
                // The request is durable; a closed channel only means shutdown.
                let _ = out.send(t).await;
            }
        }
        Ok(())
    }

    async fn record(&self, log: &Log) -> Result<Option<Trigger>, WatchError> {
        let (Some(tx_hash), Some(log_index), Some(block_number), Some(block_hash)) = (
            log.transaction_hash,
            log.log_index,
            log.block_number,
            log.block_hash,
        ) else {
            tracing::warn!(?log, "log without position (pending?): skipped");
            return Ok(None);
        };
        let ev = match ICREsolverMarket::ResolutionRequested::decode_log(&log.inner) {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(%tx_hash, log_index, error = %e, "undecodable ResolutionRequested log: skipped");
                return Ok(None);
            }
        };
        if block_number < self.cfg.start_block {
            tracing::debug!(%tx_hash, block = block_number, start_block = self.cfg.start_block, "request below the start block: not acted on");
            return Ok(None);
        }
        let log_ref = LogRef {
            tx_hash,
            log_index,
            block_number,
            block_hash,
        };
        let round = RoundKey::new(self.cfg.market, ev.data.marketId);
        let market_id = round.id;
        // a done round is served again only when the chain says the market is open; the
        // chain is read before the log is recorded, so an RPC error leaves it to the
        // next scan
        // (a log seen before — a rescan after a rewind — is a duplicate: no chain read)
        // The two store reads go out together; the round's is only used (and its error
        // only counts) for a log not seen before.
        let (seen, done) = tokio::join!(self.sink.log_seen(&log_ref), self.sink.round_done(round));
        let done = !seen? && done?;
        let mut ignored_because = None;
        let unresolved = if done {
            match judge_request(&self.provider, round, Some(block_number)).await {
                Ok(ChainWord::Unresolved) => true,
                Ok(ChainWord::Resolved(why)) => {
                    ignored_because = Some(why);
                    false
                }
                Err(ReadError::Rpc(e)) => return Err(WatchError::Rpc(e)),
                Err(e) => {
                    ignored_because = Some(e.to_string());
                    false
                }
            }
        } else {
            false
        };
        let recorded = self
            .sink
            .record_request(SeenRequest {
                round,
                workflow: &self.cfg.workflow,
                log: &log_ref,
                unresolved_on_chain: unresolved,
            })
            .await?;
        match (recorded.already_handled, ignored_because) {
            (Some(state), Some(why)) => {
                tracing::info!(market_id = %market_id, block = block_number, %tx_hash, state, reason = %why, "ResolutionRequested ignored: the market is resolved on chain");
            }
            _ => {
                tracing::info!(market_id = %market_id, block = block_number, %tx_hash, decision = %recorded.decision, "ResolutionRequested")
            }
        }
        Ok(recorded.starts_round.then(|| Trigger {
            round,
            question: ev.data.question.clone(),
            log: Some(log_ref),
        }))
    }

    /// Scans until `shutdown` turns true: on every poll tick, and whenever `wake` says
    /// there is a new head (or a reconnected subscription).
    pub async fn run(
        mut self,
        out: mpsc::Sender<Trigger>,
        shutdown: tokio_util::sync::CancellationToken,
        mut wake: Option<watch::Receiver<u64>>,
        on_scan: impl Fn(&ScanReport) + Send,
    ) {
        let mut backoff = self.cfg.poll_interval;
        // woken by a new head after a pass that went well: the short way is tried first
        let mut woken = false;
        loop {
            let pushed = match woken {
                true => match self.scan_pushed(&out).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::debug!(error = %e, "scan by block hash failed: a full pass follows");
                        None
                    }
                },
                false => None,
            };
            let scanned = match pushed {
                Some(r) => Ok(r),
                None => self.scan_once(&out).await,
            };
            let ok = match scanned {
                Ok(r) => {
                    on_scan(&r);
                    backoff = self.cfg.poll_interval;
                    true
                }
                Err(e) => {
                    backoff = (backoff * 2).min(self.cfg.max_backoff.max(self.cfg.poll_interval));
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "scan failed; retrying");
                    false
                }
            };
            let tick = tokio::time::sleep(backoff);
            woken = false;
            tokio::select! {
                _ = tick => {}
                _ = shutdown.cancelled() => return,
                got = async { match wake.as_mut() { Some(rx) => rx.changed().await, None => std::future::pending().await } } => {
                    if got.is_err() {
                        wake = None;
                    } else {
                        woken = ok;
                    }
                }
            }
            if shutdown.is_cancelled() {
                return;
            }
        }
    }
}
