//! Node bench: event → confirmed resolution latency on anvil (instant reference workers,
//! rubric evaluator, http polling at 50 ms vs. a ws subscription), and the idle RSS of a
//! `cresolver node` process. Run: `cargo bench --bench node`.

/// The binary's allocator, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use alloy::providers::Provider;
use cresolver_devnet::Devnet;
use cresolver_store::RoundKey;
use cresolver_store::Stage;
use std::time::{Duration, Instant};

mod common;

const MARKETS: usize = 30;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Milliseconds from the request to: the round recorded, the transaction submitted (both
/// seen by the bench's 5 ms poll), confirmed (the end of the node's `conclude` step), and
/// confirmed as the poll saw it.
struct Split {
    seen: f64,
    submitted: f64,
    confirmed: f64,
    polled: f64,
    /// each step's first start and last end, in ms after the request
    timeline: std::collections::BTreeMap<&'static str, (f64, f64)>,
}

async fn latency(ws: bool) -> anyhow::Result<Vec<Split>> {
    let (dev, ids) = common::devnet_with_markets(MARKETS, "bench?").await?;
    let rpc = if ws { dev.ws_endpoint() } else { dev.rpc_url() };
    let r = common::start_node(
        &dev,
        &format!("node-{ws}"),
        rpc,
        if ws { 1_000 } else { 50 },
    )
    .await?;
    let node = r.node.clone();
    let mut out = vec![];
    // The requester's nonce, gas and fees are set before the clock starts, so that
    // sending is one `eth_sendRawTransaction`: the
    // clock measures the node from the event, not the client's own reads.
    let mut nonce = dev.provider.get_transaction_count(dev.requester()).await?;
    let max_fee = dev.provider.get_gas_price().await?.saturating_mul(4);
    let market = dev.market();
    for id in ids {
        let call = market
            .requestResolution(id)
            .from(dev.requester())
            .nonce(nonce)
            .gas(300_000)
            .max_fee_per_gas(max_fee)
            .max_priority_fee_per_gas(1);
        nonce += 1;
        let t0 = Instant::now();
        // Send without waiting for the receipt.
        let _pending = call.send().await?;
        let (mut seen, mut submitted) = (None, None);
        let mut states: Vec<(&'static str, f64)> = vec![];
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
        loop {
            let r = node.report(RoundKey::new(dev.contracts.market, id)).await?;
            if r.reason.as_deref() != Some("no such round") {
                seen.get_or_insert_with(|| ms(t0));
                if states.last().is_none_or(|(s, _)| *s != r.state.as_str()) {
                    states.push((r.state.as_str(), ms(t0)));
                }
            }
            if r.state == Stage::Submitted || r.state.is_confirmed() {
                submitted.get_or_insert_with(|| ms(t0));
            }
            if r.state.is_confirmed() {
                break;
            }
            anyhow::ensure!(
                !r.state.is_final() || r.reason.as_deref() == Some("no such round"),
                "round failed: {:?}",
                r.reason
            );
            anyhow::ensure!(t0.elapsed() < Duration::from_secs(30), "timeout");
            // every 5 ms: each look reads and parses the round's transcript, work that
            // competes with the node for the same 2 cores
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let polled = ms(t0);
        // the node's own record of when the round concluded (its `conclude` step's end),
        // free of the poll's period
        let concluded = common::steps::concluded(&id.to_string());
        let confirmed = concluded
            .map(|t| (t - t0).as_secs_f64() * 1000.0)
            .unwrap_or(polled);
        let mut timeline = std::collections::BTreeMap::new();
        for (step, start, end) in common::steps::timeline(t0, concluded.unwrap_or(t0)) {
            let e = timeline.entry(step).or_insert((start, end));
            e.1 = e.1.max(end);
        }
        if std::env::var_os("BENCH_STATES").is_some() {
            eprintln!("ws={ws} {states:?}");
        }
        out.push(Split {
            seen: seen.unwrap_or(confirmed),
            submitted: submitted.unwrap_or(confirmed),
            confirmed,
            polled,
            timeline,
        });
    }
    r.stop().await;
    Ok(out)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

async fn idle_rss() -> anyhow::Result<u64> {
    let dev = Devnet::start().await?;
    let dir = std::env::temp_dir().join(format!("cresolver-bench-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let wf = dir.join("wf.toml");
    std::fs::write(&wf, cresolver_devnet::demo::DEFAULT_WORKFLOW)?;
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_cresolver"));
    let mut child = tokio::process::Command::new(exe)
        .args([
            "node",
            "--rpc-url",
            &dev.rpc_url(),
            "--market-address",
            &dev.contracts.market.to_string(),
        ])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--workflow")
        .arg(&wf)
        .env(
            "CRESOLVER_PRIVATE_KEY",
            alloy::hex::encode(dev.signers[0].to_bytes()),
        )
        .env("CRESOLVER__API__LISTEN", "127.0.0.1:0")
        .env("CRESOLVER_LOG", "warn")
        .kill_on_drop(true)
        .spawn()?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = child.id().unwrap_or(0);
    let rss = rss_kib(pid).unwrap_or(0);
    child.kill().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rss)
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let mut table = String::from("| measurement | value |\n|---|---|\n");
        common::steps::install();
        for ws in [false, true] {
            let _ = common::steps::take();
            let v = latency(ws).await?;
            let steps = common::steps::take();
            let label = if ws { "ws subscription" } else { "http polling every 50 ms" };
            let mut c: Vec<f64> = v.iter().map(|s| s.confirmed).collect();
            let mut seen: Vec<f64> = v.iter().map(|s| s.seen).collect();
            let mut sub: Vec<f64> = v.iter().map(|s| s.submitted).collect();
            let mut polled: Vec<f64> = v.iter().map(|s| s.polled).collect();
            table.push_str(&format!(
                "| event → confirmed, {label} ({MARKETS} markets, 3 instant workers, rubric) | median {:.0} ms, p90 {:.0} ms, max {:.0} ms (median to round seen {:.0} ms, to submitted {:.0} ms, as the 5 ms poll saw the confirmation {:.0} ms) |\n",
                pct(&mut c, 0.5),
                pct(&mut c, 0.9),
                pct(&mut c, 1.0),
                pct(&mut seen, 0.5),
                pct(&mut sub, 0.5),
                pct(&mut polled, 0.5),
            ));
            // the median start and end of each step after the request, in the order of
            // their starts: where the time between the steps goes
            let mut names: Vec<&'static str> =
                v.iter().flat_map(|s| s.timeline.keys().copied()).collect();
            names.sort_unstable();
            names.dedup();
            let mut line: Vec<(f64, String)> = names
                .into_iter()
                .map(|n| {
                    let mut a: Vec<f64> = v.iter().filter_map(|s| s.timeline.get(n).map(|x| x.0)).collect();
                    let mut b: Vec<f64> = v.iter().filter_map(|s| s.timeline.get(n).map(|x| x.1)).collect();
                    let (a, b) = (pct(&mut a, 0.5), pct(&mut b, 0.5));
                    (a, format!("`{n}` {a:.1}–{b:.1}"))
                })
                .collect();
            line.sort_by(|x, y| x.0.total_cmp(&y.0));
            let line: Vec<String> = line.into_iter().map(|x| x.1).collect();
            table.push_str(&format!(
                "| … timeline ({label}): median start–end of each step, ms after the request | {} |\n",
                line.join(", ")
            ));
            for (step, n, p50, p90, sum) in steps {
                table.push_str(&format!(
                    "| … step `{step}` ({label}, {n} spans) | median {p50:.2} ms, p90 {p90:.2} ms, {:.2} ms per market |\n",
                    sum / MARKETS as f64
                ));
            }
        }
        let rss = idle_rss().await?;
        table.push_str(&format!("| idle `cresolver node` RSS (after 5 s, release build) | {:.1} MiB |\n", rss as f64 / 1024.0));
        println!("{table}");
        let _ = std::fs::write(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-node.md"), &table);
        anyhow::Ok(())
    })
}
