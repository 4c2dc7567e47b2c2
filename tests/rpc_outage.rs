//! The node outlives its RPC: a TCP proxy between a real node and anvil refuses or
//! blackholes traffic while markets are requested (directly on anvil); every market is
//! resolved exactly once within seconds of the restore, and `/health/ready` tells the
//! truth while it lasts.

mod common;

use alloy::primitives::U256;
use common::chain::*;
use common::node::*;
use common::proxy::{self, Mode};
use common::*;
use cresolver::store::RoundState;
use std::time::{Duration, Instant};

async fn setup(extra_markets: usize) -> (MarketSetup, Vec<U256>) {
    let s = market_with_three_workers().await;
    let mut ids = vec![s.market_id];
    ids.extend(more_markets(&s, extra_markets).await);
    (s, ids)
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Waits until every market's round is confirmed; returns when that happened.
async fn all_confirmed(r: &Running, s: &MarketSetup, ids: &[U256], within: Duration) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        let mut done = true;
        for id in ids {
            let rep = r.node.report(s.dev.contracts.market, *id).unwrap();
            assert!(
                rep.state == RoundState::Confirmed
                    || !rep.state.is_final()
                    || rep.reason.as_deref() == Some("no such round"),
                "{rep:?}"
            );
            done &= rep.state == RoundState::Confirmed;
        }
        if done {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "not all confirmed in {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn head_age(r: &Running) -> u64 {
    r.node
        .metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix("cresolver_chain_head_age_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .expect("head age metric")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_for_20s_markets_requested_meanwhile_resolve_within_5s_of_the_restore() {
    let (s, ids) = setup(2).await;
    let px = proxy::start(&s.dev.rpc_url()).await;
    let dir = tmpdir("outage");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.rpc_url = px.url.clone();
    let port = free_port();
    cfg.api.listen = format!("127.0.0.1:{port}");
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let http = reqwest::Client::new();
    let ready = || {
        let http = http.clone();
        async move {
            // 0: the API does not listen yet
            match http
                .get(format!("http://127.0.0.1:{port}/health/ready"))
                .send()
                .await
            {
                Ok(resp) => (resp.status().as_u16(), resp.text().await.unwrap()),
                Err(_) => (0, String::new()),
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while ready().await.0 != 200 {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    px.set(Mode::Refuse);
    for id in &ids {
        s.dev.request_resolution(*id).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (code, body) = ready().await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains(&px.url.replace("http://", "")) && body.contains("out of service"),
        "names the endpoint: {body}"
    );
    let age1 = head_age(&r);
    tokio::time::sleep(Duration::from_secs(17)).await;
    assert!(head_age(&r) > age1, "the head age grows during the outage");
    for id in &ids {
        assert_ne!(
            r.node.report(s.dev.contracts.market, *id).unwrap().state,
            RoundState::Confirmed
        );
    }
    let restored = Instant::now();
    px.set(Mode::Pass);
    let done = all_confirmed(&r, &s, &ids, Duration::from_secs(30)).await;
    let took = done - restored;
    assert!(
        took < Duration::from_secs(5),
        "resolved {took:?} after the restore"
    );
    assert_eq!(ready().await.0, 200);
    r.stop().await;
    assert_eq!(
        resolved_events(&s).await.len(),
        ids.len(),
        "each exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_rpc_blocks_nothing_for_good() {
    let (s, ids) = setup(1).await;
    let px = proxy::start(&s.dev.rpc_url()).await;
    let dir = tmpdir("blackhole");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.rpc_url = px.url.clone();
    cfg.chain.rpc_timeout_ms = 2_000;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    px.set(Mode::Blackhole);
    s.dev.request_resolution(ids[0]).await.unwrap();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let restored = Instant::now();
    px.set(Mode::Pass);
    let done = all_confirmed(&r, &s, &ids[..1], Duration::from_secs(30)).await;
    let took = done - restored;
    assert!(
        took < Duration::from_secs(5),
        "resolved {took:?} after the stall"
    );
    // nothing stayed blocked: the next market resolves normally
    s.dev.request_resolution(ids[1]).await.unwrap();
    all_confirmed(&r, &s, &ids, Duration::from_secs(10)).await;
    r.stop().await;
    assert_eq!(resolved_events(&s).await.len(), 2);
}
