//! Every route of a running node answered and checked against the description: a node
//! on anvil that resolved a market (its API with the trigger on), two API servers in
//! process for what that node cannot show (a DON member's consensus, the trigger
//! disabled, a full trigger queue), and a DON member's endpoint.

use super::common::node::{free_port, node_config, start, tmpdir, wait_final, workflow_file};
use super::validate::Described;
use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use cresolver_don::{DonConfig, MemberConfig};
use cresolver_metrics::Metrics;
use cresolver_node::http::{ApiState, NodeHealth};
use cresolver_store::{SqliteStore, Store};
use parking_lot::RwLock;
use reqwest::Method;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Calls the API at `base` and checks each answer against the description; remembers
/// which (method, path) were called.
struct Caller<'a> {
    d: &'a Described,
    base: String,
    http: reqwest::Client,
    called: BTreeSet<(String, String)>,
}

impl Caller<'_> {
    /// `method url` (`url` a concrete path, `path` the described one): checks the answer,
    /// returns its status, headers and body.
    async fn call(
        &mut self,
        method: Method,
        path: &str,
        url: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{url}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.unwrap().to_vec();
        self.d
            .check(method.as_str(), path, status, &headers, &bytes);
        self.called.insert((method.to_string(), path.to_string()));
        (status, headers, bytes)
    }

    async fn get(&mut self, path: &str, url: &str) -> u16 {
        self.call(Method::GET, path, url, None, None).await.0
    }
}

/// The first event of `GET /events`, checked: its data is a page of round views.
async fn first_event(c: &mut Caller<'_>) {
    let mut resp = c
        .http
        .get(format!("{}/events", c.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let headers = resp.headers().clone();
    c.d.check("GET", "/events", 200, &headers, b"");
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap()
        .trim();
    let page: serde_json::Value = serde_json::from_str(data).unwrap();
    let schema = serde_json::json!({ "$ref": "#/components/schemas/RoundsPage" });
    c.d.validate(&schema, &page)
        .unwrap_or_else(|e| panic!("an event's page: {e}"));
    c.called.insert(("GET".into(), "/events".into()));
}

/// Every GET route and its errors, on a node whose market `id` is resolved.
async fn reads(c: &mut Caller<'_>, id: U256) {
    for path in ["/", "/assets/status.js", "/assets/status.css", "/metrics"] {
        assert_eq!(c.get(path, path).await, 200, "{path}");
    }
    for path in ["/health", "/health/live", "/openapi.json", "/status/don"] {
        assert_eq!(c.get(path, path).await, 200, "{path}");
    }
    let ready = c.get("/health/ready", "/health/ready").await;
    assert!(ready == 200 || ready == 503, "{ready}");
    assert_eq!(c.get("/rounds", "/rounds").await, 200);
    assert_eq!(c.get("/rounds", "/rounds?limit=1&cursor=0").await, 200);
    assert_eq!(c.get("/rounds", "/rounds?limit=nope").await, 400);
    let one = "/rounds/{market_id}";
    assert_eq!(c.get(one, &format!("/rounds/{id}")).await, 200);
    assert_eq!(c.get(one, "/rounds/abc").await, 400);
    assert_eq!(c.get(one, "/rounds/987654321").await, 404);
    assert_eq!(c.get("/status/rounds", "/status/rounds").await, 200);
    assert_eq!(
        c.get("/status/rounds", "/status/rounds?cursor=x").await,
        400
    );
    let view = "/status/rounds/{market_id}";
    assert_eq!(c.get(view, &format!("/status/rounds/{id}")).await, 200);
    assert_eq!(c.get(view, "/status/rounds/-1").await, 400);
    assert_eq!(c.get(view, "/status/rounds/987654321").await, 404);
    first_event(c).await;
}

/// `POST /resolve`: without a token, with the wrong one, with bad and oversized bodies,
/// and accepted.
async fn trigger(c: &mut Caller<'_>, token: &str) {
    let body = || Some(r#"{"market_id": 987654321}"#.to_string());
    let post = Method::POST;
    let (status, headers, _) = c
        .call(post.clone(), "/resolve", "/resolve", None, body())
        .await;
    assert_eq!(status, 401);
    assert_eq!(headers["www-authenticate"], "Bearer");
    let (status, ..) = c
        .call(post.clone(), "/resolve", "/resolve", Some("wrong"), body())
        .await;
    assert_eq!(status, 401);
    let bad = Some(r#"{"market_id": "0x10"}"#.to_string());
    let (status, ..) = c
        .call(post.clone(), "/resolve", "/resolve", Some(token), bad)
        .await;
    assert_eq!(status, 400);
    let huge = Some(format!(
        r#"{{"market_id": 1, "pad": "{}"}}"#,
        "x".repeat(20_000)
    ));
    let (status, ..) = c
        .call(post.clone(), "/resolve", "/resolve", Some(token), huge)
        .await;
    assert_eq!(status, 413);
    let (status, ..) = c
        .call(post, "/resolve", "/resolve", Some(token), body())
        .await;
    assert_eq!(status, 202);
}

/// On every described path, the methods the description does not list are not served.
async fn undescribed_methods(c: &Caller<'_>) {
    let described = c.d.operations();
    for (_, path) in &described {
        if path.contains('{') || path == cresolver_don::wire::PATH {
            continue;
        }
        for m in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            if described.iter().any(|(dm, dp)| dm == m && dp == path) {
                continue;
            }
            let resp = c
                .http
                .request(
                    Method::from_bytes(m.as_bytes()).unwrap(),
                    format!("{}{path}", c.base),
                )
                .send()
                .await
                .unwrap();
            assert_eq!(
                resp.status().as_u16(),
                405,
                "{m} {path} is served but not described"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_node_answers_every_route_as_described() {
    let d = Described::new();
    let s = super::common::market_with_three_workers().await;
    let dir = tmpdir("openapi");
    let wf = workflow_file(&dir, |t| t);
    let mut cfg = node_config(&s, &dir, wf);
    let port = free_port();
    cfg.api.listen = format!("127.0.0.1:{port}");
    // the token is the value of a variable every process has
    cfg.api.token_env = "PATH".into();
    let token = std::env::var("PATH").unwrap();
    let node = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    wait_final(&node.node, s.dev.contracts.market, s.market_id).await;
    let mut c = Caller {
        d: &d,
        base: format!("http://127.0.0.1:{port}"),
        http: reqwest::Client::new(),
        called: BTreeSet::new(),
    };
    reads(&mut c, s.market_id).await;
    trigger(&mut c, &token).await;
    undescribed_methods(&c).await;
    // /health names the build
    let h: serde_json::Value = c
        .http
        .get(format!("{}/health", c.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(h["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(h["commit"], cresolver_node::build_info::COMMIT);
    let mut called = c.called.clone();
    node.stop().await;
    called.extend(in_process(&d).await);
    called.extend(don_endpoint(&d).await);
    let all: BTreeSet<(String, String)> = d.operations().into_iter().collect();
    let missed: Vec<_> = all.difference(&called).collect();
    assert!(missed.is_empty(), "routes never called: {missed:?}");
}

/// A DON member of four (f = 1) with random keys, none of the others running.
fn member(dir: &std::path::Path) -> Arc<cresolver_don::Don> {
    let keys: Vec<PrivateKeySigner> = (0..4).map(|_| PrivateKeySigner::random()).collect();
    let cfg = DonConfig {
        don_id: 7,
        config_version: 1,
        f: 1,
        listen: "127.0.0.1:0".into(),
        members: keys
            .iter()
            .enumerate()
            .map(|(i, k)| MemberConfig {
                address: k.address(),
                url: format!("http://127.0.0.1:{}", 1 + i).parse().unwrap(),
            })
            .collect(),
        attempt_timeout: Duration::from_millis(800),
        observation_grace: Duration::from_millis(300),
        transmit_delay: Duration::from_millis(1_000),
        max_attempts: 10,
    };
    let persist = cresolver_don::persist::Persist::open(&dir.join("don.sqlite")).unwrap();
    Arc::new(
        cresolver_don::Don::new(cfg, keys[0].clone(), persist, Arc::new(Metrics::new())).unwrap(),
    )
}

/// An API server in process (no chain): `token`, a trigger queue of one that nobody
/// reads, and `don`.
async fn api(token: Option<&str>, don: Option<Arc<cresolver_don::Don>>) -> String {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::mem::forget(rx);
    let state = ApiState {
        store: Arc::new(SqliteStore::new(Store::in_memory().unwrap())),
        metrics: Arc::new(Metrics::new()),
        trigger: tx,
        token: token.map(Into::into),
        market: Address::repeat_byte(0x11),
        started: Instant::now(),
        health: Arc::new(RwLock::new(NodeHealth::default())),
        chain: None,
        stop: tokio_util::sync::CancellationToken::new(),
        don,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(cresolver_node::api::serve(
        listener,
        state,
        std::future::pending(),
    ));
    base
}

/// A DON member's consensus view, the trigger disabled (403), a full queue (503).
async fn in_process(d: &Described) -> BTreeSet<(String, String)> {
    let dir = tmpdir("openapi-don");
    let mut c = Caller {
        d,
        base: api(None, Some(member(&dir))).await,
        http: reqwest::Client::new(),
        called: BTreeSet::new(),
    };
    assert_eq!(c.get("/status/don", "/status/don").await, 200);
    let body = Some(r#"{"market_id": 1}"#.to_string());
    let (status, ..) = c
        .call(
            Method::POST,
            "/resolve",
            "/resolve",
            Some("any"),
            body.clone(),
        )
        .await;
    assert_eq!(status, 403);
    c.base = api(Some("t"), None).await;
    let (status, ..) = c
        .call(
            Method::POST,
            "/resolve",
            "/resolve",
            Some("t"),
            body.clone(),
        )
        .await;
    assert_eq!(status, 202);
    let (status, ..) = c
        .call(Method::POST, "/resolve", "/resolve", Some("t"), body)
        .await;
    assert_eq!(status, 503);
    c.called
}

/// A DON member's endpoint: a message that is not one of this DON (403).
async fn don_endpoint(d: &Described) -> BTreeSet<(String, String)> {
    let dir = tmpdir("openapi-don-endpoint");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(cresolver_don::server::serve(
        listener,
        member(&dir),
        std::future::pending(),
    ));
    let mut c = Caller {
        d,
        base,
        http: reqwest::Client::new(),
        called: BTreeSet::new(),
    };
    let path = cresolver_don::wire::PATH;
    let (status, ..) = c
        .call(
            Method::POST,
            path,
            path,
            None,
            Some(r#"{"don_id": 1}"#.into()),
        )
        .await;
    assert_eq!(status, 403);
    c.called
}
