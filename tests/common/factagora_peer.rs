//! A Factagora BYOA agent on 127.0.0.1: one webhook (`POST /webhook`) that checks the
//! bearer token (401 when it is wrong or missing), records every request it receives,
//! and answers by a scripted behaviour per debate round.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the agent answers one request.
#[derive(Clone, Debug)]
pub enum FactagoraBehaviour {
    /// 200 with this body.
    Reply(Value),
    /// The spec's error: 500 with `{error, message, code}`.
    Error { code: String, message: String },
    /// Never answers (the caller times out).
    Hang,
    /// Round 1 gets the first behaviour, later rounds the second (read from the
    /// request's `roundNumber`).
    PerRound(Box<FactagoraBehaviour>, Box<FactagoraBehaviour>),
    /// A bare status with no body (a proxy's 503, a 400).
    Status(u16),
    /// The n-th request gets the n-th behaviour; the last one repeats.
    Sequence(Vec<FactagoraBehaviour>),
}

/// One request as received: the `Authorization` header and the JSON body.
#[derive(Clone, Debug)]
pub struct Received {
    pub authorization: Option<String>,
    pub body: Value,
    /// When it arrived.
    pub at: std::time::Instant,
}

#[derive(Clone)]
struct PeerState {
    token: Option<String>,
    behaviour: FactagoraBehaviour,
    received: Arc<Mutex<Vec<Received>>>,
}

/// A running agent: its webhook URL and what it received.
pub struct FactagoraPeer {
    pub url: String,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl FactagoraPeer {
    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Starts an agent that expects `token` (none: any request is accepted).
pub async fn spawn(token: Option<&str>, behaviour: FactagoraBehaviour) -> FactagoraPeer {
    let received: Arc<Mutex<Vec<Received>>> = Default::default();
    let state = PeerState {
        token: token.map(str::to_string),
        behaviour,
        received: received.clone(),
    };
    let app = Router::new()
        .route("/webhook", post(webhook))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    FactagoraPeer { url, received }
}

async fn webhook(
    State(s): State<PeerState>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let nth = {
        let mut r = s.received.lock().unwrap();
        r.push(Received {
            authorization: authorization.clone(),
            body: body.clone(),
            at: std::time::Instant::now(),
        });
        r.len() - 1
    };
    if let Some(token) = &s.token
        && authorization.as_deref() != Some(format!("Bearer {token}").as_str())
    {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "Unauthorized"})),
        )
            .into_response();
    }
    let round = body["roundNumber"].as_u64().unwrap_or(0);
    let mut b = s.behaviour.clone();
    let behaviour = loop {
        b = match b {
            FactagoraBehaviour::PerRound(first, later) => {
                if round <= 1 {
                    *first
                } else {
                    *later
                }
            }
            FactagoraBehaviour::Sequence(mut steps) if !steps.is_empty() => {
                let i = nth.min(steps.len() - 1);
                steps.swap_remove(i)
            }
            other => break other,
        };
    };
    match behaviour {
        FactagoraBehaviour::Reply(v) => Json(v).into_response(),
        FactagoraBehaviour::Error { code, message } => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": "Internal agent error", "message": message, "code": code})),
        )
            .into_response(),
        FactagoraBehaviour::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        FactagoraBehaviour::Status(code) => StatusCode::from_u16(code)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
        FactagoraBehaviour::PerRound(..) | FactagoraBehaviour::Sequence(..) => {
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// A response that passes every validation rule and every quality check.
pub fn good_response(position: &str, confidence: f64) -> Value {
    json!({
        "position": position,
        "confidence": confidence,
        "reactCycle": {
            "initialThought": "The reference feed publishes the figure daily; I expect it settled the question.",
            "actions": [
                {"type": "web_search", "query": "reference feed latest value", "result": "Feed shows the threshold crossed on the 3rd", "source": "https://feed.example/search"},
                {"type": "api_call", "query": "GET /v1/latest", "result": "value=105, threshold=100", "source": "https://api.feed.example/v1/latest"}
            ],
            "observations": [
                "The feed value exceeds the threshold",
                "Two independent mirrors agree"
            ],
            "synthesisThought": "Both the primary feed and its mirrors report a value above the threshold before the deadline, so the market condition is met with high confidence.",
            "evidence": [
                {"type": "link", "title": "Reference feed page", "url": "https://feed.example/page", "description": "Primary source of the value", "reliability": 0.95},
                {"type": "data", "title": "API reading 105 > 100", "description": "Raw API value at the deadline", "reliability": 0.9},
                {"type": "citation", "title": "Mirror archive", "url": "https://mirror.example/archive", "reliability": 0.8}
            ]
        },
        "reasoning": "The feed and two mirrors agree the threshold was crossed.",
        "limitations": ["The mirrors could share an upstream"]
    })
}

/// [`good_response`] with one JSON-pointer location replaced.
pub fn with(mut v: Value, pointer: &str, value: Value) -> Value {
    *v.pointer_mut(pointer).unwrap() = value;
    v
}
