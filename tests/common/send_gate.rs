//! A JSON-RPC gate between nodes and anvil over HTTP: every call passes through, but
//! `eth_sendRawTransaction` is held until `n` of them wait (or `max_wait` has passed since
//! the first), and then they all go on together. Transactions that would otherwise reach
//! the pool one by one (each node's pre-flight seeing the ones before it) race into it at
//! once.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub struct SendGate {
    /// The gate's URL, to use as the nodes' RPC URL.
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SendGate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Gate {
    upstream: String,
    http: reqwest::Client,
    n: usize,
    max_wait: Duration,
    held: parking_lot::Mutex<usize>,
    open: watch::Sender<bool>,
}

/// Starts a gate in front of `upstream` (anvil's `http://` URL).
pub async fn start(upstream: &str, n: usize, max_wait: Duration) -> SendGate {
    let gate = Arc::new(Gate {
        upstream: upstream.to_string(),
        http: reqwest::Client::new(),
        n,
        max_wait,
        held: parking_lot::Mutex::new(0),
        open: watch::channel(false).0,
    });
    let app = axum::Router::new()
        .route("/", axum::routing::post(forward))
        .with_state(gate);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    SendGate { url, task }
}

async fn forward(State(g): State<Arc<Gate>>, body: Bytes) -> (StatusCode, HeaderMap, Bytes) {
    let sends = serde_json::from_slice::<serde_json::Value>(&body)
        .map(|v| {
            let calls = match v {
                serde_json::Value::Array(calls) => calls,
                one => vec![one],
            };
            calls
                .iter()
                .any(|c| c["method"] == "eth_sendRawTransaction")
        })
        .unwrap_or(false);
    if sends {
        let mut open = g.open.subscribe();
        let all_here = {
            let mut held = g.held.lock();
            *held += 1;
            *held >= g.n
        };
        if all_here {
            g.open.send_replace(true);
        }
        let _ = tokio::time::timeout(g.max_wait, open.wait_for(|o| *o)).await;
        // a late one (or one after the timeout) opens the gate for good
        g.open.send_replace(true);
    }
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    match g
        .http
        .post(&g.upstream)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
    {
        Ok(r) => {
            let status = StatusCode::from_u16(r.status().as_u16()).unwrap();
            (status, headers, r.bytes().await.unwrap_or_default())
        }
        Err(_) => (StatusCode::BAD_GATEWAY, headers, Bytes::new()),
    }
}
