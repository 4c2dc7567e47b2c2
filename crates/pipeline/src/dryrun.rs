//! Dry-run: the full pipeline against a real RPC — read, discovery, worker calls and
//! evaluation for real — with the submission replaced by a simulation: `eth_call` and
//! gas estimate of the exact transaction from the configured resolver address. Nothing
//! is signed or sent, no nonce moves, and no store is written (the watch mode keeps its
//! de-duplication in an in-memory store). No private key is needed.
//!
//! When the market would refuse the resolver (`authorizedResolvers[resolver]` is false),
//! the simulation is run twice: as is (it reverts with the decoded `Unauthorized`), and
//! with a state override that sets the flag, which tells whether anything else would
//! stop the submission once the resolver is authorized. The override is flagged in the
//! output.
//!
//! The flag's storage slot follows the market's storage layout
//! (`contracts-abi/src/CREsolverMarket.sol`, solc `storageLayout`): `owner` 0,
//! `_reentrancyStatus` 1, `markets` 2, `marketCount` 3, `stakes` 4, `_marketWorkers` 5,
//! `workerAgentIds` 6, `balances` 7, `authorizedResolvers` **8**, `reputation` 9
//! (immutables and constants take no slot). A mapping entry lives at
//! `keccak256(abi.encode(key, slot))`.

use crate::config::{ConfigError, NodeConfig};
use crate::dispatch::{Concurrency, dispatch};
use crate::live::{LiveContext, LiveError, LiveRound};
use crate::replay::ReportView;
use crate::round::Engine;
use crate::store_sink::StoreSink;
use crate::transcript::TallyRecord;
use crate::workflow::Workflow;
use alloy::primitives::{Address, B256, Bytes, U256, keccak256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::state::StateOverridesBuilder;
use cresolver_chain::bindings::ICREsolverMarket;
use cresolver_chain::discovery::DiscoveryConfig;
use cresolver_chain::reader::MarketSnapshot;
use cresolver_chain::watcher::{Trigger, Watcher};
use cresolver_core::{MarketId, RoundKey};
use cresolver_store::{SqliteStore, Store};
use cresolver_submit::{Simulation, Submitter};
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Storage slot of `mapping(address => bool) authorizedResolvers` in `CREsolverMarket`.
pub const AUTHORIZED_RESOLVERS_SLOT: u64 = 8;

/// The storage slot of `authorizedResolvers[who]`.
pub fn authorized_resolver_slot(who: Address) -> B256 {
    let mut buf = [0u8; 64];
    buf[12..32].copy_from_slice(who.as_slice());
    buf[32..64].copy_from_slice(&U256::from(AUTHORIZED_RESOLVERS_SLOT).to_be_bytes::<32>());
    keccak256(buf)
}

/// Why a dry-run could not run (a round that fails is a report, not an error).
#[derive(Debug, thiserror::Error)]
pub enum DryRunError {
    /// The node configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The workflow's engine could not be built.
    #[error(transparent)]
    Engine(#[from] crate::round::EngineError),
    /// The submitter could not be built.
    #[error(transparent)]
    Submit(#[from] cresolver_submit::SubmitError),
    /// The market could not be read or its round prepared.
    #[error(transparent)]
    Live(#[from] LiveError),
    /// A chain call failed.
    #[error("RPC error: {0}")]
    Rpc(#[from] cresolver_chain::RpcFailure),
    /// The dry run's in-memory store cannot be opened.
    #[error("in-memory store: {0}")]
    Store(#[from] cresolver_store::StoreError),
}

/// One registered worker as the dry-run saw it.
#[derive(Debug, Clone, Serialize)]
pub struct DryRunWorker {
    /// The worker's address.
    pub address: Address,
    /// The endpoint discovery found (`None`: none usable).
    pub endpoint: Option<String>,
    /// Why discovery discarded it, or why its resolve call failed.
    pub failure: Option<String>,
    /// Its answer: YES (`true`) or NO.
    pub determination: Option<bool>,
    /// Its confidence in the answer, 0 to 1.
    pub confidence: Option<f64>,
    /// How long its resolve call took, in ms.
    pub elapsed_ms: Option<u64>,
}

/// The simulation under a state override that authorizes the resolver.
#[derive(Debug, Clone, Serialize)]
pub struct OverrideSimulation {
    /// The overridden storage: `authorizedResolvers[resolver]` at `slot` of the market.
    pub contract: Address,
    /// The storage slot overridden.
    pub slot: B256,
    /// The value written there (`true`).
    pub value: B256,
    /// The submission simulated under the override.
    pub simulation: Simulation,
}

/// What a dry-run found.
#[derive(Debug, Clone, Serialize)]
pub struct DryRunReport {
    /// The market contract.
    pub market: Address,
    /// The market's id.
    pub market_id: MarketId,
    /// The block the market was read at.
    pub block: u64,
    /// The market's question.
    pub question: String,
    /// The workflow's name.
    pub workflow: String,
    /// `would_submit`, `would_revert`, `already_resolved` or `round_failed`.
    pub status: String,
    /// What explains the status: the market's resolution, the round's error, the
    /// simulation's revert or RPC error.
    pub reason: Option<String>,
    /// Every registered worker, in registration order.
    pub workers: Vec<DryRunWorker>,
    /// The evaluator that scored the answers.
    pub evaluator: Option<String>,
    /// The tally the submission carries.
    pub tally: Option<TallyRecord>,
    /// The CRE report body the submission carries.
    pub report: Option<Bytes>,
    /// That report, decoded.
    pub decoded_report: Option<ReportView>,
    /// The address the market checks as resolver (`from`, or the receiver in report mode).
    pub resolver: Address,
    /// Whether the market authorizes the resolver (`authorizedResolvers`).
    pub resolver_authorized: Option<bool>,
    /// The exact submission, simulated as is.
    pub simulation: Option<Simulation>,
    /// Only when the resolver is not authorized: the same simulation with it authorized.
    pub override_simulation: Option<OverrideSimulation>,
    /// Pre-flight findings that would stop the node's submission.
    pub checks: Vec<String>,
    /// Always false: a dry-run never sends.
    pub sent: bool,
}

impl DryRunReport {
    /// Exit status: only a simulation that succeeds as configured is a success.
    pub fn would_submit(&self) -> bool {
        self.status == "would_submit"
    }
}

/// A dry-runner for one workflow on one market.
pub struct DryRunner {
    provider: DynProvider,
    engine: Engine,
    submitter: Submitter,
    market: Address,
    multicall: Option<Address>,
    discovery: DiscoveryConfig,
    http: reqwest::Client,
}

impl DryRunner {
    /// `from`: the resolver address the transaction would be sent from.
    pub fn new(
        provider: DynProvider,
        cfg: &NodeConfig,
        workflow: Workflow,
        market: Address,
        from: Address,
    ) -> Result<Self, DryRunError> {
        let submitter = Submitter::new(
            provider.clone(),
            from,
            crate::stages::submitter_config(cfg, &workflow, market),
        )?;
        let discovery = crate::stages::discovery_config(cfg)?;
        let net = discovery.net_policy();
        Ok(Self {
            engine: Engine::new(workflow, &net)?,
            submitter,
            market,
            multicall: cfg.chain.multicall_address,
            discovery,
            http: net.http_client(),
            provider,
        })
    }

    /// The market contract this runner reads and simulates against.
    pub fn market(&self) -> Address {
        self.market
    }

    fn report(&self, snapshot: &MarketSnapshot, status: &str) -> DryRunReport {
        DryRunReport {
            market: self.market,
            market_id: snapshot.market_id,
            block: snapshot.block,
            question: snapshot.question.clone(),
            workflow: self.engine.workflow.name.clone(),
            status: status.into(),
            reason: None,
            workers: vec![],
            evaluator: None,
            tally: None,
            report: None,
            decoded_report: None,
            resolver: self.submitter.resolver(),
            resolver_authorized: None,
            simulation: None,
            override_simulation: None,
            checks: vec![],
            sent: false,
        }
    }

    /// Runs the pipeline for `market_id` at the head and simulates the submission.
    pub async fn run(&self, market_id: MarketId) -> Result<DryRunReport, DryRunError> {
        self.run_at(market_id, None).await
    }

    /// Runs the pipeline for `market_id` read and judged at `block` (the request's block,
    /// as the node does; `None`: the head) and simulates the submission (at the head).
    pub async fn run_at(
        &self,
        market_id: MarketId,
        block: Option<u64>,
    ) -> Result<DryRunReport, DryRunError> {
        let round = RoundKey::new(self.market, market_id);
        let ctx = LiveContext {
            provider: &self.provider,
            multicall: self.multicall,
            discovery: &self.discovery,
            http: &self.http,
        };
        if let Some(b) = block
            && cresolver_chain::reader::resolved_at_head(&self.provider, round)
                .await
                .unwrap_or(false)
        {
            // resolved since the request: say so from the head's view
            let snapshot = crate::live::read(&ctx, round, None).await?;
            let mut r = self.report(&snapshot, "already_resolved");
            r.reason = Some(format!(
                "market {market_id} (requested at block {b}) is already resolved on chain"
            ));
            return Ok(r);
        }
        let snapshot = crate::live::read(&ctx, round, block).await?;
        if snapshot.resolved {
            let mut r = self.report(&snapshot, "already_resolved");
            r.reason = Some(format!(
                "market {market_id} is already resolved on chain ({})",
                if snapshot.resolution { "YES" } else { "NO" }
            ));
            return Ok(r);
        }
        let live = crate::live::run_round(&ctx, &self.engine, snapshot).await?;
        let mut r = self.report(&live.snapshot, "round_failed");
        r.workers = dry_run_workers(&live);
        let outcome = match live.result {
            Ok(o) => o,
            Err(e) => {
                r.reason = Some(e.to_string());
                return Ok(r);
            }
        };
        if let Some(w) = live
            .snapshot
            .workers
            .iter()
            .find(|w| w.market_is_operator && w.agent_id != U256::ZERO)
        {
            r.checks.push(
                cresolver_submit::SubmitError::OperatorBlocks {
                    worker: w.address,
                    agent_id: w.agent_id,
                }
                .to_string(),
            );
        }
        r.evaluator = Some(outcome.evaluation.evaluator.clone());
        r.tally = Some(outcome.tally.clone());
        r.decoded_report = ReportView::from_report_bytes(&outcome.report);
        r.report = Some(outcome.report.clone());

        self.simulate(&mut r, &outcome.tally).await?;
        Ok(r)
    }

    /// Simulates the submission of `tally` into `r`: whether the resolver is
    /// authorized, the simulation as is (and with the resolver authorized by a state
    /// override when it is not), the status and the reason.
    async fn simulate(&self, r: &mut DryRunReport, tally: &TallyRecord) -> Result<(), DryRunError> {
        let resolver = self.submitter.resolver();
        let authorized = ICREsolverMarket::new(self.market, self.provider.clone())
            .authorizedResolvers(resolver)
            .call()
            .await
            .map_err(|e| {
                DryRunError::Rpc(cresolver_chain::RpcFailure::new(
                    format!("authorizedResolvers({resolver})"),
                    e,
                ))
            })?;
        r.resolver_authorized = Some(authorized);
        let sim = self.submitter.simulate(tally, None).await;
        if !authorized {
            let slot = authorized_resolver_slot(resolver);
            let value = B256::with_last_byte(1);
            let overrides = StateOverridesBuilder::default()
                .with_state_diff(self.market, [(slot, value)])
                .build();
            let simulation = self.submitter.simulate(tally, Some(overrides)).await;
            r.override_simulation = Some(OverrideSimulation {
                contract: self.market,
                slot,
                value,
                simulation,
            });
        }
        r.status = if sim.success && r.checks.is_empty() {
            "would_submit".into()
        } else {
            "would_revert".into()
        };
        if let Some(rev) = &sim.revert {
            r.reason = Some(format!("simulation reverted: {}", rev.reason));
        } else if let Some(e) = &sim.rpc_error {
            r.reason = Some(e.clone());
        }
        r.simulation = Some(sim);
        Ok(())
    }

    /// Watches the market for `ResolutionRequested` from `start_block` (default: the
    /// head) and dry-runs every new request until `shutdown` turns true. Requests are
    /// de-duplicated in an in-memory store; nothing is persisted.
    pub async fn watch(
        self: &Arc<Self>,
        cfg: &NodeConfig,
        start_block: Option<u64>,
        shutdown: tokio_util::sync::CancellationToken,
        mut on_report: impl FnMut(MarketId, Result<DryRunReport, DryRunError>),
    ) -> Result<(), DryRunError> {
        let chain_id =
            self.provider.get_chain_id().await.map_err(|e| {
                DryRunError::Rpc(cresolver_chain::RpcFailure::new("eth_chainId", e))
            })?;
        let head = self.provider.get_block_number().await.map_err(|e| {
            DryRunError::Rpc(cresolver_chain::RpcFailure::new("eth_blockNumber", e))
        })?;
        let store: Arc<dyn cresolver_store::RoundStore> =
            Arc::new(SqliteStore::new(Store::in_memory()?));
        // on a websocket endpoint new heads wake the scan, as in the node
        let heads = cresolver_chain::heads::HeadFeed::new();
        let watcher = Watcher::new(
            self.provider.clone(),
            StoreSink::shared(store),
            cfg.watcher_config(
                self.market,
                &self.engine.workflow.name,
                chain_id,
                start_block.unwrap_or(head),
            ),
        )
        .with_heads(heads.clone());
        let (tx, rx) = mpsc::channel::<Trigger>(256);
        let stop = shutdown.clone();
        let push = cfg
            .rpc_urls()
            .into_iter()
            .find(|u| u.starts_with("ws"))
            .map(|url| {
                let push_cfg = cresolver_chain::heads::PushConfig {
                    pool: cfg.pool_config(),
                    max_backoff: cfg.max_backoff(),
                    stall_after: Duration::from_secs(30),
                };
                tokio::spawn(cresolver_chain::heads::run_push(
                    url,
                    push_cfg,
                    heads.clone(),
                    shutdown.clone(),
                ))
            });
        let task = tokio::spawn(watcher.run(tx, shutdown, Some(heads.subscribe()), |_| {}));
        // the watcher is the source, the dispatcher runs each request through the
        // pipeline one at a time, and the reports come back here in order
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        let me = self.clone();
        let run = dispatch(
            rx,
            Concurrency::AtMost(1),
            async move {
                stop.cancelled().await;
            },
            move |t: Trigger| {
                let (me, done) = (me.clone(), done_tx.clone());
                async move {
                    // judged at the request's block, as the node judges it
                    let r = me
                        .run_at(t.round.id, t.log.as_ref().map(|l| l.block_number))
                        .await;
                    let _ = done.send((t.round.id, r));
                }
            },
        );
        tokio::pin!(run);
        let left = loop {
            tokio::select! {
                left = &mut run => break left,
                Some((id, r)) = done_rx.recv() => on_report(id, r),
            }
        };
        // a round in flight at Ctrl-C still reports (bounded by the workflow's timeouts)
        left.drain(WATCH_DRAIN).await;
        while let Ok((id, r)) = done_rx.try_recv() {
            on_report(id, r);
        }
        task.abort();
        if let Some(p) = push {
            p.abort();
        }
        Ok(())
    }
}

/// Each registered worker as the round saw it: its endpoint, why discovery discarded
/// it or its resolve call failed, and its answer.
fn dry_run_workers(live: &LiveRound) -> Vec<DryRunWorker> {
    live.found
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let result = match &live.result {
                Ok(o) => o.resolve.results.get(i).cloned(),
                Err(crate::round::RoundError::QuorumNotMet(s)) => s.results.get(i).cloned(),
                Err(_) => None,
            };
            DryRunWorker {
                address: d.address,
                endpoint: d.endpoint.as_ref().ok().map(|u| u.to_string()),
                failure: match (&d.endpoint, &result) {
                    (Err(e), _) => Some(e.to_string()),
                    (_, Some(res)) => res.outcome.as_ref().err().map(|f| f.to_string()),
                    _ => None,
                },
                determination: result
                    .as_ref()
                    .and_then(|x| x.answer().map(|a| a.determination)),
                confidence: result
                    .as_ref()
                    .and_then(|x| x.answer().map(|a| a.confidence)),
                elapsed_ms: result.as_ref().map(|x| x.elapsed_ms),
            }
        })
        .collect()
}

/// How long a dry-run round in flight at shutdown may take to finish and report.
const WATCH_DRAIN: Duration = Duration::from_secs(60);

/// The dry-run as text.
pub fn render(r: &DryRunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "dry-run of market {} on {} (read at block {}, workflow {})",
        r.market_id, r.market, r.block, r.workflow
    );
    let _ = writeln!(s, "question: {}", r.question);
    for (i, w) in r.workers.iter().enumerate() {
        let what = match (&w.determination, &w.failure) {
            (Some(d), _) => format!(
                "{} ({:.0}%)",
                if *d { "YES" } else { "NO" },
                w.confidence.unwrap_or(0.0) * 100.0
            ),
            (None, Some(f)) => format!("no answer: {f}"),
            _ => "-".into(),
        };
        let weight = r
            .tally
            .as_ref()
            .and_then(|t| t.workers.get(i))
            .map(|t| {
                format!(
                    " weight {} scores {}/{}/{}",
                    t.weight, t.scores.res_quality, t.scores.src_quality, t.scores.analysis_depth
                )
            })
            .unwrap_or_default();
        let _ = writeln!(s, "  worker #{} {}: {what}{weight}", i + 1, w.address);
    }
    if let Some(e) = &r.evaluator {
        let _ = writeln!(s, "evaluator: {e}");
    }
    if let Some(d) = &r.decoded_report {
        let _ = writeln!(
            s,
            "would-be report: marketId {}, resolution {}, workers {:?}, weights [{}], dimScores {:?}",
            d.market_id,
            if d.resolution { "YES" } else { "NO" },
            d.workers,
            d.weights
                .iter()
                .map(|w| w.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            d.dim_scores
        );
    }
    if let Some(b) = &r.report {
        let _ = writeln!(s, "report bytes: {b}");
    }
    if let Some(sim) = &r.simulation {
        let _ = writeln!(s, "transaction: from {} to {}", sim.from, sim.to);
        let _ = writeln!(s, "calldata: {}", sim.calldata);
        let _ = writeln!(
            s,
            "resolver {}: {}",
            r.resolver,
            match r.resolver_authorized {
                Some(true) => "authorized on the market",
                Some(false) => "NOT authorized on the market",
                None => "authorization unknown",
            }
        );
        let _ = writeln!(s, "simulation: {}", sim_line(sim));
    }
    if let Some(o) = &r.override_simulation {
        let _ = writeln!(
            s,
            "simulation with a STATE OVERRIDE (authorizedResolvers[{}] = true, slot {} of {}): {}",
            r.resolver,
            o.slot,
            o.contract,
            sim_line(&o.simulation)
        );
    }
    for c in &r.checks {
        let _ = writeln!(s, "pre-flight: {c}");
    }
    let _ = writeln!(
        s,
        "result: {}{} — nothing was signed or sent",
        r.status,
        r.reason
            .as_ref()
            .map(|x| format!(" ({x})"))
            .unwrap_or_default()
    );
    s
}

fn sim_line(sim: &Simulation) -> String {
    match (&sim.revert, &sim.rpc_error, sim.gas_estimate) {
        (Some(rev), _, _) => format!("reverts with {}: {}", rev.name, rev.reason),
        (None, Some(e), _) if !sim.success => format!("RPC error: {e}"),
        (None, Some(e), _) => format!("succeeds; gas estimate failed: {e}"),
        (None, None, Some(g)) => format!(
            "succeeds; gas estimate {g}, gas limit {}",
            sim.gas_limit.unwrap_or(g)
        ),
        (None, None, None) => "succeeds".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_is_keccak_of_padded_key_and_slot() {
        let who = Address::repeat_byte(0xab);
        let manual = keccak256(
            [
                B256::left_padding_from(who.as_slice()).as_slice(),
                B256::with_last_byte(8).as_slice(),
            ]
            .concat(),
        );
        assert_eq!(authorized_resolver_slot(who), manual);
    }
}
