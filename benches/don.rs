//! DON bench: request → resolved on chain for a 4-member DON (f = 1) and a 7-member DON
//! (f = 2) — in-process members, each with its own key, store and member endpoint, running
//! the Tendermint consensus and delivering through the production KeystoneForwarder —
//! against one node on the same stack (report mode through the devnet's unsigned
//! forwarder), over the same instant reference workers, websocket heads; and the messages
//! members send per execution. Markets are requested one after another.
//! Run: `cargo bench --bench don`.

/// The binary's allocator, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use cresolver_devnet::Devnet;
use cresolver_don::{DonConfig, MemberConfig};
use cresolver_node::Node;
use cresolver_pipeline::config::NodeConfig;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

const MARKETS: usize = 15;

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
    cfg.chain.poll_interval_ms = 1_000;
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

/// Milliseconds from each request to the market's resolution on chain, and the DON
/// messages sent per execution (`n` members, f = (n - 1) / 3; 0: one node).
async fn latency(n: usize) -> anyhow::Result<(Vec<f64>, f64)> {
    let (dev, ids) = common::devnet_with_markets(MARKETS, "bench?").await?;
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
            attempt_timeout_ms: 2_000,
            observation_grace_ms: 200,
            transmit_delay_ms: 2_000,
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
    let market = dev.market();
    let mut out = vec![];
    for id in ids {
        let t0 = Instant::now();
        let _pending = market
            .requestResolution(id)
            .from(dev.requester())
            .send()
            .await?;
        loop {
            if market.getMarket(id).call().await?.resolved {
                break;
            }
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(60),
                "market {id} not resolved in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        out.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let sent: u64 = nodes
        .iter()
        .filter_map(|n| n.don.as_ref())
        .map(|d| d.messages_sent())
        .sum();
    for m in members {
        let _ = m.stop.send(());
        let _ = m.task.await;
    }
    Ok((out, sent as f64 / MARKETS as f64))
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let mut table = String::from(
            "| request → resolved on chain (ws heads, 3 instant workers) | p50 | p90 | max | messages per execution |\n|---|---|---|---|---|\n",
        );
        for n in [0usize, 4, 7] {
            let (mut v, messages) = latency(n).await?;
            let label = match n {
                0 => "one node, report mode through the unsigned forwarder".to_string(),
                n => format!(
                    "{n}-member DON, f = {}, production KeystoneForwarder ({} signatures)",
                    (n - 1) / 3,
                    (n - 1) / 3 + 1
                ),
            };
            let messages = if n == 0 {
                "–".to_string()
            } else {
                format!("{messages:.0}")
            };
            table.push_str(&format!(
                "| {label} | {:.0} ms | {:.0} ms | {:.0} ms | {messages} |\n",
                pct(&mut v, 0.5),
                pct(&mut v, 0.9),
                pct(&mut v, 1.0)
            ));
        }
        println!("{table}");
        let _ = std::fs::write("target/bench-don.md", &table);
        Ok(())
    })
}
