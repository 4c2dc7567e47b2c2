//! End-to-end: a real node (in-process, or the binary where a process must die)
//! against real HTTP workers and the contracts on anvil.

mod common;

use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use common::chain::*;
use common::node::*;
use common::*;
use cresolver_devnet::agent::{AgentBehaviour, DeterminationMode, FailureMode};
use cresolver_store::RoundState;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn good(det: DeterminationMode, conf: f64) -> AgentUriFuture {
    AgentUriFuture(behaviour(det, conf))
}

/// A reference agent to start, then register.
struct AgentUriFuture(AgentBehaviour);

async fn uris(list: Vec<AgentUriFuture>) -> Vec<AgentUri> {
    let mut out = Vec::new();
    for a in list {
        out.push(AgentUri::Endpoint(agent(a.0).await));
    }
    out
}

#[tokio::test]
async fn happy_path_payouts_and_reputation_match_the_tally() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::Yes, 0.9),
            good(DeterminationMode::Yes, 0.7),
            good(DeterminationMode::No, 0.6),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("happy");
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let r = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, RoundState::Confirmed, "{report:?}");
    assert_eq!(report.resolution, Some(true));

    let t = report.transcript.as_ref().unwrap();
    let weights: Vec<u64> = t
        .pointer("/outcome/tally/workers")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["weight"].as_u64().unwrap())
        .collect();
    let total: u64 = weights.iter().sum();
    let m = s.dev.market();
    for (i, w) in s.workers.iter().enumerate() {
        let expected = s.reward * U256::from(weights[i]) / U256::from(total) + s.stake;
        assert_eq!(
            m.balances(*w).call().await.unwrap(),
            expected,
            "payout of worker {i}"
        );
        let rep = m.getReputation(*w).call().await.unwrap();
        let scores = &t.pointer("/outcome/tally/workers").unwrap()[i]["scores"];
        assert_eq!(
            rep.resQuality,
            U256::from(scores["resQuality"].as_u64().unwrap())
        );
        assert_eq!(
            rep.analysisDepth,
            U256::from(scores["analysisDepth"].as_u64().unwrap())
        );
        assert_eq!(rep.count, U256::from(1));
    }
    let events = resolved_events(&s).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].resolver, s.dev.accounts[0]);
    // the report bytes in the transcript decode to what went on chain
    let report_hex = t.pointer("/outcome/report").unwrap().as_str().unwrap();
    let decoded = cresolver_core::decode_report(&alloy::hex::decode(report_hex).unwrap()).unwrap();
    assert_eq!(decoded.workers, s.workers);
    r.stop().await;
}

#[tokio::test]
async fn one_of_three_down_meets_quorum_with_weight_zero() {
    let mut u = uris(vec![
        good(DeterminationMode::Yes, 0.9),
        good(DeterminationMode::No, 0.8),
    ])
    .await;
    u.insert(1, AgentUri::Endpoint(closed_port_url()));
    let s = market_with_workers(u).await;
    let dir = tmpdir("onedown");
    let r = start(
        node_config(&s, &dir, workflow_file(&dir, |t| t)),
        s.dev.signers[0].clone(),
    )
    .await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, RoundState::Confirmed, "{report:?}");
    let w = &report
        .transcript
        .as_ref()
        .unwrap()
        .pointer("/outcome/tally/workers")
        .unwrap()[1];
    assert_eq!(
        (w["responded"].as_bool(), w["weight"].as_u64()),
        (Some(false), Some(0))
    );
    let rep = s
        .dev
        .market()
        .getReputation(s.workers[1])
        .call()
        .await
        .unwrap();
    assert_eq!((rep.resQuality, rep.count), (U256::ZERO, U256::from(1)));
    assert_eq!(
        s.dev.market().balances(s.workers[1]).call().await.unwrap(),
        s.stake,
        "stake returned, no reward"
    );
    r.stop().await;
}

#[tokio::test]
async fn two_of_three_down_fails_with_reason_and_sends_nothing() {
    let u = vec![
        AgentUri::Endpoint(agent(behaviour(DeterminationMode::Yes, 0.9)).await),
        AgentUri::Endpoint(closed_port_url()),
        AgentUri::Endpoint(agent(failing(FailureMode::Garbage)).await),
    ];
    let s = market_with_workers(u).await;
    let dir = tmpdir("twodown");
    let before = nonce(&s, s.dev.accounts[0]).await;
    let r = start(
        node_config(&s, &dir, workflow_file(&dir, |t| t)),
        s.dev.signers[0].clone(),
    )
    .await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, RoundState::Failed);
    let reason = report.reason.unwrap();
    assert!(reason.contains("quorum not met: 1 of 3"), "{reason}");
    assert!(
        reason.contains("connection failed") && reason.contains("invalid JSON"),
        "{reason}"
    );
    // the resolver key sent nothing
    assert_eq!(nonce(&s, s.dev.accounts[0]).await, before);
    assert!(resolved_events(&s).await.is_empty());
    r.stop().await;
}

#[tokio::test]
async fn broken_registrations_are_discarded_with_reason_and_counted_in_n() {
    let mut u = uris(vec![
        good(DeterminationMode::Yes, 0.9),
        good(DeterminationMode::Yes, 0.8),
        good(DeterminationMode::No, 0.7),
        good(DeterminationMode::Yes, 0.6),
    ])
    .await;
    u.push(AgentUri::Raw(
        "data:application/json;base64,!!!not-base64".into(),
    ));
    u.push(AgentUri::Raw(cresolver_devnet::data_uri(
        &cresolver_devnet::registration_json("no-a2a", 31337, Address::ZERO, None),
    )));
    let s = market_with_workers(u).await;
    let dir = tmpdir("broken");
    let r = start(
        node_config(&s, &dir, workflow_file(&dir, |t| t)),
        s.dev.signers[0].clone(),
    )
    .await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, RoundState::Confirmed, "{report:?}");
    let t = report.transcript.unwrap();
    let disc = t["discovery"].as_array().unwrap();
    assert_eq!(disc.len(), 6);
    assert!(
        disc[4]["endpoint"]["Err"]["kind"]
            .as_str()
            .unwrap()
            .contains("metadata")
            || disc[4]["endpoint"]["Err"]["kind"] == "fetch_failed",
        "{}",
        disc[4]
    );
    assert_eq!(disc[5]["endpoint"]["Err"]["kind"], "no_a2a_endpoint");
    let stage = t.pointer("/outcome/resolve").unwrap();
    assert_eq!(
        (stage["registered"].as_u64(), stage["required"].as_u64()),
        (Some(6), Some(4))
    );
    assert_eq!(
        stage["results"][5]["outcome"]["Err"]["kind"],
        "not_discovered"
    );
    r.stop().await;
}

#[tokio::test]
async fn loopback_endpoints_refused_without_allow_private() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::Yes, 0.9),
            good(DeterminationMode::Yes, 0.8),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("private");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.discovery.allow_private_endpoints = false;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, RoundState::Failed);
    let reason = report.reason.unwrap();
    assert!(reason.contains("endpoint refused"), "{reason}");
    assert!(resolved_events(&s).await.is_empty());
    r.stop().await;
}

#[tokio::test]
async fn duplicate_requests_and_requests_while_down_resolve_once() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::No, 0.9),
            good(DeterminationMode::No, 0.8),
            good(DeterminationMode::Yes, 0.5),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("dup");
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    // node up, then down: the requests happen while it is down
    let r = start(cfg.clone(), s.dev.signers[0].clone()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    r.stop().await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    s.dev.request_resolution(s.market_id).await.unwrap();
    let before = nonce(&s, s.dev.accounts[0]).await;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, RoundState::Confirmed, "{report:?}");
    assert_eq!(report.resolution, Some(false));
    // a third request after confirmation changes nothing
    let _ = s.dev.request_resolution(s.market_id).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    r.stop().await;
    assert_eq!(resolved_events(&s).await.len(), 1);
    assert_eq!(
        nonce(&s, s.dev.accounts[0]).await,
        before + 1,
        "exactly one resolveMarket transaction"
    );
}

#[tokio::test]
async fn report_mode_through_forwarder_and_receiver() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::Yes, 0.9),
            good(DeterminationMode::Yes, 0.8),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("report");
    let wf = workflow_file(&dir, |t| {
        t.replace("mode = \"direct\"", "mode = \"report\"")
    });
    let mut cfg = node_config(&s, &dir, wf);
    cfg.submit.forwarder = Some(s.dev.contracts.forwarder);
    cfg.submit.receiver = Some(s.dev.contracts.receiver);
    // a key that is not itself an authorized resolver: the receiver is
    let r = start(cfg, s.dev.signers[7].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, RoundState::Confirmed, "{report:?}");
    let events = resolved_events(&s).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].resolver, s.dev.contracts.receiver);
    r.stop().await;
}

#[tokio::test]
async fn unauthorized_key_fails_once_with_decoded_reason() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::Yes, 0.9),
            good(DeterminationMode::Yes, 0.8),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("unauth");
    let outsider = s.dev.accounts[12];
    let r = start(
        node_config(&s, &dir, workflow_file(&dir, |t| t)),
        s.dev.signers[12].clone(),
    )
    .await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, RoundState::Failed);
    let reason = report.reason.unwrap();
    assert!(
        reason.contains("Unauthorized") && reason.contains("setAuthorizedResolver"),
        "{reason}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // no retry storm: still failed, nothing sent
    assert_eq!(
        r.node
            .report(s.dev.contracts.market, s.market_id)
            .await
            .unwrap()
            .state,
        RoundState::Failed
    );
    assert_eq!(nonce(&s, outsider).await, 0);
    r.stop().await;
}

async fn wait_state(
    dir: &std::path::Path,
    s: &MarketSetup,
    want: impl Fn(RoundState) -> bool,
) -> RoundState {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(store) = cresolver_store::Store::open(&dir.join("data"))
            && let Ok(Some(r)) = store.get(s.dev.contracts.market, s.market_id)
            && want(r.state)
        {
            return r.state;
        }
        assert!(Instant::now() < deadline, "state never reached");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_round_then_restarted_resolves_exactly_once() {
    // slow workers: the node is killed (SIGKILL) while it waits for their answers
    let slow = |det| {
        AgentUriFuture(AgentBehaviour {
            latency: Duration::from_millis(1500),
            ..behaviour(det, 0.8)
        })
    };
    let s = market_with_workers(
        uris(vec![
            slow(DeterminationMode::Yes),
            slow(DeterminationMode::Yes),
            slow(DeterminationMode::No),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("kill");
    let wf = workflow_file(&dir, |t| t);
    s.dev.request_resolution(s.market_id).await.unwrap();
    let mut child = node_process(&s, &dir, &wf, None);
    wait_state(&dir, &s, |st| st == RoundState::Discovered).await;
    child.kill().await.unwrap();
    assert!(resolved_events(&s).await.is_empty());

    let mut child = node_process(&s, &dir, &wf, None);
    let st = wait_state(&dir, &s, RoundState::is_final).await;
    child.kill().await.unwrap();
    assert_eq!(st, RoundState::Confirmed);
    assert_eq!(resolved_events(&s).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_signing_and_broadcast_rebroadcasts_the_same_transaction() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::Yes, 0.9),
            good(DeterminationMode::No, 0.8),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("crash");
    let wf = workflow_file(&dir, |t| t);
    let before = nonce(&s, s.dev.accounts[0]).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let mut child = node_process(&s, &dir, &wf, Some("signed"));
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("node exits")
        .unwrap();
    assert_eq!(
        status.code(),
        Some(97),
        "the test hook exits after persisting the signed tx"
    );
    let stored = cresolver_store::Store::open(&dir.join("data"))
        .unwrap()
        .get(s.dev.contracts.market, s.market_id)
        .unwrap()
        .unwrap();
    assert_eq!(stored.state, RoundState::Submitted);
    assert!(
        resolved_events(&s).await.is_empty(),
        "nothing was broadcast"
    );

    let mut child = node_process(&s, &dir, &wf, None);
    let st = wait_state(&dir, &s, RoundState::is_final).await;
    child.kill().await.unwrap();
    assert_eq!(st, RoundState::Confirmed);
    let events = resolved_events(&s).await;
    assert_eq!(events.len(), 1);
    let done = cresolver_store::Store::open(&dir.join("data"))
        .unwrap()
        .get(s.dev.contracts.market, s.market_id)
        .unwrap()
        .unwrap();
    assert_eq!(
        done.submit_tx, stored.submit_tx,
        "the stored transaction, not a new one"
    );
    let receipt = s
        .dev
        .provider
        .get_transaction_receipt(stored.submit_tx.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(receipt.status());
    assert_eq!(
        nonce(&s, s.dev.accounts[0]).await,
        before + 1,
        "one resolution transaction"
    );
}

/// `cresolver rounds retry` with the node's data dir, market and API.
async fn rounds_retry(
    dir: &std::path::Path,
    s: &MarketSetup,
    listen: &str,
) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .args(["rounds", "retry", &s.market_id.to_string()])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--market-address", &s.dev.contracts.market.to_string()])
        // a done round is retried only when the chain says the market is open
        .args(["--rpc-url", &s.dev.rpc_url()])
        .env("CRESOLVER__API__LISTEN", listen)
        .env("CRESOLVER_API_TOKEN", "retry-token")
        .env("CRESOLVER_LOG", "warn")
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_retry_runs_a_failed_round_now_or_at_the_next_start() {
    let s = market_with_three_workers().await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let head = s.dev.provider.get_block_number().await.unwrap();
    let dir = tmpdir("retry");
    let wf = workflow_file(&dir, |t| t);
    {
        // a round that failed earlier (the watcher starts after its request)
        let store = cresolver_store::Store::open(&dir.join("data")).unwrap();
        let m = s.dev.contracts.market;
        store
            .manual_request(m, s.market_id, "cresolver-resolution")
            .unwrap();
        store
            .set_state(m, s.market_id, RoundState::Failed, Some("failed earlier"))
            .unwrap();
    }
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let start = (head + 1).to_string();

    // no node: the round is reopened in the store, and the next start runs it
    let out = rounds_retry(&dir, &s, &listen).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("requested") && said.contains("when it starts"),
        "{said}"
    );
    wait_state(&dir, &s, |st| st == RoundState::Requested).await;
    let mut child = node_process_with(
        &s,
        &dir,
        &wf,
        None,
        &[
            ("CRESOLVER__CHAIN__START_BLOCK", &start),
            ("CRESOLVER__API__LISTEN", &listen),
            ("CRESOLVER_API_TOKEN", "retry-token"),
        ],
    );
    assert_eq!(
        wait_state(&dir, &s, RoundState::is_final).await,
        RoundState::Confirmed
    );
    assert_eq!(resolved_events(&s).await.len(), 1);

    // a confirmed round is not run again
    let out = rounds_retry(&dir, &s, &listen).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing to retry"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // a running node: it runs the reopened round at once
    {
        let store = cresolver_store::Store::open(&dir.join("data")).unwrap();
        store
            .set_state(
                s.dev.contracts.market,
                s.market_id,
                RoundState::Failed,
                Some("failed again"),
            )
            .unwrap();
    }
    let out = rounds_retry(&dir, &s, &listen).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("runs the round"));
    // the market is resolved already: the node reads that and ends the round skipped,
    // without a second resolution
    let st = wait_state(&dir, &s, |st| st != RoundState::Failed && st.is_final()).await;
    child.kill().await.unwrap();
    assert_eq!(st, RoundState::Skipped);
    assert_eq!(resolved_events(&s).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_unfinished_rounds_start_and_drain() {
    let s = market_with_three_workers().await;
    let dir = tmpdir("resume-many");
    {
        // 5000 unfinished rounds of markets that do not exist (more than the 1024 the
        // dispatcher's channel holds)
        let store = cresolver_store::Store::open(&dir.join("data")).unwrap();
        for i in 0..5000u64 {
            store
                .manual_request(
                    s.dev.contracts.market,
                    U256::from(1_000_000 + i),
                    "cresolver-resolution",
                )
                .unwrap();
        }
    }
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let r = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let rep = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(rep.state, RoundState::Confirmed, "{rep:?}");
    // and every resumed round reaches an end (they were run, not dropped)
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let open: u64 = r
            .node
            .store
            .count_by_state()
            .await
            .unwrap()
            .iter()
            .filter(|(st, _)| !st.is_final())
            .map(|(_, n)| n)
            .sum();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} rounds still open");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    r.stop().await;
    assert_eq!(resolved_events(&s).await.len(), 1);
}

/// A reference agent whose requests are counted by path.
async fn counted_agent(
    det: DeterminationMode,
    conf: f64,
) -> (
    String,
    Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
) {
    let counts: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>> =
        Default::default();
    let c = counts.clone();
    let app =
        cresolver_devnet::agent::router(behaviour(det, conf)).layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let c = c.clone();
                async move {
                    *c.lock()
                        .unwrap()
                        .entry(req.uri().path().to_string())
                        .or_default() += 1;
                    next.run(req).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_killed_after_each_stage_resumes_without_asking_again() {
    for point in ["answered", "challenged", "evaluated"] {
        let mut uris = vec![];
        let mut counts = vec![];
        for (det, conf) in [
            (DeterminationMode::Yes, 0.9),
            (DeterminationMode::Yes, 0.8),
            (DeterminationMode::No, 0.6),
        ] {
            let (url, c) = counted_agent(det, conf).await;
            uris.push(AgentUri::Endpoint(url));
            counts.push(c);
        }
        let s = market_with_workers(uris).await;
        let (llm_url, llm) = llm_server(vec![Scripted::content(&uniform_llm_reply(3))]).await;
        let dir = tmpdir(&format!("resume-{point}"));
        let wf = workflow_file(&dir, |t| {
            with_llm_evaluator(t, &llm_url, "CRESOLVER_TEST_NO_KEY")
        });
        s.dev.request_resolution(s.market_id).await.unwrap();
        let key = [("CRESOLVER_TEST_NO_KEY", "test-key")];
        let mut child = node_process_with(&s, &dir, &wf, Some(point), &key);
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .expect("the node stops at the crash point")
            .unwrap();
        assert_eq!(
            status.code(),
            Some(97),
            "{point}: crashed where asked:\n{}",
            std::fs::read_to_string(dir.join("node.log")).unwrap_or_default()
        );
        assert!(resolved_events(&s).await.is_empty());
        let mut child = node_process_with(&s, &dir, &wf, None, &key);
        let st = wait_state(&dir, &s, RoundState::is_final).await;
        child.kill().await.unwrap();
        assert_eq!(st, RoundState::Confirmed, "{point}");
        assert_eq!(resolved_events(&s).await.len(), 1, "{point}");
        for (i, c) in counts.iter().enumerate() {
            let c = c.lock().unwrap();
            assert_eq!(
                c.get("/a2a/resolve"),
                Some(&1),
                "{point}: worker {i} asked once: {c:?}"
            );
            assert_eq!(
                c.get("/a2a/challenge"),
                Some(&1),
                "{point}: worker {i} challenged once: {c:?}"
            );
        }
        assert_eq!(
            llm.requests.lock().unwrap().len(),
            1,
            "{point}: the LLM asked once"
        );
    }
}

/// Requests resolution, then lets `secs` pass and mines `blocks` blocks; returns the
/// request's block and its timestamp.
async fn request_then_age(s: &MarketSetup, secs: u64, blocks: u64) -> (u64, u64) {
    let receipt = s.dev.request_resolution(s.market_id).await.unwrap();
    let block = receipt.block_number.unwrap();
    let p = &s.dev.provider;
    let at = p
        .get_block_by_number(block.into())
        .await
        .unwrap()
        .unwrap()
        .header
        .timestamp;
    p.raw_request::<_, serde_json::Value>("evm_increaseTime".into(), (secs,))
        .await
        .unwrap();
    p.raw_request::<_, serde_json::Value>("anvil_mine".into(), (U256::from(blocks),))
        .await
        .unwrap();
    (block, at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_round_reads_and_judges_at_the_request_block() {
    let s = market_with_three_workers().await;
    // a day passes and blocks are mined before the node sees the request
    let (block, at) = request_then_age(&s, 86_400, 5).await;
    let dir = tmpdir("judging-point");
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let rep = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    r.stop().await;
    assert_eq!(rep.state, RoundState::Confirmed, "{rep:?}");
    let t = rep.transcript.unwrap();
    assert_eq!(
        t["market"]["block"],
        serde_json::json!(block),
        "market read at the request block"
    );
    assert_eq!(
        t["reference_time"],
        serde_json::json!(at),
        "judged at the request block's time"
    );
}

/// A JSON-RPC proxy in front of anvil that has "pruned" the state of every block up to
/// `pruned_to`: `eth_call` there fails the way a full node says it (headers stay).
async fn pruning_proxy(upstream: String, pruned_to: u64) -> String {
    use axum::Json;
    use axum::extract::State;
    async fn rpc(
        State((upstream, pruned_to)): State<(String, u64)>,
        Json(body): Json<serde_json::Value>,
    ) -> Json<serde_json::Value> {
        if body["method"] == "eth_call"
            && let Some(b) = body["params"][1].as_str()
            && let Ok(n) = u64::from_str_radix(b.trim_start_matches("0x"), 16)
            && n <= pruned_to
        {
            return Json(
                serde_json::json!({"jsonrpc": "2.0", "id": body["id"], "error": {
                    "code": -32000,
                    "message": format!("missing trie node 5a1e (path ) state {b} is not available")
                }}),
            );
        }
        let reply = reqwest::Client::new()
            .post(&upstream)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        Json(reply)
    }
    let app = axum::Router::new()
        .route("/", axum::routing::post(rpc))
        .with_state((upstream, pruned_to));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_state_at_the_request_block_is_read_at_the_head_and_judged_at_the_request() {
    let s = market_with_three_workers().await;
    let (block, at) = request_then_age(&s, 3_600, 3).await;
    let url = pruning_proxy(s.dev.rpc_url(), block).await;
    let dir = tmpdir("pruned");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.rpc_url = url;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let rep = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    r.stop().await;
    assert_eq!(rep.state, RoundState::Confirmed, "{rep:?}");
    let t = rep.transcript.unwrap();
    assert!(
        t["market"]["block"].as_u64().unwrap() > block,
        "read at the head: {}",
        t["market"]["block"]
    );
    assert_eq!(
        t["reference_time"],
        serde_json::json!(at),
        "judged at the request block's time"
    );
    assert_eq!(resolved_events(&s).await.len(), 1);
}
