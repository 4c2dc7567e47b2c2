//! The reference worker: a small A2A agent (`POST /a2a/resolve`, `POST /a2a/challenge`,
//! `GET /health`, `GET /.well-known/agent.json`) with deterministic behaviour chosen by
//! flags, including failure modes — for the demo, the tests, and for trying a node
//! before writing a real agent.

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How the agent decides YES/NO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DeterminationMode {
    /// Always YES.
    Yes,
    /// Always NO.
    No,
    /// From a hash of the question (the reference agent's mock mode).
    Hash,
}

/// A deliberate misbehaviour, for tests and demos of the engine's defences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FailureMode {
    /// HTTP 500 on every call.
    Error,
    /// A body that is not JSON.
    Garbage,
    /// Never answers.
    Hang,
    /// `confidence: 1.7`.
    BadConfidence,
    /// A 100 MB body, streamed.
    Huge,
    /// Answers one challenge fewer than asked.
    ShortDefence,
}

/// The agent's behaviour.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentBehaviour {
    /// The agent's name (in its agent card, `/health` and the text of its answers).
    pub name: String,
    /// How it decides YES/NO.
    pub determination: DeterminationMode,
    /// Fixed confidence; `None` derives it from the question hash.
    pub confidence: Option<f64>,
    /// Delay before each answer.
    pub latency: Duration,
    /// The misbehaviour it shows, if any.
    pub failure: Option<FailureMode>,
}

impl Default for AgentBehaviour {
    fn default() -> Self {
        Self {
            name: "reference-agent".into(),
            determination: DeterminationMode::Hash,
            confidence: None,
            latency: Duration::ZERO,
            failure: None,
        }
    }
}

struct AgentState {
    behaviour: AgentBehaviour,
    resolve_calls: AtomicU64,
    challenge_calls: AtomicU64,
}

/// The reference agent's hash (`h = h*31 + c | 0`, then `abs`), over UTF-16 code units.
pub fn question_hash(q: &str) -> u32 {
    let mut h: i32 = 0;
    for c in q.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(c));
    }
    h.unsigned_abs()
}

impl AgentBehaviour {
    fn decide(&self, question: &str) -> (bool, f64) {
        let h = question_hash(question);
        let determination = match self.determination {
            DeterminationMode::Yes => true,
            DeterminationMode::No => false,
            DeterminationMode::Hash => h.is_multiple_of(2),
        };
        let confidence = self.confidence.unwrap_or(0.5 + f64::from(h % 40) / 100.0);
        (determination, confidence)
    }
}

/// The agent's routes.
pub fn router(behaviour: AgentBehaviour) -> Router {
    let state = Arc::new(AgentState {
        behaviour,
        resolve_calls: AtomicU64::new(0),
        challenge_calls: AtomicU64::new(0),
    });
    Router::new()
        .route("/a2a/resolve", post(resolve))
        .route("/a2a/challenge", post(challenge))
        .route("/health", get(health))
        .route("/.well-known/agent.json", get(card))
        .with_state(state)
}

/// Serves the agent on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    behaviour: AgentBehaviour,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    // small answers go out at once (no Nagle wait for the peer's delayed ACK)
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(behaviour))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds `addr` and serves in a background task; returns the base URL.
pub async fn spawn(
    addr: &str,
    behaviour: AgentBehaviour,
) -> std::io::Result<(String, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let url = format!("http://{}", listener.local_addr()?);
    let handle = tokio::spawn(async move {
        use axum::serve::ListenerExt;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let _ = axum::serve(listener, router(behaviour)).await;
    });
    Ok((url, handle))
}

async fn misbehave(b: &AgentBehaviour) -> Option<Response> {
    match b.failure? {
        FailureMode::Error => Some(
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({"error": "internal error"})),
            )
                .into_response(),
        ),
        FailureMode::Garbage => Some((StatusCode::OK, "<html>definitely not json").into_response()),
        FailureMode::Hang => {
            std::future::pending::<()>().await;
            None
        }
        FailureMode::Huge => {
            let chunk = bytes::Bytes::from(vec![b' '; 64 * 1024]);
            let stream = futures::stream::iter(
                (0..1600).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
            );
            Some(
                Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from_stream(stream))
                    .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
            )
        }
        FailureMode::BadConfidence | FailureMode::ShortDefence => None,
    }
}

#[derive(Deserialize)]
struct ResolveBody {
    market_id: Option<u64>,
    question: Option<String>,
}

async fn resolve(State(s): State<Arc<AgentState>>, body: Option<Json<ResolveBody>>) -> Response {
    s.resolve_calls.fetch_add(1, Ordering::Relaxed);
    let b = &s.behaviour;
    // latency 0 answers at once (a zero sleep still waits for the timer's next tick)
    if !b.latency.is_zero() {
        tokio::time::sleep(b.latency).await;
    }
    if let Some(r) = misbehave(b).await {
        return r;
    }
    let Some(Json(ResolveBody {
        market_id: Some(market_id),
        question: Some(question),
    })) = body
    else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "Invalid request"})),
        )
            .into_response();
    };
    let (determination, mut confidence) = b.decide(&question);
    if b.failure == Some(FailureMode::BadConfidence) {
        confidence = 1.7;
    }
    let verdict = if determination { "YES" } else { "NO" };
    let evidence = format!(
        "Market {market_id}: {question}\n\nFirst, the agent {name} reviewed the question against its reference data. \
Because the deterministic signal for this question points to {verdict}, the agent answers {verdict} with \
{pct}% confidence.\n\n- Signal strength: {h} of 40.\n- Review date: 2026.\n\
However, this is a reference agent: its answer is a reproducible function of the question, not research, \
and the outcome may differ from reality.",
        name = b.name,
        pct = (confidence * 100.0).round(),
        h = question_hash(&question) % 40,
    );
    Json(json!({
        "determination": determination,
        "confidence": confidence,
        "evidence": evidence,
        "sources": [
            format!("https://example.org/{}/market/{market_id}", b.name),
            "https://data.example.com/reference-feed/2026".to_string(),
        ],
    }))
    .into_response()
}

#[derive(Deserialize)]
struct ChallengeBody {
    challenges: Vec<String>,
}

async fn challenge(
    State(s): State<Arc<AgentState>>,
    body: Option<Json<ChallengeBody>>,
) -> Response {
    s.challenge_calls.fetch_add(1, Ordering::Relaxed);
    let b = &s.behaviour;
    // latency 0 answers at once (a zero sleep still waits for the timer's next tick)
    if !b.latency.is_zero() {
        tokio::time::sleep(b.latency).await;
    }
    if let Some(r) = misbehave(b).await {
        return r;
    }
    let Some(Json(ChallengeBody { challenges })) = body else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "Invalid request"})),
        )
            .into_response();
    };
    let mut responses: Vec<String> = challenges
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "Response {n} from {name}: the determination rests on a reproducible signal; to the challenge \"{c}\" \
the honest answer is that the signal could be wrong, and the assumption of stable inputs may not hold.",
                n = i + 1,
                name = b.name
            )
        })
        .collect();
    if b.failure == Some(FailureMode::ShortDefence) {
        responses.pop();
    }
    Json(json!({ "responses": responses })).into_response()
}

async fn health(State(s): State<Arc<AgentState>>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "agent": s.behaviour.name,
        "resolve_calls": s.resolve_calls.load(Ordering::Relaxed),
        "challenge_calls": s.challenge_calls.load(Ordering::Relaxed),
    }))
}

async fn card(State(s): State<Arc<AgentState>>) -> Json<Value> {
    Json(json!({
        "name": s.behaviour.name,
        "description": "cresolver reference worker (deterministic)",
        "protocol": "cresolver",
        "skills": [{"id": "resolve", "path": "/a2a/resolve"}, {"id": "challenge", "path": "/a2a/challenge"}],
    }))
}

#[cfg(test)]
mod tests {
    use super::question_hash;

    #[test]
    fn hash_is_the_reference_one() {
        // h = (h*31 + code) | 0 over "ab": 97*31 + 98 = 3105
        assert_eq!(question_hash("ab"), 3105);
        assert_eq!(question_hash(""), 0);
    }
}
