//! The node outlives its RPC: a TCP proxy between a real node and anvil refuses or
//! blackholes traffic while markets are requested (directly on anvil); every market is
//! resolved exactly once within seconds of the restore, and `/health/ready` tells the
//! truth while it lasts. With several endpoints the node fails over, returns to the
//! primary, and never reads from one that lags; a websocket cut past alloy's reconnect
//! budget is rebuilt; a round cut off mid-way completes after the restore.
//!
//! These tests mostly wait (outages of 60 and 90 s), so they are `#[ignore]`d for a
//! plain `cargo test` and `scripts/test.sh` runs them beside every other test binary
//! (`cargo test --test rpc_outage -- --ignored` runs them alone).

mod common;

use alloy::primitives::U256;
use common::chain::*;
use common::node::*;
use common::proxy::{self, Mode};
use common::*;
use cresolver_devnet::agent::DeterminationMode;
use cresolver_store::RoundKey;
use cresolver_store::Stage;
use std::time::{Duration, Instant};

async fn setup(extra_markets: usize) -> (MarketSetup, Vec<U256>) {
    let s = market_with_three_workers().await;
    let mut ids = vec![s.market_id];
    ids.extend(more_markets(&s, extra_markets).await);
    (s, ids)
}

/// Waits until every market's round is confirmed; returns when that happened.
async fn all_confirmed(r: &Running, s: &MarketSetup, ids: &[U256], within: Duration) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        let mut done = true;
        for id in ids {
            let rep = r
                .node
                .report(RoundKey::new(s.dev.contracts.market, *id))
                .await
                .unwrap();
            assert!(
                rep.state == Stage::Confirmed
                    || !rep.state.is_final()
                    || rep.reason.as_deref() == Some("no such round"),
                "{rep:?}"
            );
            done &= rep.state == Stage::Confirmed;
        }
        if done {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "not all confirmed in {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `/health` satisfies `cond` (panics with the last body after `within`).
async fn health_until(
    port: u16,
    within: Duration,
    what: &str,
    cond: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/health")).await
            && let Ok(h) = resp.json::<serde_json::Value>().await
        {
            if cond(&h) {
                return h;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}: {h}"
            );
        } else {
            assert!(Instant::now() < deadline, "{what}: the API never answered");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether endpoint `i` of a `/health` body serves reads.
fn reads_from(h: &serde_json::Value, i: usize) -> bool {
    h["endpoints"][i]["reads"] == serde_json::Value::Bool(true)
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
#[ignore = "waits out outages of up to 90 s: scripts/test.sh runs it beside the other tests (cargo test --test rpc_outage -- --ignored)"]
async fn refused_for_60s_markets_requested_meanwhile_resolve_within_5s_of_the_restore() {
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
    tokio::time::sleep(Duration::from_secs(57)).await;
    assert!(head_age(&r) > age1, "the head age grows during the outage");
    for id in &ids {
        assert_ne!(
            r.node
                .report(RoundKey::new(s.dev.contracts.market, *id))
                .await
                .unwrap()
                .state,
            Stage::Confirmed
        );
    }
    let restored = Instant::now();
    px.set(Mode::Pass);
    let done = all_confirmed(&r, &s, &ids, Duration::from_secs(30)).await;
    let took = done - restored;
    // the figure the README quotes (run with --nocapture)
    eprintln!("60 s refusal: restore → 3 markets confirmed in {took:?}");
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
#[ignore = "waits out outages of up to 90 s: scripts/test.sh runs it beside the other tests (cargo test --test rpc_outage -- --ignored)"]
async fn a_blackholed_rpc_blocks_nothing_for_good() {
    let (s, ids) = setup(1).await;
    let px = proxy::start(&s.dev.rpc_url()).await;
    let dir = tmpdir("blackhole");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.rpc_url = px.url.clone();
    cfg.chain.rpc_timeout = Duration::from_secs(2);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits out outages of up to 90 s: scripts/test.sh runs it beside the other tests (cargo test --test rpc_outage -- --ignored)"]
async fn two_endpoints_fail_over_and_return_to_the_primary() {
    let (s, ids) = setup(3).await;
    let a = proxy::start(&s.dev.rpc_url()).await;
    let b = proxy::start(&s.dev.rpc_url()).await;
    let dir = tmpdir("failover");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.rpc_urls = vec![a.url.clone(), b.url.clone()];
    cfg.chain.rpc_timeout = Duration::from_secs(1);
    let port = free_port();
    cfg.api.listen = format!("127.0.0.1:{port}");
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let secs = Duration::from_secs;
    health_until(port, secs(10), "reads from the primary", |h| {
        reads_from(h, 0)
    })
    .await;

    // the primary refuses: reads and broadcasts go to the second endpoint
    a.set(Mode::Refuse);
    for id in &ids[..2] {
        s.dev.request_resolution(*id).await.unwrap();
    }
    all_confirmed(&r, &s, &ids[..2], secs(15)).await;
    let h = health_until(port, secs(5), "primary out", |h| {
        h["endpoints"][0]["in_service"] == false && reads_from(h, 1)
    })
    .await;
    assert_eq!(h["status"], "degraded", "{h}");
    let ready = reqwest::get(format!("http://127.0.0.1:{port}/health/ready"))
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 200, "one endpoint serves: ready");

    // it is back: reads return to it
    a.set(Mode::Pass);
    health_until(port, secs(5), "back on the primary", |h| reads_from(h, 0)).await;

    // the primary accepts and never answers: the deadline moves the calls on
    a.set(Mode::Blackhole);
    s.dev.request_resolution(ids[2]).await.unwrap();
    all_confirmed(&r, &s, &ids[..3], secs(20)).await;
    a.set(Mode::Pass);
    let h = health_until(port, secs(5), "back on the primary after the stall", |h| {
        reads_from(h, 0)
    })
    .await;
    assert_eq!(h["status"], "ok", "{h}");
    s.dev.request_resolution(ids[3]).await.unwrap();
    all_confirmed(&r, &s, &ids, secs(10)).await;
    r.stop().await;
    assert_eq!(
        resolved_events(&s).await.len(),
        ids.len(),
        "each exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits out outages of up to 90 s: scripts/test.sh runs it beside the other tests (cargo test --test rpc_outage -- --ignored)"]
async fn an_endpoint_that_lags_is_not_used_for_reads() {
    let (s, ids) = setup(0).await;
    // another chain 31337 that stays at block 0: far behind the market's anvil
    let behind = alloy::node_bindings::Anvil::at(cresolver_devnet::anvil_path().unwrap())
        .try_spawn()
        .unwrap();
    let dir = tmpdir("lagging");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    // listed first: it would be preferred if it were not behind
    cfg.chain.rpc_urls = vec![behind.endpoint(), s.dev.rpc_url()];
    let port = free_port();
    cfg.api.listen = format!("127.0.0.1:{port}");
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let h = health_until(port, Duration::from_secs(10), "lagging endpoint out", |h| {
        reads_from(h, 1)
    })
    .await;
    assert_eq!(h["endpoints"][0]["in_service"], false, "{h}");
    assert!(
        h["endpoints"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("trails the best head"),
        "{h}"
    );
    // the market only exists on the endpoint in service: reading it from the other
    // would fail the round
    s.dev.request_resolution(ids[0]).await.unwrap();
    all_confirmed(&r, &s, &ids, Duration::from_secs(15)).await;
    r.stop().await;
    assert_eq!(resolved_events(&s).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits out outages of up to 90 s: scripts/test.sh runs it beside the other tests (cargo test --test rpc_outage -- --ignored)"]
async fn a_websocket_cut_past_the_reconnect_budget_is_rebuilt() {
    let (s, ids) = setup(1).await;
    let px = proxy::start(&s.dev.rpc_url()).await;
    let dir = tmpdir("ws-cut");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.rpc_url = px.url.replace("http://", "ws://");
    // alloy's own budget: 2 reconnections 300 ms apart, spent well within the cut
    cfg.chain.ws_reconnect_attempts = 2;
    cfg.chain.ws_retry_interval = Duration::from_millis(300);
    cfg.chain.rpc_timeout = Duration::from_secs(1);
    // polling alone would take a minute: the wake-up has to come from the subscription
    cfg.chain.poll_interval = Duration::from_secs(60);
    cfg.chain.max_backoff = Duration::from_secs(2);
    let r = start(cfg, s.dev.signers[0].clone()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    px.set(Mode::Refuse);
    s.dev.request_resolution(ids[0]).await.unwrap();
    tokio::time::sleep(Duration::from_secs(15)).await;
    let restored = Instant::now();
    px.set(Mode::Pass);
    let done = all_confirmed(&r, &s, &ids[..1], Duration::from_secs(30)).await;
    assert!(
        done - restored < Duration::from_secs(5),
        "the market requested during the cut resolved {:?} after the restore",
        done - restored
    );
    let t0 = Instant::now();
    s.dev.request_resolution(ids[1]).await.unwrap();
    all_confirmed(&r, &s, &ids, Duration::from_secs(30)).await;
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "a market requested after the restore resolved in {:?}",
        t0.elapsed()
    );
    r.stop().await;
    assert_eq!(resolved_events(&s).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits out outages of up to 90 s: scripts/test.sh runs it beside the other tests (cargo test --test rpc_outage -- --ignored)"]
async fn a_round_cut_off_for_90s_completes_after_the_restore() {
    // slow workers: the round is still asking them when the RPC goes away
    let mut uris = vec![];
    for (det, conf) in [
        (DeterminationMode::Yes, 0.9),
        (DeterminationMode::Yes, 0.8),
        (DeterminationMode::No, 0.6),
    ] {
        let mut b = behaviour(det, conf);
        b.latency = Duration::from_secs(3);
        uris.push(AgentUri::Endpoint(agent(b).await));
    }
    let s = market_with_workers(uris).await;
    let px = proxy::start(&s.dev.rpc_url()).await;
    let dir = tmpdir("mid-round");
    let wf = workflow_file(&dir, |t| t);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = node_process_with(
        &s,
        &dir,
        &wf,
        None,
        &[
            ("CRESOLVER__CHAIN__RPC_URL", &px.url),
            ("CRESOLVER__CHAIN__RPC_TIMEOUT_MS", "2000"),
            ("CRESOLVER__API__LISTEN", &listen),
        ],
    );
    health_until(port, Duration::from_secs(20), "node up", |h| {
        h["status"] == "ok"
    })
    .await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    // the round's state, from the node's API
    let id = s.market_id.to_string();
    let state = || {
        let url = format!("http://127.0.0.1:{port}/rounds/{id}");
        async move {
            let v: serde_json::Value = reqwest::get(url).await.ok()?.json().await.ok()?;
            v["state"].as_str().map(String::from)
        }
    };
    let is =
        |st: &Option<String>, names: &[&str]| st.as_deref().is_some_and(|x| names.contains(&x));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = state().await;
        if is(&st, &["discovered", "answered"]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the round never reached the workers: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    px.set(Mode::Refuse);
    tokio::time::sleep(Duration::from_secs(90)).await;
    let st = state().await;
    assert!(!is(&st, &["confirmed", "failed", "skipped"]), "{st:?}");
    px.set(Mode::Pass);
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let st = state().await;
        if is(&st, &["confirmed"]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not confirmed after the restore: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    child.kill().await.unwrap();
    assert_eq!(resolved_events(&s).await.len(), 1);
    let log = std::fs::read_to_string(dir.join("node.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("round paused on a transient error")
                && l.contains(&s.market_id.to_string())
                && (l.contains("refused")
                    || l.contains("out of service")
                    || l.contains("timed out")
                    || l.contains("connect"))),
        "the log says why the round waited:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits out outages of up to 90 s: scripts/test.sh runs it beside the other tests (cargo test --test rpc_outage -- --ignored)"]
async fn shutdown_ends_a_retry_that_waits_and_leaves_nothing_behind() {
    let (s, ids) = setup(0).await;
    let px = proxy::start(&s.dev.rpc_url()).await;
    let dir = tmpdir("shutdown-retry");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.rpc_url = px.url.clone();
    let r = start(cfg, s.dev.signers[0].clone()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    px.set(Mode::Refuse);
    let m = s.dev.contracts.market;
    r.node.request(ids[0].into()).await.unwrap();
    // the round cannot read the market: it pauses with a retry scheduled
    let rep = r.node.run_round(RoundKey::new(m, ids[0])).await.unwrap();
    assert!(!rep.state.is_final(), "{rep:?}");
    let stopping = Instant::now();
    r.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(3),
        "shutdown waited {:?} for a retry that had not started",
        stopping.elapsed()
    );
    // with the RPC back, nothing of the stopped node acts any more
    px.set(Mode::Pass);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        resolved_events(&s).await.is_empty(),
        "a retry ran after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "waits out outages of up to 90 s: scripts/test.sh runs it beside the other tests (cargo test --test rpc_outage -- --ignored)"]
async fn the_new_heads_subscription_is_rebuilt_after_a_cut() {
    let s = market_with_three_workers().await;
    let px = proxy::start(&s.dev.rpc_url()).await;
    let dir = tmpdir("push-rebuild");
    let wf = workflow_file(&dir, |t| t);
    let ws = px.url.replace("http://", "ws://");
    let mut child = node_process_with(
        &s,
        &dir,
        &wf,
        None,
        &[
            ("CRESOLVER__CHAIN__RPC_URL", &ws),
            ("CRESOLVER__CHAIN__WS_RECONNECT_ATTEMPTS", "1"),
            ("CRESOLVER__CHAIN__WS_RETRY_INTERVAL_MS", "200"),
            ("CRESOLVER__CHAIN__RPC_TIMEOUT_MS", "1000"),
            ("CRESOLVER_LOG", "info"),
        ],
    );
    let log = || std::fs::read_to_string(dir.join("node.log")).unwrap_or_default();
    let subscribed = || log().matches("subscribed to new heads").count();
    let wait_for = |n: usize, what: &'static str| async move {
        let deadline = Instant::now() + Duration::from_secs(20);
        while subscribed() < n {
            assert!(Instant::now() < deadline, "{what}:\n{}", log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    wait_for(1, "never subscribed").await;
    px.set(Mode::Refuse);
    tokio::time::sleep(Duration::from_secs(5)).await;
    px.set(Mode::Pass);
    wait_for(2, "the subscription was not rebuilt after the cut").await;
    child.kill().await.unwrap();
    assert!(log().contains("head subscription ended"), "{}", log());
}
