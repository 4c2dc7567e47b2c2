//! A bounded API: a node process whose store holds 300 rounds with transcripts of about
//! 300 KiB each answers 8 concurrent `GET /rounds?limit=1000` with summaries, and its
//! peak RSS stays within 50 MiB of its idle figure.

use crate::common;

use alloy::primitives::U256;
use common::chain::*;
use common::node::*;
use cresolver_store::RoundKey;
use cresolver_store::{Requests, Rounds, SqliteStore, Stage};
use std::time::{Duration, Instant};

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_300_large_rounds_8_times_at_once_stays_within_50_mib() {
    let s = market_with_workers(vec![]).await;
    let dir = tmpdir("api-memory");
    let wf = workflow_file(&dir, |t| t);
    {
        let store = SqliteStore::open(&dir.join("data")).unwrap();
        let market = s.dev.contracts.market;
        // about 300 KiB of valid text per transcript
        let evidence = "The reference feed reported YES at the close. ".repeat(6_700);
        for i in 0..300u64 {
            let id = U256::from(1_000 + i);
            store
                .manual_request(RoundKey::new(market, id), "cresolver-resolution")
                .await
                .unwrap();
            let transcript = serde_json::json!({
                "version": 2,
                "answers": [{ "worker": format!("w{i}"), "evidence": evidence }],
            });
            store
                .set_outcome(RoundKey::new(market, id), &transcript)
                .await
                .unwrap();
            store
                .set_state(RoundKey::new(market, id), Stage::Confirmed, None)
                .await
                .unwrap();
        }
    }
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let child = node_process_with(&s, &dir, &wf, None, &[("CRESOLVER__API__LISTEN", &listen)]);
    let pid = child.id().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while reqwest::get(format!("{base}/health/live")).await.is_err() {
        assert!(Instant::now() < deadline, "the node never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = status_kib(pid, "VmRSS:");

    let lists = (0..8).map(|_| {
        let url = format!("{base}/rounds?limit=1000");
        async move {
            let body = reqwest::get(url).await.unwrap().bytes().await.unwrap();
            let rounds: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
            (rounds.len(), body.len(), rounds)
        }
    });
    for (n, bytes, rounds) in futures::future::join_all(lists).await {
        assert_eq!(n, 300);
        assert!(
            rounds.iter().all(|r| r.get("outcome").is_none()),
            "summaries carry no transcript"
        );
        assert!(bytes < 300 * 1024, "a summary list of {bytes} bytes");
    }
    // one transcript is fetched per round
    let one: serde_json::Value = reqwest::get(format!("{base}/rounds/1000"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        one.to_string().len() > 300_000,
        "the round has its transcript"
    );

    let peak = status_kib(pid, "VmHWM:");
    drop(child);
    assert!(
        peak.saturating_sub(idle) < 50 * 1024,
        "peak RSS {} MiB against {} MiB idle",
        peak / 1024,
        idle / 1024
    );
}
