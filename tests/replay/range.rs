//! Replay of a block range through an RPC proxy that refuses wide log ranges: resolved, unresolved and untranscribed markets.

use super::*;

#[derive(Clone)]
struct Proxy {
    upstream: String,
    max_span: u64,
    refused: Arc<AtomicUsize>,
    http: reqwest::Client,
}

fn hex_u64(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.trim_start_matches("0x"), 16).ok()
}

async fn proxy_one(p: &Proxy, req: Value) -> Value {
    if req["method"] == "eth_getLogs"
        && let (Some(from), Some(to)) = (
            hex_u64(&req["params"][0]["fromBlock"]),
            hex_u64(&req["params"][0]["toBlock"]),
        )
        && to.saturating_sub(from) + 1 > p.max_span
    {
        p.refused.fetch_add(1, Ordering::SeqCst);
        return json!({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32005,
            "message": format!("query exceeds max block range {}", p.max_span)}});
    }
    p.http
        .post(&p.upstream)
        .json(&req)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn proxy_handler(
    axum::extract::State(p): axum::extract::State<Proxy>,
    axum::Json(body): axum::Json<Value>,
) -> axum::Json<Value> {
    axum::Json(match body {
        Value::Array(items) => {
            let mut out = Vec::new();
            for i in items {
                out.push(proxy_one(&p, i).await);
            }
            Value::Array(out)
        }
        one => proxy_one(&p, one).await,
    })
}

/// Starts the proxy; returns its URL and the refusal counter.
async fn refusing_proxy(upstream: String, max_span: u64) -> (String, Arc<AtomicUsize>) {
    let refused = Arc::new(AtomicUsize::new(0));
    let state = Proxy {
        upstream,
        max_span,
        refused: refused.clone(),
        http: reqwest::Client::new(),
    };
    let app = axum::Router::new()
        .route("/", axum::routing::post(proxy_handler))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, refused)
}

/// Markets 1 to 4 of `s`'s contract: 1 joined by the good workers; 2 joined by workers
/// that do not answer (quorum not met, never resolved); 3 joined by the good workers, to
/// be requested while the node is down (no transcript); 4 never requested. Returns the
/// ids of markets 1 to 3.
async fn more_range_markets(s: &MarketSetup) -> (U256, U256, U256) {
    let dev = &s.dev;
    let m1 = dev
        .create_market("Second question?", s.reward, 86_400)
        .await
        .unwrap();
    for (i, a) in s.agents.iter().enumerate() {
        dev.join(m1, s.workers[i], a.agent_id, s.stake)
            .await
            .unwrap();
    }
    // market 2: workers that do not answer -> quorum not met, never resolved
    let m2 = dev
        .create_market("Third question?", s.reward, 86_400)
        .await
        .unwrap();
    for k in 4..7 {
        let owner = dev.accounts[k];
        let uri = dev.registration_uri(&format!("down-{k}"), owner, &closed_port_url());
        let agent = dev.register_agent(owner, Some(uri)).await.unwrap();
        dev.join(m2, owner, agent.agent_id, s.stake).await.unwrap();
    }
    // market 3: requested while the node is down (no transcript); market 4: never requested
    let m3 = dev
        .create_market("Fourth question?", s.reward, 86_400)
        .await
        .unwrap();
    for (i, a) in s.agents.iter().enumerate() {
        dev.join(m3, s.workers[i], a.agent_id, s.stake)
            .await
            .unwrap();
    }
    let m4 = dev
        .create_market("Fifth question?", s.reward, 86_400)
        .await
        .unwrap();
    assert_eq!(
        (m1, m2, m3, m4),
        (U256::from(1), U256::from(2), U256::from(3), U256::from(4))
    );
    (m1, m2, m3)
}

/// The JSON of the range replay: markets 0 and 1 resolved and agreeing bit for bit, 2
/// never resolved and agreeing (no quorum), 3 never resolved nor transcribed (not
/// replayed, not agreeing); market 4, never requested, is not listed.
fn check_range_rows(v: &Value) {
    let rows = v["markets"].as_array().unwrap();
    let ids: Vec<&str> = rows
        .iter()
        .map(|m| m["market_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["0x0", "0x1", "0x2", "0x3"], "{v:#}");
    for m in &rows[..2] {
        assert_eq!(m["agree"], true, "{m:#}");
        assert_eq!(m["on_chain"]["resolved"], true);
        assert_eq!(m["report_identical"], true);
        assert_eq!(m["differences_vs_chain"], json!([]));
    }
    assert_eq!(rows[1]["on_chain"]["resolution"], true);
    // never resolved, and the replay agrees: no quorum
    assert_eq!(rows[2]["on_chain"]["resolved"], false);
    assert_eq!(rows[2]["replayed"]["status"], "no_quorum");
    assert_eq!(rows[2]["agree"], true, "{:#}", rows[2]);
    // never resolved and never transcribed: not replayed, not agreeing
    assert_eq!(rows[3]["on_chain"]["resolved"], false);
    assert_eq!(rows[3]["replayed"]["status"], "unavailable");
    assert_eq!(rows[3]["agree"], false);
    assert_eq!(v["all_agree"], false);
}

/// The table of the range replay (`args`: the replay's command line without --json)
/// says the same as its JSON: which rows agree and why the others do not.
async fn check_range_table(args: &[&str]) {
    let out = cli(args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("MARKET") && lines[0].contains("AGREE"),
        "{table}"
    );
    assert!(
        lines[3].contains("unresolved")
            && lines[3].contains("no quorum")
            && lines[3].contains("yes"),
        "{table}"
    );
    assert!(
        lines[4].contains("unresolved")
            && lines[4].contains("NO")
            && lines[4].contains("no transcript"),
        "{table}"
    );
    assert!(table.contains("3 of 4 market(s) agree"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_range_replays_resolved_unresolved_and_untranscribed_markets() {
    // market 0 (from the helper) and market 1: good workers, resolved by the node
    let s = market_with_workers(
        good_uris(&[
            (DeterminationMode::Yes, 0.9),
            (DeterminationMode::No, 0.7),
            (DeterminationMode::Yes, 0.6),
        ])
        .await,
    )
    .await;
    let dev = &s.dev;
    let (m1, m2, m3) = more_range_markets(&s).await;

    let dir = tmpdir("range");
    let wf = workflow_file(&dir, "wf.toml", |t| t);
    let r = start(node_config(&s, &dir, wf), dev.signers[0].clone()).await;
    let market = dev.contracts.market;
    for (id, want) in [
        (s.market_id, Stage::Confirmed),
        (m1, Stage::Confirmed),
        (m2, Stage::Failed),
    ] {
        dev.request_resolution(id).await.unwrap();
        let rep = wait_final(&r.node, market, id).await;
        assert_eq!(rep.state, want, "market {id}: {rep:?}");
    }
    r.stop().await;
    dev.request_resolution(m3).await.unwrap();

    let (proxy, refused) = refusing_proxy(dev.rpc_url(), 3).await;
    let data = dir.join("data");
    let market_s = market.to_string();
    let args = [
        "replay",
        "--from-block",
        "0",
        "--rpc-url",
        proxy.as_str(),
        "--market-address",
        market_s.as_str(),
        "--data-dir",
        p(&data),
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let out = cli(&json_args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        refused.load(Ordering::SeqCst) > 0,
        "the proxy refused nothing"
    );
    let v = json_of(&out);
    check_range_rows(&v);
    let rows = v["markets"].as_array().unwrap();

    check_range_table(&args).await;

    // a range that holds only resolved markets agrees (exit 0)
    let to = rows[1]["request"]["block"].as_u64().unwrap().to_string();
    let out = cli(
        &[
            "replay",
            "--from-block",
            "0",
            "--to-block",
            &to,
            "--rpc-url",
            proxy.as_str(),
            "--market-address",
            market_s.as_str(),
            "--data-dir",
            p(&data),
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("2 of 2 market(s) agree"),
        "{}",
        show(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ─── Dry-run ─────────────────────────────────────────────────────────────────────────
