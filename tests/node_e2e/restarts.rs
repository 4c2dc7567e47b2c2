//! The node killed or crashed at every step, rounds retried, and thousands of unfinished rounds resumed: each market resolved exactly once, no worker asked again.

use super::*;
use cresolver_store::RoundKey;
use cresolver_store::{Requests, Rounds};

async fn wait_state(dir: &std::path::Path, s: &MarketSetup, want: impl Fn(Stage) -> bool) -> Stage {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(store) = cresolver_store::SqliteStore::open(&dir.join("data"))
            && let Ok(Some(r)) = store
                .get(RoundKey::new(s.dev.contracts.market, s.market_id))
                .await
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
    wait_state(&dir, &s, |st| st == Stage::Discovered).await;
    child.kill().await.unwrap();
    assert!(resolved_events(&s).await.is_empty());

    let mut child = node_process(&s, &dir, &wf, None);
    let st = wait_state(&dir, &s, Stage::is_final).await;
    child.kill().await.unwrap();
    assert_eq!(st, Stage::Confirmed);
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
    let stored = cresolver_store::SqliteStore::open(&dir.join("data"))
        .unwrap()
        .get(RoundKey::new(s.dev.contracts.market, s.market_id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.state, Stage::Submitted);
    assert!(
        resolved_events(&s).await.is_empty(),
        "nothing was broadcast"
    );

    let mut child = node_process(&s, &dir, &wf, None);
    let st = wait_state(&dir, &s, Stage::is_final).await;
    child.kill().await.unwrap();
    assert_eq!(st, Stage::Confirmed);
    let events = resolved_events(&s).await;
    assert_eq!(events.len(), 1);
    let done = cresolver_store::SqliteStore::open(&dir.join("data"))
        .unwrap()
        .get(RoundKey::new(s.dev.contracts.market, s.market_id))
        .await
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
        let store = cresolver_store::SqliteStore::open(&dir.join("data")).unwrap();
        let m = s.dev.contracts.market;
        store
            .manual_request(RoundKey::new(m, s.market_id), "cresolver-resolution")
            .await
            .unwrap();
        store
            .set_state(
                RoundKey::new(m, s.market_id),
                Stage::Failed,
                Some("failed earlier"),
            )
            .await
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
    wait_state(&dir, &s, |st| st == Stage::Requested).await;
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
        wait_state(&dir, &s, Stage::is_final).await,
        Stage::Confirmed
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
        let store = cresolver_store::SqliteStore::open(&dir.join("data")).unwrap();
        store
            .set_state(
                RoundKey::new(s.dev.contracts.market, s.market_id),
                Stage::Failed,
                Some("failed again"),
            )
            .await
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
    let st = wait_state(&dir, &s, |st| st != Stage::Failed && st.is_final()).await;
    child.kill().await.unwrap();
    assert_eq!(st, Stage::Skipped);
    assert_eq!(resolved_events(&s).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_unfinished_rounds_start_and_drain() {
    let s = market_with_three_workers().await;
    let dir = tmpdir("resume-many");
    {
        // 5000 unfinished rounds of markets that do not exist (more than the 1024 the
        // dispatcher's channel holds)
        let store = cresolver_store::SqliteStore::open(&dir.join("data")).unwrap();
        for i in 0..5000u64 {
            store
                .manual_request(
                    RoundKey::new(s.dev.contracts.market, U256::from(1_000_000 + i)),
                    "cresolver-resolution",
                )
                .await
                .unwrap();
        }
    }
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let r = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let rep = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(rep.state, Stage::Confirmed, "{rep:?}");
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
        let st = wait_state(&dir, &s, Stage::is_final).await;
        child.kill().await.unwrap();
        assert_eq!(st, Stage::Confirmed, "{point}");
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
