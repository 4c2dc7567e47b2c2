//! Shared test helpers: real HTTP workers on 127.0.0.1, a scripted OpenAI-compatible
//! server, and (in `chain`) the anvil harness.
#![allow(dead_code)]

pub mod agora_peer;
pub mod browser;
pub mod chain;
pub mod chorus_peer;
pub mod factagora_peer;
pub mod generated;
pub mod node;
pub mod pg;
pub mod proxy;
pub use pg::ports;
pub mod roundtable_peer;
pub mod send_gate;

use alloy::primitives::Address;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use cresolver_devnet::agent::{AgentBehaviour, DeterminationMode, FailureMode};
use cresolver_workers::A2aProtocol;
use cresolver_workers::fanout::{WorkerSlot, WorkerTarget};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Starts a reference agent with the given behaviour; returns its base URL.
pub async fn agent(behaviour: AgentBehaviour) -> String {
    cresolver_devnet::agent::spawn("127.0.0.1:0", behaviour)
        .await
        .expect("bind agent")
        .0
}

pub fn behaviour(det: DeterminationMode, confidence: f64) -> AgentBehaviour {
    AgentBehaviour {
        name: "test".into(),
        determination: det,
        confidence: Some(confidence),
        latency: Duration::ZERO,
        failure: None,
    }
}

pub fn failing(mode: FailureMode) -> AgentBehaviour {
    AgentBehaviour {
        failure: Some(mode),
        ..behaviour(DeterminationMode::Yes, 0.8)
    }
}

/// A URL on which nothing listens: its port is held by a socket that is bound but
/// never listens (a connection is refused at once) and is kept until the test process
/// ends. A port bound and closed again was taken by another test's server once, under
/// load, and the "refused" worker answered.
pub fn closed_port_url() -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    std::mem::forget(socket);
    format!("http://127.0.0.1:{port}")
}

/// A listener that never accepts: the kernel queues the connection, nobody answers.
pub fn never_accepting() -> (std::net::TcpListener, String) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    (l, url)
}

pub fn addr(i: u8) -> Address {
    Address::repeat_byte(i)
}

pub fn slot(i: u8, url: &str) -> WorkerSlot {
    WorkerSlot {
        address: addr(i),
        target: Ok(WorkerTarget {
            endpoint: url.parse().unwrap(),
            protocol: Arc::new(A2aProtocol),
        }),
    }
}

/// One scripted reply of the fake LLM server.
#[derive(Clone)]
pub struct Scripted {
    pub status: u16,
    pub body: String,
    pub delay: Duration,
}

impl Scripted {
    pub fn content(content: &str) -> Self {
        let body = serde_json::json!({
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        });
        Self {
            status: 200,
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }
    pub fn status(status: u16) -> Self {
        Self {
            status,
            body: r#"{"error":{"message":"scripted"}}"#.into(),
            delay: Duration::ZERO,
        }
    }
}

/// Requests the fake LLM server received: (authorization header, JSON body).
pub type Recorded = Arc<Mutex<Vec<(Option<String>, Value)>>>;

#[derive(Clone, Default)]
pub struct LlmServer {
    pub script: Arc<Mutex<VecDeque<Scripted>>>,
    pub requests: Recorded,
}

/// Starts an OpenAI-compatible `/v1/chat/completions` server that answers from a
/// script (the last entry repeats). Returns its base URL (`…/v1`) and the handle.
pub async fn llm_server(script: Vec<Scripted>) -> (String, LlmServer) {
    let server = LlmServer {
        script: Arc::new(Mutex::new(script.into())),
        requests: Default::default(),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, server)
}

async fn completions(
    State(s): State<LlmServer>,
    headers: axum::http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    s.requests.lock().unwrap().push((auth, body));
    let next = {
        let mut q = s.script.lock().unwrap();
        if q.len() > 1 {
            q.pop_front().unwrap()
        } else {
            q.front().cloned().unwrap()
        }
    };
    tokio::time::sleep(next.delay).await;
    (
        StatusCode::from_u16(next.status).unwrap(),
        [("content-type", "application/json")],
        next.body,
    )
        .into_response()
}

/// A market joined by three reference workers (YES 0.9, YES 0.8, NO 0.6) on 127.0.0.1.
pub async fn market_with_three_workers() -> chain::MarketSetup {
    let mut uris = Vec::new();
    for (det, conf) in [
        (DeterminationMode::Yes, 0.9),
        (DeterminationMode::Yes, 0.8),
        (DeterminationMode::No, 0.6),
    ] {
        uris.push(chain::AgentUri::Endpoint(agent(behaviour(det, conf)).await));
    }
    chain::market_with_workers(uris).await
}

/// An LLM reply scoring workers `W1..=Wn` at 70 on every dimension.
pub fn uniform_llm_reply(n: usize) -> String {
    let entries: Vec<Value> = (1..=n)
        .map(|k| {
            let mut o = serde_json::json!({ "workerId": format!("W{k}") });
            for d in cresolver_core::Dimensions::NAMES {
                o[d] = serde_json::json!(70);
            }
            o
        })
        .collect();
    serde_json::json!({ "workers": entries }).to_string()
}

/// A workflow text with its evaluator switched to the LLM at `url` (the key from the env
/// var `key_env`, no retry, no fallback).
pub fn with_llm_evaluator(t: String, url: &str, key_env: &str) -> String {
    let t = t
        .replace("kind = \"rubric\"", "kind = \"llm\"")
        .replace("fallback = \"rubric\"", "fallback = \"fail\"");
    format!(
        "{t}\n[evaluator.llm]\nbase_url = \"{url}\"\nmodel = \"m\"\nretries = 0\napi_key_env = \"{key_env}\"\n"
    )
}

/// The errors of `instance` against the JSON Schema `schema` (draft 2020-12 unless the
/// schema names its own draft), each with the instance path it is at; empty when valid.
/// Panics when the schema itself does not compile: that is the test's failure.
pub fn schema_errors(schema: &serde_json::Value, instance: &serde_json::Value) -> Vec<String> {
    const URL: &str = "urn:cresolver:test-schema";
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V2020_12);
    compiler
        .add_resource(URL, schema.clone())
        .unwrap_or_else(|e| panic!("the schema does not load: {e}"));
    let index = compiler
        .compile(URL, &mut schemas)
        .unwrap_or_else(|e| panic!("the schema does not compile: {e:#}"));
    match schemas.validate(instance, index) {
        Ok(()) => Vec::new(),
        Err(e) => leaf_errors(&e),
    }
}

/// The innermost causes of a validation error, as "message at /instance/path".
fn leaf_errors(e: &boon::ValidationError) -> Vec<String> {
    if e.causes.is_empty() {
        return vec![format!("{} at {}", e.kind, e.instance_location)];
    }
    e.causes.iter().flat_map(leaf_errors).collect()
}
