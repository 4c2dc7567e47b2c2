//! The HTTP API over real HTTP: a server on an ephemeral port, called with reqwest.

use alloy::primitives::{Address, U256};
use cresolver_metrics::Metrics;
use cresolver_node::api::serve;
use cresolver_node::http::{ApiState, ManualTrigger, NodeHealth};
use cresolver_store::RoundKey;
use cresolver_store::{Nonces, Requests, SqliteStore, Store};
use parking_lot::RwLock;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

const TOKEN: &str = "s3cret-token";
const MARKET: Address = Address::repeat_byte(0x11);

struct Server {
    base: String,
    store: Arc<SqliteStore>,
    triggers: mpsc::Receiver<ManualTrigger>,
    http: reqwest::Client,
    _stop: oneshot::Sender<()>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self.http.get(self.url(path)).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    async fn post_resolve(&self, token: Option<&str>, body: &str) -> (u16, Value) {
        let mut req = self
            .http
            .post(self.url("/resolve"))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }
}

async fn start(token: Option<&str>) -> Server {
    let store = Arc::new(SqliteStore::new(Store::in_memory().unwrap()));
    let (tx, rx) = mpsc::channel(4);
    let state = ApiState {
        store: store.clone(),
        metrics: Arc::new(Metrics::new()),
        trigger: tx,
        token: token.map(Into::into),
        market: MARKET,
        started: Instant::now(),
        health: Arc::new(RwLock::new(NodeHealth {
            chain_id: Some(31337),
            last_processed_block: Some(12),
            ..NodeHealth::default()
        })),
        chain: None,
        stop: tokio_util::sync::CancellationToken::new(),
        don: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, state, async {
        let _ = stopped.await;
    }));
    Server {
        base: format!("http://{addr}"),
        store,
        triggers: rx,
        http: reqwest::Client::new(),
        _stop: stop,
    }
}

#[tokio::test]
async fn health_reports_status_version_and_extra_fields() {
    let s = start(None).await;
    let (status, body) = s.get("/health").await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(body["commit"], cresolver_node::build_info::COMMIT);
    assert!(body["uptime_s"].is_u64(), "{body}");
    assert_eq!(body["chain_id"], 31337);
    assert_eq!(body["last_processed_block"], 12);
    let (status, body) = s.get("/health/live").await;
    assert_eq!((status, body), (200, json!({"status": "live"})));
    // no chain attached: ready as far as the store goes
    let (status, body) = s.get("/health/ready").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reasons"], json!([]));
}

#[tokio::test]
async fn metrics_include_rounds_by_state() {
    let s = start(None).await;
    s.store
        .manual_request(RoundKey::new(MARKET, U256::from(5)), "default")
        .await
        .unwrap();
    let resp = s.http.get(s.url("/metrics")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let ctype = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(
        ctype.starts_with("application/openmetrics-text; version=1.0.0"),
        "{ctype}"
    );
    let text = resp.text().await.unwrap();
    assert!(
        text.lines()
            .any(|l| l == r#"cresolver_rounds_by_state{state="requested"} 1"#),
        "{text}"
    );
    assert!(text.contains("# TYPE cresolver_rounds counter"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
}

/// `/rounds` lists the three stored rounds, honours `limit`, refuses a bad one, and pages
/// with a cursor (newest first, summaries only).
async fn check_list_pages(s: &Server) {
    let (status, body) = s.get("/rounds").await;
    assert_eq!(status, 200);
    assert_eq!(body.as_array().unwrap().len(), 3, "{body}");
    let (status, body) = s.get("/rounds?limit=1").await;
    assert_eq!(status, 200);
    assert_eq!(body.as_array().unwrap().len(), 1, "{body}");
    let (status, body) = s.get("/rounds?limit=nope").await;
    assert_eq!(status, 400, "{body}");
    // pages with a cursor, summaries only
    let resp = s.http.get(s.url("/rounds?limit=2")).send().await.unwrap();
    let cursor = resp.headers()["x-next-cursor"]
        .to_str()
        .unwrap()
        .to_string();
    let page: Value = resp.json().await.unwrap();
    assert_eq!(page.as_array().unwrap().len(), 2);
    assert_eq!(page[0]["market_id"], "0x9", "newest first: {page}");
    assert!(
        page[0].get("outcome").is_none(),
        "no transcript in the list"
    );
    let resp = s
        .http
        .get(s.url(&format!("/rounds?limit=2&cursor={cursor}")))
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("x-next-cursor").is_none(), "last page");
    let page: Value = resp.json().await.unwrap();
    assert_eq!(page.as_array().unwrap().len(), 1);
    assert_eq!(page[0]["market_id"], "0x7");
}

/// Reserves nonce 4 for round 7 and stores a replaced and a replacing attempt of it.
async fn reserve_with_two_attempts(s: &Server) {
    let key = cresolver_store::KeyRef {
        signer: Address::repeat_byte(0x55),
        chain_id: 31337,
    };
    let nonce = s
        .store
        .reserve_nonce(
            key,
            4,
            &cresolver_store::TxPayload {
                market: MARKET,
                market_id: U256::from(7).into(),
                to: MARKET,
                calldata: vec![1u8, 2].into(),
                gas_limit: 90_000,
            },
        )
        .await
        .unwrap();
    for seq in 0..2u32 {
        s.store
            .add_attempt(
                key,
                RoundKey::new(MARKET, U256::from(7)),
                &cresolver_store::AttemptRecord {
                    nonce,
                    seq,
                    tx_hash: alloy::primitives::B256::repeat_byte(seq as u8 + 1),
                    raw: vec![0u8].into(),
                    max_fee_per_gas: 2_000_000_000 * (u128::from(seq) + 1),
                    max_priority_fee_per_gas: 1_000_000_000,
                    gas_limit: 90_000,
                    sent_block: Some(10 + u64::from(seq)),
                    created_at: 0,
                },
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn rounds_list_and_get() {
    let s = start(None).await;
    let (status, body) = s.get("/rounds").await;
    assert_eq!((status, body), (200, json!([])));

    s.store
        .manual_request(RoundKey::new(MARKET, U256::from(7)), "default")
        .await
        .unwrap();
    s.store
        .manual_request(RoundKey::new(MARKET, U256::from(8)), "default")
        .await
        .unwrap();
    // Another market's round is listed but not found by id under the node's market.
    s.store
        .manual_request(
            RoundKey::new(Address::repeat_byte(0x22), U256::from(9)),
            "default",
        )
        .await
        .unwrap();

    check_list_pages(&s).await;

    let (status, body) = s.get("/rounds/7").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "requested");
    assert_eq!(body["workflow"], "default");
    assert_eq!(body["attempt"], 1);
    assert_eq!(
        body["market"].as_str().unwrap().to_lowercase(),
        MARKET.to_string().to_lowercase()
    );

    assert_eq!(body["transactions"], json!([]));
    reserve_with_two_attempts(&s).await;
    let (status, body) = s.get("/rounds/7").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "submitted");
    let tx = &body["transactions"][0];
    assert_eq!(
        (tx["nonce"].as_u64(), &tx["state"]),
        (Some(4), &json!("pending"))
    );
    assert_eq!(tx["attempts"].as_array().unwrap().len(), 2, "{body}");
    assert_eq!(tx["attempts"][1]["max_fee_per_gas"], "4000000000");
    assert_eq!(tx["attempts"][1]["sent_block"], 11);
    assert!(body.get("raw_tx").is_none(), "raw bytes are not served");

    let (status, body) = s.get("/rounds/9").await;
    assert_eq!(
        (status, body),
        (404, json!({ "error": "no round for market 9" }))
    );
    let (status, body) = s.get("/rounds/123456").await;
    assert_eq!(
        (status, body),
        (404, json!({ "error": "no round for market 123456" }))
    );
    let (status, body) = s.get("/rounds/abc").await;
    assert_eq!(
        (status, body),
        (
            400,
            json!({ "error": "market_id must be a non-negative integer" })
        )
    );
    let (status, body) = s.get("/rounds/-1").await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn unknown_route_is_json_404() {
    let s = start(None).await;
    let (status, body) = s.get("/nope").await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("/nope"), "{body}");
}

#[tokio::test]
async fn resolve_requires_the_right_token() {
    let mut s = start(Some(TOKEN)).await;
    let body = r#"{"market_id": 42}"#;

    let (status, resp) = s.post_resolve(None, body).await;
    assert_eq!(status, 401, "{resp}");
    assert!(resp["error"].is_string());
    let (status, resp) = s.post_resolve(Some("wrong"), body).await;
    assert_eq!(status, 401, "{resp}");
    assert!(s.triggers.try_recv().is_err(), "no trigger without auth");

    let (status, resp) = s.post_resolve(Some(TOKEN), body).await;
    assert_eq!(
        (status, resp),
        (202, json!({ "accepted": true, "market_id": "42" }))
    );
    let trigger = tokio::time::timeout(Duration::from_secs(5), s.triggers.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        trigger,
        ManualTrigger {
            market_id: U256::from(42).into()
        }
    );

    // A decimal string works too, beyond u64.
    let big = "340282366920938463463374607431768211456"; // 2^128
    let (status, resp) = s
        .post_resolve(Some(TOKEN), &format!(r#"{{"market_id": "{big}"}}"#))
        .await;
    assert_eq!(status, 202, "{resp}");
    assert_eq!(resp["market_id"], big);
    let trigger = s.triggers.recv().await.unwrap();
    assert_eq!(trigger.market_id.get(), U256::from(1u8) << 128);
}

#[tokio::test]
async fn resolve_rejects_bad_bodies() {
    let mut s = start(Some(TOKEN)).await;
    for body in [
        r#"{"market_id":-1}"#,
        r#"{"x":1}"#,
        r#"{"market_id":"abc"}"#,
        "not json",
    ] {
        let (status, resp) = s.post_resolve(Some(TOKEN), body).await;
        assert_eq!(status, 400, "{body}: {resp}");
        assert!(
            resp["error"].as_str().unwrap().contains("market_id"),
            "{body}: {resp}"
        );
    }
    assert!(s.triggers.try_recv().is_err());

    let huge = format!(r#"{{"market_id": 1, "pad": "{}"}}"#, "x".repeat(20 * 1024));
    let (status, resp) = s.post_resolve(Some(TOKEN), &huge).await;
    assert_eq!(status, 413, "{resp}");
}

#[tokio::test]
async fn resolve_disabled_without_token() {
    let s = start(None).await;
    let (status, resp) = s
        .post_resolve(Some("anything"), r#"{"market_id": 1}"#)
        .await;
    assert_eq!(
        (status, resp),
        (
            403,
            json!({ "error": "the HTTP trigger is disabled: set api.token_env to the name of an env var holding a token" })
        )
    );
}

#[tokio::test]
async fn resolve_answers_503_when_the_queue_is_full() {
    let s = start(Some(TOKEN)).await;
    for i in 0..4 {
        let (status, _) = s
            .post_resolve(Some(TOKEN), &format!(r#"{{"market_id": {i}}}"#))
            .await;
        assert_eq!(status, 202);
    }
    let (status, resp) = s.post_resolve(Some(TOKEN), r#"{"market_id": 5}"#).await;
    assert_eq!(status, 503, "{resp}");
}

#[tokio::test]
async fn serve_stops_on_shutdown() {
    let store = Arc::new(SqliteStore::new(Store::in_memory().unwrap()));
    let (tx, _rx) = mpsc::channel(1);
    let state = ApiState {
        store,
        metrics: Arc::new(Metrics::new()),
        trigger: tx,
        token: None,
        market: MARKET,
        started: Instant::now(),
        health: Arc::new(RwLock::new(NodeHealth::default())),
        chain: None,
        stop: tokio_util::sync::CancellationToken::new(),
        don: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, state, async {
        let _ = stopped.await;
    }));
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// The HTTP reference (docs/reference/http-api.md) against a real server: every GET route
/// it documents without a path parameter answers, with JSON where the reference promises
/// JSON, and `/health` carries the fields the reference names.
#[tokio::test]
async fn the_http_reference_matches_real_responses() {
    let s = start(None).await;
    let doc = std::fs::read_to_string("docs/reference/http-api.md").unwrap();
    let mut routes: Vec<String> = doc
        .match_indices("`GET /")
        .map(|(i, _)| {
            doc[i + 5..]
                .split(['`', ' ', '?'])
                .next()
                .unwrap_or("")
                .to_string()
        })
        .filter(|r| !r.contains('{'))
        .collect();
    routes.sort();
    routes.dedup();
    assert!(routes.len() >= 8, "{routes:?}");
    for route in &routes {
        if route == "/events" {
            continue; // a stream that stays open
        }
        let resp = s.http.get(s.url(route)).send().await.unwrap();
        let status = resp.status().as_u16();
        assert!(
            status == 200 || (route == "/health/ready" && status == 503),
            "GET {route}: {status}"
        );
        let kind = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let json_route = route.starts_with("/health")
            || route.starts_with("/rounds")
            || route.starts_with("/status/");
        if json_route {
            assert!(kind.starts_with("application/json"), "GET {route}: {kind}");
            let body: Value = resp.json().await.unwrap();
            if route == "/health" {
                for field in ["status", "reasons", "version", "uptime_s"] {
                    assert!(
                        doc.contains(&format!("`{field}`"))
                            || field == "version"
                            || field == "uptime_s"
                    );
                    assert!(body.get(field).is_some(), "/health has no {field}: {body}");
                }
            }
        }
    }
}
