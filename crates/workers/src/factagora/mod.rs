//! The Factagora BYOA protocol (`factagora-byoa.md`) as a round worker.
//!
//! A Factagora agent is a single webhook: the worker's endpoint URL *is* the webhook and
//! is POSTed to as is (no path appended), with `Authorization: Bearer <token>` when a
//! token is configured. The agent answers a `PredictionRequest` with an `AgentResponse`
//! (position, confidence and a five-stage ReAct cycle).
//!
//! How it maps onto a round:
//! - **resolve** = debate round 1: a `PredictionRequest` with a `predictionId` derived
//!   from the market id and question (a UUID-formatted SHA-256 digest, RFC 9562 version
//!   8, so both rounds of one market carry the same id), `title` = the question,
//!   `description` = the request's context (or the question), `deadline` = the market
//!   deadline in ISO 8601 (when the market has none, the request time: the question is
//!   being resolved now), `roundNumber` 1. The reply is validated by every rule of the
//!   spec's "Response Validation" section plus `reasoning` ≤ 1000 characters; each
//!   violation is a [`WorkerFailure::Schema`] naming the field path. `YES`/`NO` become
//!   the determination, `NEUTRAL` an abstention. The spec's soft quality checks (and a
//!   few other things noticed, like an unknown evidence type) go into
//!   [`ResolveAnswer::notes`]; they never reject. The ReAct cycle, reasoning and
//!   limitations are composed into one labelled evidence text; the evidence URLs and
//!   action sources become the sources.
//! - **challenge** = debate round 2: the same request with `roundNumber` 2 and
//!   `existingArguments` built from the other responders' answers under their opaque
//!   labels (`W1`, …; never addresses or endpoints). Factagora has no free-text
//!   challenges, so the workflow's rendered texts are not sent; the outcome's single
//!   `challenges` entry says what was asked and its single `responses` entry holds the
//!   round-2 position, confidence, synthesis and reasoning (noting a changed position).
//! - An HTTP 5xx whose body is the spec's `{error, message, code}` becomes
//!   [`WorkerFailure::Rejected`] with that code and message; other statuses (e.g. 401 for
//!   a wrong token) stay [`WorkerFailure::HttpStatus`].
//!
//! The token is a secret: it never appears in `Debug` output, logs or errors.

use super::client::{StageClient, bearer_header};
use super::protocol::parse_json;
use super::protocol::{
    ChallengeOutcome, ChallengeRequest, ListCut, MAX_EVIDENCE_BYTES, MAX_RESPONSE_BYTES,
    MAX_SOURCE_BYTES, MAX_SOURCES, PeerAnswer, ResolveAnswer, ResolveRequest, WorkerFailure,
    WorkerProtocol, type_name, validate_resolve_answer,
};
use futures::future::BoxFuture;
use secrecy::SecretString;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use url::Url;

mod response;
pub use response::{Action, AgentResponse, EvidenceItem, Position, validate_agent_response};
pub(crate) use response::{clip_chars, iso8601_utc, now_unix};

/// `reactCycle.initialThought` / `synthesisThought`: at least this many characters.
pub const MIN_THOUGHT_CHARS: usize = 20;
/// `reactCycle.initialThought` / `synthesisThought`: at most this many characters.
pub const MAX_THOUGHT_CHARS: usize = 2000;
/// `reactCycle.actions`: 1 to this many entries.
pub const MAX_ACTIONS: usize = 10;
/// `reactCycle.observations`: 1 to this many entries.
pub const MAX_OBSERVATIONS: usize = 20;
/// `reactCycle.evidence`: 1 to this many entries.
pub const MAX_EVIDENCE_ITEMS: usize = 10;
/// `reasoning` (optional): at most this many characters.
pub const MAX_REASONING_CHARS: usize = 1000;
/// `Evidence.description`: the spec's recommended maximum (a longer one is a note).
pub const MAX_DESCRIPTION_CHARS: usize = 200;
/// A peer's evidence is excerpted to this many characters as its `reasoning` in
/// `existingArguments` (the spec's bound on `reasoning`).
pub const PEER_REASONING_CHARS: usize = MAX_REASONING_CHARS;
/// Soft check: a synthesis shorter than this is "too brief".
const BRIEF_SYNTHESIS_CHARS: usize = 100;
/// Soft check: a confidence above this needs high-reliability evidence.
const HIGH_CONFIDENCE: f64 = 0.95;
/// Evidence with `reliability` at least this counts as high-reliability.
const HIGH_RELIABILITY: f64 = 0.9;
/// Soft check: fewer evidence items than this is a warning.
const MIN_RECOMMENDED_EVIDENCE: usize = 3;
/// Each free-text item (observation, action query/result, limitation, …) is clipped to
/// this many characters in the composed evidence text.
const ITEM_CHARS: usize = 600;
/// At most this many `limitations` are composed into the evidence.
const MAX_LIMITATIONS: usize = 20;
/// Values echoed in error messages are clipped to this many characters.
const ECHO_CHARS: usize = 60;

const ACTION_TYPES: [&str; 6] = [
    "web_search",
    "api_call",
    "database_query",
    "agent_review",
    "calculation",
    "document_analysis",
];
const EVIDENCE_TYPES: [&str; 3] = ["link", "data", "citation"];

/// Settings of one Factagora worker.
#[derive(Debug, Clone, Default)]
pub struct FactagoraConfig {
    /// The token sent as `Authorization: Bearer <token>`; `None` sends no header.
    pub token: Option<SecretString>,
    /// The hosts (`host` or `host:port`) the token may be sent to; to any other host
    /// the call goes without it (see [`crate::credential`]).
    pub token_hosts: Vec<String>,
}

/// The Factagora BYOA webhook protocol.
#[derive(Debug, Clone)]
pub struct FactagoraProtocol {
    token: crate::credential::Credential,
}

impl FactagoraProtocol {
    /// A worker adapter with `settings`' token, sent only to its allowed hosts.
    pub fn new(settings: FactagoraConfig) -> Self {
        Self {
            token: crate::credential::Credential::new(
                settings.token,
                &settings.token_hosts,
                "protocols.factagora.token_hosts",
            ),
        }
    }

    /// POSTs a `PredictionRequest` to the webhook as the platform does: a 5xx (the spec's
    /// error body or not) or a connection error is retried up to [`RETRIES`] times with
    /// exponential backoff from [`RETRY_BACKOFF`], all inside the stage's budget; a 4xx
    /// or an invalid reply is not. Every failed attempt is recorded: as notes of the
    /// answer that came after, or in [`WorkerFailure::Retried`].
    async fn call(
        &self,
        client: &StageClient,
        endpoint: &Url,
        body: &Value,
    ) -> Result<AgentResponse, WorkerFailure> {
        let budget = client.limits().timeout;
        let deadline = tokio::time::Instant::now() + budget;
        let mut earlier: Vec<String> = Vec::new();
        let mut wait = RETRY_BACKOFF;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let attempt = tokio::time::timeout(left, self.call_once(client, endpoint, body))
                .await
                .unwrap_or(Err(WorkerFailure::Timeout {
                    after_ms: budget.as_millis() as u64,
                }));
            match attempt {
                Ok(mut response) => {
                    for (i, e) in earlier.iter().enumerate() {
                        response
                            .notes
                            .push(format!("attempt {} of the webhook failed: {e}", i + 1));
                    }
                    return Ok(response);
                }
                Err(f)
                    if retryable(&f)
                        && earlier.len() < RETRIES
                        && tokio::time::Instant::now() + wait < deadline =>
                {
                    earlier.push(format!("{f} (retried after {} ms)", wait.as_millis()));
                    tokio::time::sleep(wait).await;
                    wait = wait.saturating_mul(2);
                }
                Err(f) if earlier.is_empty() => return Err(f),
                Err(f) => {
                    return Err(WorkerFailure::Retried {
                        attempts: earlier,
                        last: Box::new(f),
                    });
                }
            }
        }
    }

    /// One POST of a `PredictionRequest` and the validation of its reply.
    async fn call_once(
        &self,
        client: &StageClient,
        endpoint: &Url,
        body: &Value,
    ) -> Result<AgentResponse, WorkerFailure> {
        use crate::credential::Grant;
        let (token, withheld) = match self.token.for_url(endpoint) {
            Grant::Send(t) => (Some(t), None),
            Grant::None => (None, None),
            Grant::Withheld(note) => (None, Some(note)),
        };
        let headers = bearer_header(token, "Factagora token")?;
        let reply = client
            .post_json_with(endpoint.clone(), body, headers)
            .await
            .map_err(error_response)?;
        let mut response = validate_agent_response(&parse_json(&reply.body)?)?;
        response.notes.extend(withheld);
        Ok(response)
    }
}

impl WorkerProtocol for FactagoraProtocol {
    fn name(&self) -> &'static str {
        "factagora"
    }

    fn resolve<'a>(
        &'a self,
        client: &'a StageClient,
        endpoint: &'a Url,
        request: &'a ResolveRequest,
    ) -> BoxFuture<'a, Result<ResolveAnswer, WorkerFailure>> {
        Box::pin(async move {
            let body = prediction_request(request, 1, None, now_unix());
            let response = self.call(client, endpoint, &body).await?;
            response.into_answer()
        })
    }

    fn challenge<'a>(
        &'a self,
        client: &'a StageClient,
        endpoint: &'a Url,
        request: ChallengeRequest<'a>,
    ) -> BoxFuture<'a, ChallengeOutcome> {
        Box::pin(async move {
            let asked = vec![describe_round_two(request.peers)];
            let arguments = request.peers.iter().map(existing_argument).collect();
            let body = prediction_request(request.request, 2, Some(arguments), now_unix());
            match self.call(client, endpoint, &body).await {
                Ok(response) => ChallengeOutcome {
                    challenges: asked,
                    responses: vec![response.round_two_text(request.own)],
                    failure: None,
                },
                Err(failure) => ChallengeOutcome {
                    challenges: asked,
                    responses: vec![],
                    failure: Some(failure),
                },
            }
        })
    }
}

/// The `predictionId` of a market's question: SHA-256 over a domain tag, the market id
/// and the question, formatted as an RFC 9562 version-8 UUID. Deterministic, so every
/// round of one market carries the same id.
pub fn prediction_id(market_id: u64, question: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"cresolver/factagora/prediction-id/v1\0");
    h.update(market_id.to_be_bytes());
    h.update(question.as_bytes());
    let digest = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    // the uuid crate sets the version (8) and variant bits
    uuid::Uuid::new_v8(b).to_string()
}

/// The `PredictionRequest` body of `round`; `now` (Unix seconds) stands in for a missing
/// deadline.
pub fn prediction_request(
    request: &ResolveRequest,
    round: u32,
    existing_arguments: Option<Vec<Value>>,
    now: u64,
) -> Value {
    let description = match &request.context {
        Some(c) if !c.trim().is_empty() => c.clone(),
        _ => request.question.clone(),
    };
    let mut body = json!({
        "predictionId": prediction_id(request.market_id, &request.question),
        "title": request.question,
        "description": description,
        "deadline": iso8601_utc(request.deadline.unwrap_or(now)),
        "roundNumber": round,
    });
    if let (Some(args), Some(obj)) = (existing_arguments, body.as_object_mut()) {
        obj.insert("existingArguments".into(), Value::Array(args));
    }
    body
}

/// One peer as an `Argument` of `existingArguments`: its opaque label, position,
/// confidence and a bounded excerpt of its evidence.
fn existing_argument(peer: &PeerAnswer) -> Value {
    json!({
        "agentName": peer.label,
        "position": crate::protocol::wire_word(peer.answer.position()),
        "confidence": peer.answer.confidence,
        "reasoning": clip_chars(&peer.answer.evidence, PEER_REASONING_CHARS),
    })
}

/// The single challenge entry of round 2: what the agent was asked to respond to.
fn describe_round_two(peers: &[PeerAnswer]) -> String {
    if peers.is_empty() {
        return "Round 2: no other agents' arguments to respond to; restate or revise your \
                position"
            .into();
    }
    let list: Vec<String> = peers
        .iter()
        .map(|p| {
            format!(
                "{} {} {}%",
                p.label,
                crate::protocol::wire_word(p.answer.position()),
                (p.answer.confidence * 100.0).round()
            )
        })
        .collect();
    let noun = if peers.len() == 1 {
        "agent's"
    } else {
        "agents'"
    };
    format!(
        "Round 2: respond to {} other {noun} arguments: {}",
        peers.len(),
        list.join(", ")
    )
}

/// Retries of a failed webhook call ("We will retry up to 2 times with exponential
/// backoff").
pub const RETRIES: usize = 2;
/// The wait before the first retry; it doubles for the next.
pub const RETRY_BACKOFF: std::time::Duration = std::time::Duration::from_millis(250);

/// Whether the platform retries a failure: a 5xx (with the spec's error body it is
/// [`WorkerFailure::Rejected`]) or a connection error; never a 4xx or a bad reply.
fn retryable(f: &WorkerFailure) -> bool {
    match f {
        WorkerFailure::HttpStatus { status, .. } => (500..600).contains(status),
        WorkerFailure::Rejected { .. } | WorkerFailure::Connect { .. } => true,
        _ => false,
    }
}

/// Maps a 5xx carrying the spec's error body (`{error, message, code}`) to
/// [`WorkerFailure::Rejected`]; any other failure is returned unchanged. The excerpt the
/// client keeps may be cut, so the fields are also read from a truncated body.
fn error_response(failure: WorkerFailure) -> WorkerFailure {
    let WorkerFailure::HttpStatus { status, excerpt } = &failure else {
        return failure;
    };
    if !(500..600).contains(status) {
        return failure;
    }
    let field = |name: &str| -> Option<String> {
        match serde_json::from_str::<Value>(excerpt) {
            Ok(v) => v.get(name).and_then(Value::as_str).map(str::to_string),
            Err(_) => string_field_of_truncated(excerpt, name),
        }
    };
    let Some(code) = field("code").filter(|c| !c.trim().is_empty()) else {
        return failure;
    };
    let detail = field("message")
        .or_else(|| field("error"))
        .unwrap_or_else(|| format!("(no message; body starts {excerpt:?})"));
    WorkerFailure::Rejected {
        code: clip_chars(&code, ECHO_CHARS),
        detail: clip_chars(&detail, 500),
    }
}

/// Reads the string value of top-level-looking key `name` from a possibly truncated
/// JSON object text (`None` if absent or cut inside the value).
fn string_field_of_truncated(text: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\"");
    let at = text.find(&key)?;
    let rest = text[at + key.len()..].trim_start().strip_prefix(':')?;
    serde_json::Deserializer::from_str(rest.trim_start())
        .into_iter::<String>()
        .next()?
        .ok()
}

#[cfg(test)]
mod tests;
