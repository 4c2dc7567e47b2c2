//! The node's status page in a real headless Chromium: a node on anvil resolves a
//! market while the page is open, the page shows the round reach `confirmed` without a
//! reload (server-sent events), and a worker whose evidence is HTML with script is shown
//! as text: no script runs, no element is made of it. A screenshot is saved as
//! `target/status-page.png`.

use crate::common;

use common::browser::{Browser, Page};
use common::chain::{AgentUri, MarketSetup, market_with_workers};
use common::node::{free_port, node_config, start, tmpdir, workflow_file};
use common::{agent, behaviour};
use cresolver_devnet::agent::DeterminationMode;
use std::time::Duration;

const HOSTILE: &str = r#"</pre><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold</b>"#;

/// A reference worker whose `/a2a/resolve` evidence is replaced by [`HOSTILE`].
async fn hostile_worker() -> String {
    let app = cresolver_devnet::agent::router(behaviour(DeterminationMode::Yes, 0.7)).layer(
        axum::middleware::from_fn(
            |req: axum::extract::Request, next: axum::middleware::Next| async move {
                let resolve = req.uri().path() == "/a2a/resolve";
                let resp = next.run(req).await;
                if !resolve {
                    return resp;
                }
                let (parts, body) = resp.into_parts();
                let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
                let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                v["evidence"] = serde_json::json!(format!(
                    "{HOSTILE} The feed reported YES at 12:00 UTC; two independent sources agree."
                ));
                let mut parts = parts;
                parts.headers.remove(axum::http::header::CONTENT_LENGTH);
                axum::response::Response::from_parts(parts, axum::body::Body::from(v.to_string()))
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The confirmed round's row (`row`: the JavaScript expression of its element) shows the
/// quorum, the answers, the weights, the outcome, each worker's payout as the contract
/// paid it, and the mined transaction; the page shows the chain's head.
async fn check_confirmed_row(s: &MarketSetup, page: &mut Page, row: &str) {
    let text = page.eval(&format!("{row}.innerText")).await;
    let text = text.as_str().unwrap();
    assert!(text.contains("met (3/2 of 3)"), "quorum shown: {text}");
    assert!(text.contains("YES · 0.90"), "answer and confidence: {text}");
    assert!(text.contains("w="), "weights: {text}");
    // the outcome and the weight behind it, in the list
    let outcome = page
        .eval(&format!("{row}.querySelector('td.outcome').innerText"))
        .await;
    let outcome = outcome.as_str().unwrap();
    assert!(outcome.starts_with("YES (weight "), "outcome: {outcome}");
    // each worker's payout as the contract paid it
    for w in &s.workers {
        let paid = s.dev.market().balances(*w).call().await.unwrap();
        let eth = alloy::primitives::utils::format_ether(paid);
        assert!(
            text.contains(&format!("pays {eth} ETH")),
            "payout {eth} of {w}: {text}"
        );
    }
    assert!(
        text.contains(": mined, 1 attempt(s)") && text.contains("confirmed in block"),
        "transaction: {text}"
    );
    let chain = page
        .eval("document.getElementById('chain').innerText")
        .await;
    assert!(chain.as_str().unwrap().contains("head "), "{chain}");
}

/// One round's page: the hostile evidence is shown as text and nothing of it ran; the
/// whole transcript is shown. Saves a screenshot.
async fn check_round_page(page: &mut Page, base: &str, s: &MarketSetup) {
    page.goto(&format!("{base}/?round={}", s.market_id)).await;
    page.wait_for(
        "document.querySelectorAll('#round-workers .evidence').length === 3",
        Duration::from_secs(30),
        "the round's workers",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await; // an onerror would have fired
    assert_eq!(
        page.eval("window.__pwned === undefined").await,
        serde_json::json!(true),
        "a worker's script ran"
    );
    assert_eq!(
        page.eval(
            "document.querySelectorAll('#round-view script, #round-view img, #round-view b').length"
        )
        .await,
        serde_json::json!(0),
        "elements were made of a worker's text"
    );
    let shown = page
        .eval("[...document.querySelectorAll('#round-workers .evidence')].map(e => e.textContent).join('\\n')")
        .await;
    assert!(
        shown.as_str().unwrap().contains(HOSTILE),
        "the evidence is shown as text: {shown}"
    );
    let transcript = page
        .eval("document.getElementById('round-transcript').textContent")
        .await;
    assert!(
        transcript.as_str().unwrap().contains("\"confirmation\""),
        "the whole transcript"
    );
    std::fs::write("target/status-page-round.png", page.screenshot().await).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_a_round_confirmed_live_and_worker_html_as_text() {
    let s = market_with_workers(vec![
        AgentUri::Endpoint(agent(behaviour(DeterminationMode::Yes, 0.9)).await),
        AgentUri::Endpoint(agent(behaviour(DeterminationMode::No, 0.6)).await),
        AgentUri::Endpoint(hostile_worker().await),
    ])
    .await;
    let dir = tmpdir("status-page");
    let wf = workflow_file(&dir, |t| t);
    let mut cfg = node_config(&s, &dir, wf);
    let port = free_port();
    cfg.api.listen = format!("127.0.0.1:{port}");
    let node = start(cfg, s.dev.signers[0].clone()).await;
    let base = format!("http://127.0.0.1:{port}");

    // the page is open before anything happens
    let browser = Browser::start();
    let mut page = browser.open(&format!("{base}/")).await;
    page.wait_for(
        "document.readyState === 'complete' && document.getElementById('live').classList.contains('on')",
        Duration::from_secs(30),
        "the live connection",
    )
    .await;
    page.eval("window.__marker = 42; true").await;

    s.dev.request_resolution(s.market_id).await.unwrap();
    let row = format!(
        "document.querySelector('tr[data-market-id=\"{}\"]')",
        s.market_id
    );
    page.wait_for(
        &format!("{row} !== null && {row}.dataset.state === 'confirmed'"),
        Duration::from_secs(60),
        "the round reaching confirmed on the page",
    )
    .await;
    assert_eq!(
        page.eval("window.__marker").await,
        serde_json::json!(42),
        "updated without a reload"
    );
    check_confirmed_row(&s, &mut page, &row).await;
    // a node that is not a DON member has no DON panel
    assert_eq!(
        page.eval("document.getElementById('don-view').hidden")
            .await,
        serde_json::json!(true)
    );
    std::fs::create_dir_all("target").ok();
    std::fs::write("target/status-page.png", page.screenshot().await).unwrap();

    check_round_page(&mut page, &base, &s).await;

    // read-only without a token; changing state still needs one
    let r = reqwest::Client::new()
        .post(format!("{base}/resolve"))
        .body(r#"{"market_id": 1}"#)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    let head = reqwest::get(format!("{base}/")).await.unwrap();
    let csp = head.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    drop(page);
    drop(browser);
    node.stop().await;
}
