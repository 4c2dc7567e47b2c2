//! What the node benches share: a devnet with three instant reference workers and
//! markets they joined, and an in-process node over it.
#![allow(dead_code)] // each bench uses its own part

use alloy::primitives::{U256, utils::parse_ether};
use cresolver_devnet::Devnet;
use cresolver_devnet::agent::{AgentBehaviour, DeterminationMode};
use cresolver_node::Node;
use cresolver_pipeline::config::NodeConfig;
use cresolver_store::RoundKey;
use std::sync::Arc;
use std::time::Duration;

/// A devnet with 3 instant YES workers registered, and `markets` markets they all joined.
pub async fn devnet_with_markets(
    markets: usize,
    question: &str,
) -> anyhow::Result<(Devnet, Vec<U256>)> {
    devnet_with_slow_markets(markets, question, Duration::ZERO).await
}

/// [`devnet_with_markets`] with workers that answer after `latency`.
pub async fn devnet_with_slow_markets(
    markets: usize,
    question: &str,
    latency: Duration,
) -> anyhow::Result<(Devnet, Vec<U256>)> {
    let dev = Devnet::start().await?;
    let mut agents = vec![];
    for i in 0..3 {
        let b = AgentBehaviour {
            name: format!("w{i}"),
            determination: DeterminationMode::Yes,
            confidence: Some(0.8),
            latency,
            failure: None,
        };
        let url = cresolver_devnet::agent::spawn("127.0.0.1:0", b).await?.0;
        let owner = dev.accounts[i + 1];
        agents.push(
            dev.register_agent(owner, Some(dev.registration_uri("w", owner, &url)))
                .await?,
        );
    }
    let mut ids = vec![];
    for _ in 0..markets {
        let id = dev
            .create_market(question, parse_ether("1")?, 86_400)
            .await?;
        for (i, a) in agents.iter().enumerate() {
            dev.join(id, dev.accounts[i + 1], a.agent_id, parse_ether("0.01")?)
                .await?;
        }
        ids.push(id);
    }
    Ok((dev, ids))
}

/// A node running in this process until `stop` is sent.
pub struct Running {
    pub node: Arc<Node>,
    pub dir: std::path::PathBuf,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), cresolver_node::NodeError>>,
}

impl Running {
    /// Ends the node at once, as `kill -9` would for its rounds: nothing is drained or
    /// released (its leases expire).
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts a node on `dev`'s market through `rpc_url`, polling every `poll_ms`.
pub async fn start_node(
    dev: &Devnet,
    tag: &str,
    rpc_url: String,
    poll_ms: u64,
) -> anyhow::Result<Running> {
    start_node_with(dev, tag, rpc_url, poll_ms, |_| {}).await
}

/// [`start_node`] with `edit` applied to its config (a shared store, a node id).
pub async fn start_node_with(
    dev: &Devnet,
    tag: &str,
    rpc_url: String,
    poll_ms: u64,
    edit: impl FnOnce(&mut NodeConfig),
) -> anyhow::Result<Running> {
    let dir = std::env::temp_dir().join(format!("cresolver-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let wf = dir.join("wf.toml");
    std::fs::write(&wf, cresolver_devnet::demo::DEFAULT_WORKFLOW)?;
    let mut cfg = NodeConfig::default();
    cfg.chain.rpc_url = rpc_url;
    cfg.chain.market_address = Some(dev.contracts.market);
    cfg.chain.multicall_address = Some(dev.contracts.multicall);
    cfg.chain.poll_interval = std::time::Duration::from_millis(poll_ms);
    cfg.node.data_dir = dir.join("data");
    cfg.node.workflows = vec![wf];
    cfg.discovery.allow_private_endpoints = true;
    cfg.api.listen = String::new();
    edit(&mut cfg);
    let node = Node::build(cfg, dev.signers.first().cloned()).await?;
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(node.clone().run(
        async move {
            let _ = rx.await;
        },
        Duration::from_secs(5),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(Running {
        node,
        dir,
        stop,
        task,
    })
}

/// Requests every market of `ids` in one block (automine off, then one block mined,
/// automine back on); returns when that block was mined.
pub async fn request_in_one_block(
    dev: &Devnet,
    ids: &[U256],
) -> anyhow::Result<std::time::Instant> {
    use alloy::providers::ext::AnvilApi;
    dev.provider.anvil_set_auto_mine(false).await?;
    for id in ids {
        let _ = dev
            .market()
            .requestResolution(*id)
            .from(dev.requester())
            .send()
            .await?;
    }
    dev.provider.evm_mine(None).await?;
    let t0 = std::time::Instant::now();
    dev.provider.anvil_set_auto_mine(true).await?;
    Ok(t0)
}

/// Waits until every market of `ids` has a final round on `node`'s store, then checks
/// that each was confirmed (not failed or skipped); a round that ends otherwise fails
/// the wait at once. The wait looks at the store with one count by state every 5 ms,
/// not a read of each round: a round read carries its transcript, and reading 100 of
/// them every 5 ms is load of the bench's own that would be measured with the node's
/// (on PostgreSQL it was about 15 full-row reads per market per burst). The store must
/// hold only these markets' rounds (each bench run starts a fresh one).
pub async fn wait_all_confirmed(
    node: &Node,
    market: alloy::primitives::Address,
    ids: &[U256],
    t0: std::time::Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    loop {
        let (mut finals, mut unconfirmed) = (0u64, 0u64);
        for (state, n) in node.store.count_by_state().await? {
            if state.is_final() {
                finals += n;
                if !state.is_confirmed() {
                    unconfirmed += n;
                }
            }
        }
        anyhow::ensure!(
            t0.elapsed() < timeout,
            "timeout: {finals} of {} rounds final",
            ids.len()
        );
        if finals >= ids.len() as u64 || unconfirmed > 0 {
            let mut pending = false;
            let mut failed = Vec::new();
            for id in ids {
                let r = node.report(RoundKey::new(market, *id)).await?;
                if !r.state.is_final() || r.reason.as_deref() == Some("no such round") {
                    pending = true;
                } else if !r.state.is_confirmed() {
                    failed.push((*id, r.state, r.reason));
                }
            }
            anyhow::ensure!(failed.is_empty(), "rounds not confirmed: {failed:?}");
            if !pending {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Each round step's wall times (the node's `cresolver::step` spans), by step name, and
/// when each market's round concluded.
pub mod steps {
    use parking_lot::Mutex;
    use std::collections::BTreeMap;
    use std::time::Instant;
    use tracing::span::{Attributes, Id};
    use tracing::{Subscriber, field::Field};
    use tracing_subscriber::layer::{Context, Layer};
    use tracing_subscriber::registry::LookupSpan;

    /// Every closed step span: what every figure here is taken from.
    static SPANS: Mutex<Vec<Closed>> = Mutex::new(Vec::new());

    struct Closed {
        step: &'static str,
        market_id: String,
        start: Instant,
        end: Instant,
    }

    struct Started {
        step: &'static str,
        market_id: String,
        at: Instant,
    }

    fn spans() -> parking_lot::MutexGuard<'static, Vec<Closed>> {
        SPANS.lock()
    }

    /// Records every closed `cresolver::step` span: its `step` and `market_id` fields,
    /// when it started and when it closed.
    pub struct StepTimes;

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for StepTimes {
        fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
            if attrs.metadata().target() != "cresolver::step" {
                return;
            }
            let (step, market_id) = fields(attrs);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(Started {
                    step,
                    market_id,
                    at: Instant::now(),
                });
            }
        }

        fn on_close(&self, id: Id, ctx: Context<'_, S>) {
            let Some(span) = ctx.span(&id) else { return };
            let Some(started) = span.extensions_mut().remove::<Started>() else {
                return;
            };
            spans().push(Closed {
                step: started.step,
                market_id: started.market_id,
                start: started.at,
                end: Instant::now(),
            });
        }
    }

    /// The `step` field's value, interned (the node's steps are a handful of names), and
    /// the `market_id` field's.
    fn fields(attrs: &Attributes<'_>) -> (&'static str, String) {
        #[derive(Default)]
        struct V(String, String);
        impl tracing::field::Visit for V {
            fn record_str(&mut self, f: &Field, v: &str) {
                self.record_debug(f, &v);
            }
            fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
                let text = format!("{v:?}").trim_matches('"').to_string();
                match f.name() {
                    "step" => self.0 = text,
                    "market_id" => self.1 = text,
                    _ => {}
                }
            }
        }
        let mut v = V::default();
        attrs.record(&mut v);
        static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
        let mut names = NAMES.lock();
        let name = match names.iter().find(|n| **n == v.0) {
            Some(n) => *n,
            None => {
                let leaked: &'static str = Box::leak(v.0.into_boxed_str());
                names.push(leaked);
                leaked
            }
        };
        (name, v.1)
    }

    /// Installs the recorder as the global subscriber (only `cresolver::step` spans).
    pub fn install() {
        use tracing_subscriber::prelude::*;
        let only_steps = tracing_subscriber::filter::Targets::new()
            .with_target("cresolver::step", tracing::Level::DEBUG);
        let _ = tracing_subscriber::registry()
            .with(StepTimes.with_filter(only_steps))
            .try_init();
    }

    /// When the round of `market_id` concluded (its last `conclude` step ended), if it did.
    pub fn concluded(market_id: &str) -> Option<Instant> {
        spans()
            .iter()
            .filter(|c| c.step == "conclude" && c.market_id == market_id)
            .map(|c| c.end)
            .max()
    }

    /// Takes what was recorded so far: per step, (count, median, p90, sum) in ms.
    pub fn take() -> Vec<(&'static str, usize, f64, f64, f64)> {
        let mut by_step: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
        for c in std::mem::take(&mut *spans()) {
            let ms = (c.end - c.start).as_secs_f64() * 1000.0;
            by_step.entry(c.step).or_default().push(ms);
        }
        by_step
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_by(|a, b| a.total_cmp(b));
                let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
                (k, v.len(), at(0.5), at(0.9), v.iter().sum())
            })
            .collect()
    }

    /// The steps that started in `[from, to]`, as (step, start, end) in ms after `from`,
    /// in the order they started (for markets driven one at a time).
    pub fn timeline(from: Instant, to: Instant) -> Vec<(&'static str, f64, f64)> {
        let ms = |t: Instant| t.saturating_duration_since(from).as_secs_f64() * 1000.0;
        let mut v: Vec<_> = spans()
            .iter()
            .filter(|c| c.start >= from && c.start <= to)
            .map(|c| (c.step, ms(c.start), ms(c.end)))
            .collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        v
    }
}
