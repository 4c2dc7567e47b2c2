//! DON bench: request → resolved on chain for a 4-member DON (f = 1) and a 7-member DON
//! (f = 2) — in-process members, each with its own key, store and member endpoint, running
//! the Tendermint consensus and delivering through the production KeystoneForwarder —
//! against one node on the same stack (report mode through the devnet's unsigned
//! forwarder), over the same instant reference workers, websocket heads; and the messages
//! members send per execution. Markets are requested one after another.
//! Run: `cargo bench --bench don` (`CRESOLVER_BENCH_MEMBERS=0,4` runs some sizes only;
//! `CRESOLVER_BENCH_GRACE_MS` sets the members' `observation_grace`, 200 ms unless set;
//! `RUST_LOG=info,cresolver_don=debug` traces the members to stderr).

/// The binary's allocator, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use alloy::providers::{Provider, ProviderBuilder, WsConnect};
use alloy::rpc::types::Filter;
use alloy::sol_types::SolEvent;
use cresolver_chain::bindings::ICREsolverMarket;
use cresolver_devnet::Devnet;
use cresolver_don::{DonConfig, MemberConfig};
use cresolver_node::Node;
use cresolver_pipeline::config::NodeConfig;
use futures::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

/// Markets per configuration (`CRESOLVER_BENCH_MARKETS` sets another count, e.g. a
/// long run to profile).
fn markets() -> usize {
    std::env::var("CRESOLVER_BENCH_MARKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(15)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

struct Member {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), cresolver_node::NodeError>>,
}

async fn start(
    dev: &Devnet,
    tag: &str,
    signer: alloy::signers::local::PrivateKeySigner,
    edit: impl FnOnce(&mut NodeConfig),
) -> anyhow::Result<(Arc<Node>, Member)> {
    let dir =
        std::env::temp_dir().join(format!("cresolver-bench-don-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let wf = dir.join("wf.toml");
    std::fs::write(
        &wf,
        cresolver_devnet::demo::DEFAULT_WORKFLOW.replace("mode = \"direct\"", "mode = \"report\""),
    )?;
    let mut cfg = NodeConfig::default();
    cfg.chain.rpc_url = dev.ws_endpoint();
    cfg.chain.market_address = Some(dev.contracts.market);
    cfg.chain.multicall_address = Some(dev.contracts.multicall);
    cfg.chain.poll_interval = std::time::Duration::from_secs(1);
    cfg.node.data_dir = dir.join("data");
    cfg.node.workflows = vec![wf];
    cfg.discovery.allow_private_endpoints = true;
    cfg.api.listen = String::new();
    edit(&mut cfg);
    let node = Node::build(cfg, Some(signer)).await?;
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(node.clone().run(
        async move {
            let _ = rx.await;
        },
        Duration::from_secs(5),
    ));
    Ok((node, Member { stop, task }))
}

/// What one configuration measured.
struct Measured {
    /// Milliseconds from each request to the market's resolution on chain.
    latencies: Vec<f64>,
    /// DON messages sent per execution (all members).
    messages: f64,
    /// State-file commits (fsyncs) per execution (all members).
    fsyncs: f64,
    /// CPU milliseconds per execution: the process (all members or the node, and the
    /// in-process workers) and the chain (anvil), from /proc over the markets' loop.
    cpu: (f64, f64),
    /// Median milliseconds per part: the members' own rounds (request → the last
    /// member's consensus start), to the prevote step, the prevote step, the precommit
    /// step, the report signatures, and the transmission (first agreement → resolved).
    parts: [f64; 6],
}

/// CPU time of process `pid` (`"self"` for this one), user and system, in milliseconds:
/// fields 14 and 15 of `/proc/<pid>/stat`, in USER_HZ ticks (100 per second on Linux).
fn cpu_ms(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // the command name (field 2) may hold spaces: count from the closing parenthesis
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // fields after the name start at field 3: utime is field 14, stime 15
    (tick(11) + tick(12)) * 10.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median of each part over the markets (see [`Measured::parts`]).
fn breakdown(nodes: &[Arc<Node>], sent: &[Instant], resolved: &[Instant]) -> [f64; 6] {
    let phases: Vec<Vec<cresolver_don::job::Phases>> = nodes
        .iter()
        .filter_map(|n| n.submission.don())
        .map(|d| d.phases())
        .collect();
    let mut parts: [Vec<f64>; 6] = Default::default();
    for (i, (t0, done)) in sent.iter().zip(resolved).enumerate() {
        let of: Vec<_> = phases.iter().filter_map(|p| p.get(i)).collect();
        let (Some(last_began), Some(first_agreed)) = (
            of.iter().map(|p| p.began).max(),
            of.iter().map(|p| p.agreed).min(),
        ) else {
            continue;
        };
        let avg = |f: &dyn Fn(&cresolver_don::job::Phases) -> Duration| {
            of.iter().map(|p| ms(f(p))).sum::<f64>() / of.len() as f64
        };
        parts[0].push(ms(last_began.saturating_duration_since(*t0)));
        parts[1].push(avg(&|p| p.to_prevote));
        parts[2].push(avg(&|p| p.prevote));
        parts[3].push(avg(&|p| p.precommit));
        parts[4].push(avg(&|p| p.signatures));
        parts[5].push(ms(done.saturating_duration_since(first_agreed)));
    }
    parts.map(|mut v| if v.is_empty() { 0.0 } else { pct(&mut v, 0.5) })
}

/// What the markets' requests measured.
struct Run {
    /// Milliseconds from each request to its resolution on chain.
    latencies: Vec<f64>,
    /// When each request was sent.
    sent_at: Vec<Instant>,
    /// When each resolution was seen.
    resolved_at: Vec<Instant>,
    /// CPU milliseconds per execution: this process and the chain (see [`Measured::cpu`]).
    cpu: (f64, f64),
}

/// Requests the markets one after another, each once the one before is resolved.
async fn requests(dev: &Devnet, ids: Vec<alloy::primitives::U256>) -> anyhow::Result<Run> {
    let market = dev.market();
    // the resolution is seen the moment its block is announced, through a log
    // subscription (polling `getMarket` every 2 ms loaded the chain and the 2 cores the
    // members share)
    let ws = ProviderBuilder::new()
        .connect_ws(WsConnect::new(dev.ws_endpoint()))
        .await?;
    let filter = Filter::new()
        .address(dev.contracts.market)
        .event_signature(ICREsolverMarket::MarketResolved::SIGNATURE_HASH);
    let mut resolutions = ws.subscribe_logs(&filter).await?.into_stream();
    let chain_pid = dev.anvil.child().id().to_string();
    let cpu0 = (cpu_ms("self"), cpu_ms(&chain_pid));
    let (mut latencies, mut sent_at, mut resolved_at) = (vec![], vec![], vec![]);
    for id in ids {
        let t0 = Instant::now();
        sent_at.push(t0);
        let _pending = market
            .requestResolution(id)
            .from(dev.requester())
            .send()
            .await?;
        loop {
            let log = tokio::time::timeout(Duration::from_secs(60), resolutions.next())
                .await
                .map_err(|_| anyhow::anyhow!("market {id} not resolved in 60 s"))?
                .ok_or_else(|| anyhow::anyhow!("the log subscription ended"))?;
            let resolved = log.log_decode::<ICREsolverMarket::MarketResolved>()?;
            if resolved.inner.data.marketId == id {
                break;
            }
        }
        resolved_at.push(Instant::now());
        latencies.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let cpu = (
        (cpu_ms("self") - cpu0.0) / markets() as f64,
        (cpu_ms(&chain_pid) - cpu0.1) / markets() as f64,
    );
    Ok(Run {
        latencies,
        sent_at,
        resolved_at,
        cpu,
    })
}

/// Request → resolved on chain for `n` members, f = (n - 1) / 3 (0: one node).
async fn latency(n: usize) -> anyhow::Result<Measured> {
    let (dev, ids) = common::devnet_with_markets(markets(), "bench?").await?;
    let mut members = vec![];
    let mut nodes = vec![];
    let don = n > 0;
    if don {
        let f = u8::try_from((n - 1) / 3)?;
        let keys: Vec<_> = dev.signers[10..10 + n].to_vec();
        let ports = (0..n)
            .map(|_| free_port())
            .collect::<anyhow::Result<Vec<u16>>>()?;
        let d = DonConfig {
            don_id: 1,
            config_version: 1,
            f,
            listen: String::new(),
            members: keys
                .iter()
                .zip(&ports)
                .map(|(k, p)| {
                    Ok(MemberConfig {
                        address: k.address(),
                        url: format!("http://127.0.0.1:{p}").parse()?,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?,
            attempt_timeout: Duration::from_millis(2_000),
            observation_grace: Duration::from_millis(
                std::env::var("CRESOLVER_BENCH_GRACE_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(200),
            ),
            transmit_delay: Duration::from_millis(2_000),
            max_attempts: 12,
        };
        let forwarder = dev
            .deploy_keystone_forwarder(1, 1, f, d.addresses())
            .await?;
        let receiver = dev.deploy_receiver(forwarder).await?;
        for (i, k) in keys.into_iter().enumerate() {
            let mut d = d.clone();
            d.listen = format!("127.0.0.1:{}", ports[i]);
            let (node, member) = start(&dev, &format!("m{i}"), k, |c| {
                c.submit.forwarder = Some(forwarder);
                c.submit.receiver = Some(receiver);
                c.don = Some(d);
            })
            .await?;
            nodes.push(node);
            members.push(member);
        }
    } else {
        let (f, r) = (dev.contracts.forwarder, dev.contracts.receiver);
        members.push(
            start(&dev, "single", dev.signers[10].clone(), |c| {
                c.submit.forwarder = Some(f);
                c.submit.receiver = Some(r);
            })
            .await?
            .1,
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let run = requests(&dev, ids).await?;
    let dons = || nodes.iter().filter_map(|n| n.submission.don());
    let sent: u64 = dons().map(|d| d.messages_sent()).sum();
    let commits: u64 = dons().map(|d| d.commits().1).sum();
    let parts = breakdown(&nodes, &run.sent_at, &run.resolved_at);
    for m in members {
        let _ = m.stop.send(());
        let _ = m.task.await;
    }
    Ok(Measured {
        latencies: run.latencies,
        messages: sent as f64 / markets() as f64,
        fsyncs: commits as f64 / markets() as f64,
        cpu: run.cpu,
        parts,
    })
}

/// The DON sizes to run: `CRESOLVER_BENCH_MEMBERS=0,4` (0: one node), else 0, 4 and 7.
fn members() -> anyhow::Result<Vec<usize>> {
    match std::env::var("CRESOLVER_BENCH_MEMBERS") {
        Ok(v) => Ok(v
            .split(',')
            .map(|x| x.trim().parse())
            .collect::<Result<Vec<usize>, _>>()?),
        Err(_) => Ok(vec![0, 4, 7]),
    }
}

fn main() -> anyhow::Result<()> {
    if std::env::var("BENCH_TRACE").is_ok() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let mut table = String::from(
            "| request → resolved on chain (ws heads, 3 instant workers) | p50 | p90 | max | × one node | messages per execution | fsyncs per execution | CPU per execution: the process (members or node, workers), the chain |\n|---|---|---|---|---|---|---|---|\n",
        );
        let mut parts = String::from(
            "| median ms per execution | members' own rounds (request → last member's consensus start) | → prevote step | prevote step | precommit step | report signatures | transmission (first agreement → resolved) |\n|---|---|---|---|---|---|---|\n",
        );
        let mut one = f64::NAN;
        for n in members()? {
            let m = latency(n).await?;
            let mut v = m.latencies;
            let label = match n {
                0 => "one node, report mode through the unsigned forwarder".to_string(),
                n => format!(
                    "{n}-member DON, f = {}, production KeystoneForwarder ({} signatures)",
                    (n - 1) / 3,
                    (n - 1) / 3 + 1
                ),
            };
            let (messages, fsyncs) = if n == 0 {
                ("–".to_string(), "–".to_string())
            } else {
                (format!("{:.0}", m.messages), format!("{:.1}", m.fsyncs))
            };
            let p50 = pct(&mut v, 0.5);
            if n == 0 {
                one = p50;
            } else {
                let p = m.parts;
                parts.push_str(&format!(
                    "| {n} members | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
                    p[0], p[1], p[2], p[3], p[4], p[5]
                ));
            }
            table.push_str(&format!(
                "| {label} | {p50:.0} ms | {:.0} ms | {:.0} ms | {:.1}× | {messages} | {fsyncs} | {:.0} ms, {:.0} ms |\n",
                pct(&mut v, 0.9),
                pct(&mut v, 1.0),
                p50 / one,
                m.cpu.0,
                m.cpu.1
            ));
        }
        println!("{table}\n{parts}");
        let _ = std::fs::write("target/bench-don.md", format!("{table}\n{parts}"));
        Ok(())
    })
}
