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
pub struct FactagoraSettings {
    /// The token sent as `Authorization: Bearer <token>`; `None` sends no header.
    pub token: Option<SecretString>,
    /// The hosts (`host` or `host:port`) the token may be sent to; to any other host
    /// the call goes without it (see [`crate::workers::credential`]).
    pub token_hosts: Vec<String>,
}

/// The Factagora BYOA webhook protocol.
#[derive(Debug, Clone)]
pub struct FactagoraProtocol {
    token: crate::workers::credential::Credential,
}

impl FactagoraProtocol {
    pub fn new(settings: FactagoraSettings) -> Self {
        Self {
            token: crate::workers::credential::Credential::new(
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
        use crate::workers::credential::Grant;
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
        "position": peer.answer.position(),
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
                p.answer.position(),
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

/// `YES`, `NO` or `NEUTRAL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Yes,
    No,
    Neutral,
}

impl Position {
    pub fn as_str(self) -> &'static str {
        match self {
            Position::Yes => "YES",
            Position::No => "NO",
            Position::Neutral => "NEUTRAL",
        }
    }
}

/// One `reactCycle.actions` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    pub kind: String,
    pub query: String,
    pub result: String,
    pub source: Option<String>,
}

/// One `reactCycle.evidence` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct EvidenceItem {
    pub kind: String,
    pub title: String,
    pub url: Option<String>,
    pub description: Option<String>,
    pub reliability: Option<f64>,
}

/// A validated `AgentResponse`, with the soft warnings found while validating it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentResponse {
    pub position: Position,
    pub confidence: f64,
    pub initial_thought: String,
    pub actions: Vec<Action>,
    pub observations: Vec<String>,
    pub synthesis_thought: String,
    pub evidence: Vec<EvidenceItem>,
    pub reasoning: Option<String>,
    pub limitations: Vec<String>,
    /// Soft quality warnings (never a rejection).
    pub notes: Vec<String>,
}

/// Validates an `AgentResponse` by every rule of the spec's "Response Validation"
/// section (and `reasoning` ≤ 1000 characters). Optional fields of the wrong JSON type
/// are violations too; the quality checks become [`AgentResponse::notes`].
pub fn validate_agent_response(v: &Value) -> Result<AgentResponse, WorkerFailure> {
    let obj = v
        .as_object()
        .ok_or_else(|| WorkerFailure::schema("response is not a JSON object"))?;
    let mut notes = Vec::new();

    let position = match obj.get("position") {
        Some(Value::String(s)) => match s.as_str() {
            "YES" => Position::Yes,
            "NO" => Position::No,
            "NEUTRAL" => Position::Neutral,
            other => {
                return Err(WorkerFailure::schema(format!(
                    "`position` must be exactly \"YES\", \"NO\" or \"NEUTRAL\" \
                     (case-sensitive), got {:?}",
                    clip_chars(other, ECHO_CHARS)
                )));
            }
        },
        Some(other) => return Err(wrong_type("position", "a string", other)),
        None => return Err(missing("position")),
    };

    let confidence = match obj.get("confidence") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(other) => return Err(wrong_type("confidence", "a number", other)),
        None => return Err(missing("confidence")),
    };
    if !(confidence.is_finite() && (0.0..=1.0).contains(&confidence)) {
        return Err(WorkerFailure::schema(format!(
            "`confidence` = {confidence} is outside [0.0, 1.0]"
        )));
    }

    let cycle = match obj.get("reactCycle") {
        Some(Value::Object(m)) => m,
        Some(other) => return Err(wrong_type("reactCycle", "an object", other)),
        None => return Err(missing("reactCycle")),
    };

    let initial_thought = thought(cycle, "initialThought")?;

    let actions_raw = bounded_array(cycle, "actions", "reactCycle.actions", MAX_ACTIONS)?;
    let mut actions = Vec::with_capacity(actions_raw.len());
    for (i, item) in actions_raw.iter().enumerate() {
        let path = format!("reactCycle.actions[{i}]");
        let m = item
            .as_object()
            .ok_or_else(|| wrong_type(&path, "an object", item))?;
        let kind = required_text(m, "type", &path)?;
        if !ACTION_TYPES.contains(&kind.as_str()) {
            notes.push(format!(
                "`{path}.type` {:?} is not one of the spec's action types",
                clip_chars(&kind, ECHO_CHARS)
            ));
        }
        actions.push(Action {
            kind,
            query: required_text(m, "query", &path)?,
            result: required_text(m, "result", &path)?,
            source: optional_text(m, "source", &path)?,
        });
        // `timestamp` is optional and unused; only its type is checked.
        optional_text(m, "timestamp", &path)?;
    }

    let observations_raw = bounded_array(
        cycle,
        "observations",
        "reactCycle.observations",
        MAX_OBSERVATIONS,
    )?;
    let mut observations = Vec::with_capacity(observations_raw.len());
    for (i, item) in observations_raw.iter().enumerate() {
        let path = format!("reactCycle.observations[{i}]");
        match item {
            Value::String(s) if s.trim().is_empty() => {
                notes.push(format!("`{path}` is empty"));
            }
            Value::String(s) => observations.push(s.clone()),
            other => return Err(wrong_type(&path, "a string", other)),
        }
    }
    if observations.is_empty() {
        notes.push("every observation is empty".into());
    }

    let synthesis_thought = thought(cycle, "synthesisThought")?;

    let evidence_raw = bounded_array(cycle, "evidence", "reactCycle.evidence", MAX_EVIDENCE_ITEMS)?;
    let mut evidence = Vec::with_capacity(evidence_raw.len());
    for (i, item) in evidence_raw.iter().enumerate() {
        let path = format!("reactCycle.evidence[{i}]");
        let m = item
            .as_object()
            .ok_or_else(|| wrong_type(&path, "an object", item))?;
        let kind = required_text(m, "type", &path)?;
        if !EVIDENCE_TYPES.contains(&kind.as_str()) {
            notes.push(format!(
                "`{path}.type` {:?} is not link, data or citation",
                clip_chars(&kind, ECHO_CHARS)
            ));
        }
        let title = required_text(m, "title", &path)?;
        let url = optional_text(m, "url", &path)?;
        let description = optional_text(m, "description", &path)?;
        if let Some(d) = &description {
            let n = d.chars().count();
            if n > MAX_DESCRIPTION_CHARS {
                notes.push(format!(
                    "`{path}.description` is {n} characters (the spec recommends at most \
                     {MAX_DESCRIPTION_CHARS})"
                ));
            }
        }
        let reliability = match m.get("reliability") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_f64() {
                Some(r) if r.is_finite() && (0.0..=1.0).contains(&r) => Some(r),
                _ => {
                    notes.push(format!(
                        "`{path}.reliability` = {n} is outside [0, 1]; ignored"
                    ));
                    None
                }
            },
            Some(other) => {
                return Err(wrong_type(
                    &format!("{path}.reliability"),
                    "a number",
                    other,
                ));
            }
        };
        evidence.push(EvidenceItem {
            kind,
            title,
            url,
            description,
            reliability,
        });
    }

    let reasoning = optional_text(obj, "reasoning", "")?;
    if let Some(r) = &reasoning {
        let n = r.chars().count();
        if n > MAX_REASONING_CHARS {
            return Err(WorkerFailure::schema(format!(
                "`reasoning` is {n} characters; at most {MAX_REASONING_CHARS}"
            )));
        }
    }

    let limitations = match obj.get("limitations") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len().min(MAX_LIMITATIONS));
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.push(s.clone()),
                    other => {
                        return Err(wrong_type(&format!("limitations[{i}]"), "a string", other));
                    }
                }
            }
            out
        }
        Some(other) => return Err(wrong_type("limitations", "an array of strings", other)),
    };

    // The spec's soft quality checks.
    if confidence > HIGH_CONFIDENCE
        && !evidence
            .iter()
            .any(|e| e.reliability.is_some_and(|r| r >= HIGH_RELIABILITY))
    {
        notes.push(format!(
            "confidence {confidence} is above {HIGH_CONFIDENCE} without high-reliability \
             evidence (no item with reliability >= {HIGH_RELIABILITY})"
        ));
    }
    if evidence.len() < MIN_RECOMMENDED_EVIDENCE {
        notes.push(format!(
            "only {} evidence item(s); the spec recommends at least {MIN_RECOMMENDED_EVIDENCE}",
            evidence.len()
        ));
    }
    if !actions.iter().any(|a| a.kind == "web_search") {
        notes.push("no web_search action backs the external claims".into());
    }
    let synthesis_chars = synthesis_thought.chars().count();
    if synthesis_chars < BRIEF_SYNTHESIS_CHARS {
        notes.push(format!(
            "synthesisThought is too brief ({synthesis_chars} characters; under \
             {BRIEF_SYNTHESIS_CHARS})"
        ));
    }

    Ok(AgentResponse {
        position,
        confidence,
        initial_thought,
        actions,
        observations,
        synthesis_thought,
        evidence,
        reasoning,
        limitations,
        notes,
    })
}

impl AgentResponse {
    /// The resolve-stage answer: determination (or abstention for `NEUTRAL`), the
    /// composed evidence text, the sources, and the soft warnings as notes. The result
    /// passes [`validate_resolve_answer`]'s bounds.
    pub fn into_answer(self) -> Result<ResolveAnswer, WorkerFailure> {
        let mut notes = self.notes.clone();
        let mut evidence = self.compose_evidence();
        if evidence.len() > MAX_EVIDENCE_BYTES {
            evidence = clip_bytes(&evidence, MAX_EVIDENCE_BYTES);
            notes.push(format!(
                "composed evidence was cut to {MAX_EVIDENCE_BYTES} bytes"
            ));
        }
        let mut cuts = Vec::new();
        let sources = self.sources(&mut notes, &mut cuts);
        let mut answer = validate_resolve_answer(&json!({
            "determination": self.position == Position::Yes,
            "confidence": self.confidence,
            "evidence": evidence,
            "sources": sources,
        }))?;
        answer.abstain = self.position == Position::Neutral;
        answer.notes = notes;
        answer.cuts.extend(cuts);
        Ok(answer)
    }

    /// One readable text with labelled sections, each free-text item clipped.
    pub fn compose_evidence(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Position: {} (confidence {:.2})",
            self.position.as_str(),
            self.confidence
        );
        if let Some(r) = self.reasoning.as_deref().filter(|r| !r.trim().is_empty()) {
            let _ = writeln!(s, "\nSummary: {}", r.trim());
        }
        let _ = writeln!(s, "\nInitial thought: {}", self.initial_thought.trim());
        s.push_str("\nActions:\n");
        for (i, a) in self.actions.iter().enumerate() {
            let _ = write!(
                s,
                "{}. {}: {:?} -> {}",
                i + 1,
                clip_chars(&a.kind, ECHO_CHARS),
                clip_chars(a.query.trim(), ITEM_CHARS / 2),
                clip_chars(a.result.trim(), ITEM_CHARS)
            );
            if let Some(src) = &a.source {
                let _ = write!(s, " ({})", clip_chars(src.trim(), ITEM_CHARS / 2));
            }
            s.push('\n');
        }
        s.push_str("\nObservations:\n");
        for o in &self.observations {
            let _ = writeln!(s, "- {}", clip_chars(o.trim(), ITEM_CHARS));
        }
        let _ = writeln!(s, "\nSynthesis: {}", self.synthesis_thought.trim());
        s.push_str("\nEvidence:\n");
        for e in &self.evidence {
            let _ = write!(
                s,
                "- [{}] {}",
                clip_chars(&e.kind, ECHO_CHARS),
                clip_chars(e.title.trim(), ITEM_CHARS / 2)
            );
            if let Some(d) = e.description.as_deref().filter(|d| !d.trim().is_empty()) {
                let _ = write!(s, ": {}", clip_chars(d.trim(), ITEM_CHARS / 2));
            }
            if let Some(r) = e.reliability {
                let _ = write!(s, " (reliability {r:.2})");
            }
            if let Some(u) = e.url.as_deref().filter(|u| !u.trim().is_empty()) {
                let _ = write!(s, " <{}>", clip_chars(u.trim(), ITEM_CHARS / 2));
            }
            s.push('\n');
        }
        let limitations: Vec<&String> = self
            .limitations
            .iter()
            .filter(|l| !l.trim().is_empty())
            .take(MAX_LIMITATIONS)
            .collect();
        if !limitations.is_empty() {
            s.push_str("\nLimitations:\n");
            for l in limitations {
                let _ = writeln!(s, "- {}", clip_chars(l.trim(), ITEM_CHARS));
            }
        }
        s.trim_end().to_string()
    }

    /// Evidence URLs then action sources, trimmed and deduplicated; over-long entries
    /// and entries past [`MAX_SOURCES`] are dropped with a note.
    fn sources(&self, notes: &mut Vec<String>, cuts: &mut Vec<ListCut>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let (mut too_long, mut too_many) = (0usize, 0usize);
        let candidates = self
            .evidence
            .iter()
            .filter_map(|e| e.url.as_deref())
            .chain(self.actions.iter().filter_map(|a| a.source.as_deref()));
        for c in candidates {
            let c = c.trim();
            if c.is_empty() || out.iter().any(|s| s == c) {
                continue;
            }
            if c.len() > MAX_SOURCE_BYTES {
                too_long += 1;
            } else if out.len() >= MAX_SOURCES {
                too_many += 1;
            } else {
                out.push(c.to_string());
            }
        }
        if too_long > 0 {
            notes.push(format!(
                "{too_long} source(s) longer than {MAX_SOURCE_BYTES} bytes dropped"
            ));
        }
        if too_many > 0 {
            notes.push(format!(
                "{too_many} source(s) past the first {MAX_SOURCES} dropped"
            ));
        }
        if too_long + too_many > 0 {
            cuts.push(ListCut {
                field: "sources".into(),
                received: out.len() + too_long + too_many,
                kept: out.len(),
                oversize: too_long,
                max: MAX_SOURCES,
            });
        }
        out
    }

    /// The challenge response of round 2, noting a change from `own` (round 1).
    fn round_two_text(&self, own: &ResolveAnswer) -> String {
        let before = own.position();
        let now = self.position.as_str();
        let change = if before == now {
            "unchanged from round 1".to_string()
        } else {
            format!("position changed from {before} in round 1")
        };
        let mut s = format!(
            "Round 2: {now} at {}% ({change}). Synthesis: {}",
            (self.confidence * 100.0).round(),
            self.synthesis_thought.trim()
        );
        if let Some(r) = self.reasoning.as_deref().filter(|r| !r.trim().is_empty()) {
            let _ = write!(s, " Reasoning: {}", r.trim());
        }
        clip_bytes(&s, MAX_RESPONSE_BYTES)
    }
}

/// A required ReAct thought: a non-empty string of 20..=2000 characters.
fn thought(cycle: &Map<String, Value>, key: &str) -> Result<String, WorkerFailure> {
    let path = format!("reactCycle.{key}");
    let s = match cycle.get(key) {
        Some(Value::String(s)) => s,
        Some(other) => return Err(wrong_type(&path, "a string", other)),
        None => return Err(missing(&path)),
    };
    if s.trim().is_empty() {
        return Err(WorkerFailure::schema(format!("`{path}` is empty")));
    }
    let n = s.chars().count();
    if n < MIN_THOUGHT_CHARS {
        return Err(WorkerFailure::schema(format!(
            "`{path}` is {n} characters; at least {MIN_THOUGHT_CHARS}"
        )));
    }
    if n > MAX_THOUGHT_CHARS {
        return Err(WorkerFailure::schema(format!(
            "`{path}` is {n} characters; at most {MAX_THOUGHT_CHARS}"
        )));
    }
    Ok(s.clone())
}

/// A required array of 1..=`max` entries.
fn bounded_array<'v>(
    obj: &'v Map<String, Value>,
    key: &str,
    path: &str,
    max: usize,
) -> Result<&'v Vec<Value>, WorkerFailure> {
    let items = match obj.get(key) {
        Some(Value::Array(items)) => items,
        Some(other) => return Err(wrong_type(path, "an array", other)),
        None => return Err(missing(path)),
    };
    if items.is_empty() {
        return Err(WorkerFailure::schema(format!(
            "`{path}` has 0 entries; at least 1"
        )));
    }
    if items.len() > max {
        return Err(WorkerFailure::schema(format!(
            "`{path}` has {} entries; at most {max}",
            items.len()
        )));
    }
    Ok(items)
}

/// A required, non-blank string field of an item at `path`.
fn required_text(m: &Map<String, Value>, key: &str, path: &str) -> Result<String, WorkerFailure> {
    let full = format!("{path}.{key}");
    match m.get(key) {
        Some(Value::String(s)) if s.trim().is_empty() => {
            Err(WorkerFailure::schema(format!("`{full}` is empty")))
        }
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(wrong_type(&full, "a string", other)),
        None => Err(missing(&full)),
    }
}

/// An optional string field (`null` counts as absent) of an item at `path` (`""` for
/// the top level).
fn optional_text(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, WorkerFailure> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => {
            let full = if path.is_empty() {
                key.to_string()
            } else {
                format!("{path}.{key}")
            };
            Err(wrong_type(&full, "a string", other))
        }
    }
}

fn missing(path: &str) -> WorkerFailure {
    WorkerFailure::schema(format!("`{path}` is missing"))
}

fn wrong_type(path: &str, expected: &str, got: &Value) -> WorkerFailure {
    WorkerFailure::schema(format!(
        "`{path}` must be {expected}, got {}",
        type_name(got)
    ))
}

/// At most `max` characters of `s`, with `…` when cut.
pub(crate) fn clip_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// At most `max` bytes of `s` (cut on a character boundary, `…` included).
pub(crate) fn clip_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The current time in Unix seconds.
pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `YYYY-MM-DDTHH:MM:SSZ` (ISO 8601, UTC) of a Unix timestamp.
pub(crate) fn iso8601_utc(secs: u64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(FORMAT).ok())
        .unwrap_or_else(|| "9999-12-31T23:59:59Z".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Value {
        json!({
            "position": "NO",
            "confidence": 0.85,
            "reactCycle": {
                "initialThought": "AGI has been predicted for decades but never materialized.",
                "actions": [
                    {"type": "database_query", "query": "historical AGI predictions", "result": "95% wrong"},
                    {"type": "web_search", "query": "AGI compute", "result": "100x gap", "source": "https://search.example/q"}
                ],
                "observations": ["Base rate favours skepticism", "Compute gap is large"],
                "synthesisThought": "Every data point supports skepticism. Even optimistic estimates put AGI at 2030+, and alignment is unsolved, so 2026 is very unlikely.",
                "evidence": [
                    {"type": "data", "title": "Historical accuracy: 5%", "description": "95% failed", "reliability": 0.95},
                    {"type": "link", "title": "Compute requirements", "url": "https://arxiv.example/1"},
                    {"type": "citation", "title": "Alignment status", "url": "https://arxiv.example/1"}
                ]
            },
            "reasoning": "Base rates, hardware and alignment make it unlikely.",
            "limitations": ["Unknown unknowns"]
        })
    }

    #[test]
    fn good_response_maps_to_answer() {
        let r = validate_agent_response(&good()).unwrap();
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        let a = r.into_answer().unwrap();
        assert!(!a.determination && !a.abstain);
        assert_eq!(a.confidence, 0.85);
        assert_eq!(
            a.sources,
            vec!["https://arxiv.example/1", "https://search.example/q"]
        );
        for needle in [
            "Position: NO (confidence 0.85)",
            "Summary: Base rates",
            "Initial thought: AGI has been",
            "2. web_search: \"AGI compute\" -> 100x gap (https://search.example/q)",
            "- Compute gap is large",
            "Synthesis: Every data point",
            "- [data] Historical accuracy: 5%: 95% failed (reliability 0.95)",
            "Limitations:\n- Unknown unknowns",
        ] {
            assert!(a.evidence.contains(needle), "{needle:?} in {}", a.evidence);
        }
    }

    #[test]
    fn neutral_abstains() {
        let mut v = good();
        v["position"] = json!("NEUTRAL");
        let a = validate_agent_response(&v).unwrap().into_answer().unwrap();
        assert!(a.abstain && !a.determination);
        assert_eq!(a.position(), "NEUTRAL");
    }

    #[test]
    fn every_validation_rule_names_its_field() {
        let long = "x".repeat(2001);
        let cases: Vec<(&str, Value, &str)> = vec![
            ("/position", json!("yes"), "`position` must be exactly"),
            ("/position", json!(1), "`position` must be a string"),
            ("/confidence", json!(1.01), "`confidence` = 1.01 is outside"),
            ("/confidence", json!(-0.5), "outside [0.0, 1.0]"),
            ("/confidence", json!("0.5"), "`confidence` must be a number"),
            ("/reactCycle", json!([]), "`reactCycle` must be an object"),
            (
                "/reactCycle/initialThought",
                json!("short"),
                "`reactCycle.initialThought` is 5 characters; at least 20",
            ),
            (
                "/reactCycle/initialThought",
                json!("                         "),
                "`reactCycle.initialThought` is empty",
            ),
            (
                "/reactCycle/initialThought",
                json!(long),
                "is 2001 characters; at most 2000",
            ),
            (
                "/reactCycle/synthesisThought",
                json!("too short"),
                "`reactCycle.synthesisThought` is 9 characters",
            ),
            (
                "/reactCycle/actions",
                json!([]),
                "`reactCycle.actions` has 0 entries; at least 1",
            ),
            (
                "/reactCycle/actions",
                json!({}),
                "`reactCycle.actions` must be an array",
            ),
            (
                "/reactCycle/actions",
                json!(vec![
                    json!({"type":"web_search","query":"q","result":"r"});
                    11
                ]),
                "has 11 entries; at most 10",
            ),
            (
                "/reactCycle/actions/0/query",
                Value::Null,
                "`reactCycle.actions[0].query` must be a string",
            ),
            (
                "/reactCycle/actions/1/result",
                json!(""),
                "`reactCycle.actions[1].result` is empty",
            ),
            (
                "/reactCycle/observations",
                json!([]),
                "`reactCycle.observations` has 0 entries",
            ),
            (
                "/reactCycle/observations",
                json!(vec!["o"; 21]),
                "has 21 entries; at most 20",
            ),
            (
                "/reactCycle/observations/1",
                json!(3),
                "`reactCycle.observations[1]` must be a string",
            ),
            (
                "/reactCycle/evidence",
                json!([]),
                "`reactCycle.evidence` has 0 entries",
            ),
            (
                "/reactCycle/evidence",
                json!(vec![json!({"type":"data","title":"t"}); 11]),
                "has 11 entries; at most 10",
            ),
            (
                "/reactCycle/evidence/2/type",
                json!(7),
                "`reactCycle.evidence[2].type` must be a string",
            ),
            (
                "/reactCycle/evidence/0/reliability",
                json!("high"),
                "`reactCycle.evidence[0].reliability` must be a number",
            ),
            (
                "/reactCycle/evidence/1/url",
                json!(5),
                "`reactCycle.evidence[1].url` must be a string",
            ),
            (
                "/reasoning",
                json!("r".repeat(1001)),
                "`reasoning` is 1001 characters; at most 1000",
            ),
            ("/reasoning", json!(["r"]), "`reasoning` must be a string"),
            (
                "/limitations",
                json!("none"),
                "`limitations` must be an array of strings",
            ),
        ];
        for (pointer, value, needle) in cases {
            let mut v = good();
            *v.pointer_mut(pointer).unwrap() = value;
            let err = validate_agent_response(&v).unwrap_err();
            assert!(
                matches!(err, WorkerFailure::Schema { .. }),
                "{pointer}: {err}"
            );
            assert!(err.to_string().contains(needle), "{pointer}: {err}");
        }
        let removals = [
            (
                "/reactCycle/evidence/1",
                "title",
                "`reactCycle.evidence[1].title` is missing",
            ),
            (
                "/reactCycle/actions/0",
                "type",
                "`reactCycle.actions[0].type` is missing",
            ),
            (
                "/reactCycle",
                "observations",
                "`reactCycle.observations` is missing",
            ),
            ("", "confidence", "`confidence` is missing"),
            ("", "reactCycle", "`reactCycle` is missing"),
        ];
        for (pointer, key, needle) in removals {
            let mut v = good();
            v.pointer_mut(pointer)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .remove(key);
            let err = validate_agent_response(&v).unwrap_err();
            assert!(err.to_string().contains(needle), "{key}: {err}");
        }
        // Boundaries are inclusive.
        let mut v = good();
        v["reactCycle"]["initialThought"] = json!("x".repeat(20));
        v["reactCycle"]["synthesisThought"] = json!("é".repeat(2000));
        v["reasoning"] = json!("r".repeat(1000));
        v["confidence"] = json!(1.0);
        assert!(validate_agent_response(&v).is_ok());
        let mut v = good();
        v["confidence"] = json!(0);
        assert!(validate_agent_response(&v).is_ok());
    }

    #[test]
    fn soft_checks_are_notes() {
        let mut v = good();
        v["confidence"] = json!(0.97);
        v["reactCycle"]["actions"] = json!([{"type": "guess", "query": "q", "result": "r"}]);
        v["reactCycle"]["evidence"] = json!([
            {"type": "video", "title": "t", "reliability": 0.5, "description": "d".repeat(201)},
            {"type": "data", "title": "u", "reliability": 3}
        ]);
        v["reactCycle"]["synthesisThought"] = json!("A brief synthesis of things.");
        let r = validate_agent_response(&v).unwrap();
        let all = r.notes.join("\n");
        for needle in [
            "confidence 0.97 is above 0.95 without high-reliability evidence",
            "only 2 evidence item(s)",
            "no web_search action",
            "synthesisThought is too brief (28 characters",
            "`reactCycle.actions[0].type` \"guess\" is not one of",
            "`reactCycle.evidence[0].type` \"video\" is not link, data or citation",
            "`reactCycle.evidence[0].description` is 201 characters",
            "`reactCycle.evidence[1].reliability` = 3 is outside [0, 1]",
        ] {
            assert!(all.contains(needle), "{needle:?} in {all}");
        }
        let a = r.into_answer().unwrap();
        assert_eq!(a.notes.len(), 8);
    }

    #[test]
    fn evidence_and_sources_are_bounded() {
        let mut v = good();
        let big = "😀".repeat(1990);
        v["reactCycle"]["observations"] = json!(vec![big.clone(); 20]);
        v["reactCycle"]["initialThought"] = json!(big.clone());
        v["limitations"] = json!(vec![big; 200]);
        let url = format!("https://x.example/{}", "a".repeat(MAX_SOURCE_BYTES));
        v["reactCycle"]["evidence"][0]["url"] = json!(url);
        let a = validate_agent_response(&v).unwrap().into_answer().unwrap();
        assert!(a.evidence.len() <= MAX_EVIDENCE_BYTES);
        assert!(a.evidence.ends_with('…'));
        assert!(a.notes.iter().any(|n| n.contains("cut to 65536 bytes")));
        assert_eq!(a.sources.len(), 2);
        assert!(a.notes.iter().any(|n| n.contains("longer than 2048 bytes")));
    }

    #[test]
    fn prediction_request_shape() {
        let req = ResolveRequest {
            market_id: 7,
            question: "Will it rain?".into(),
            deadline: Some(1_798_761_599),
            context: None,
        };
        let body = prediction_request(&req, 1, None, 0);
        assert_eq!(body["title"], "Will it rain?");
        assert_eq!(body["description"], "Will it rain?");
        assert_eq!(body["deadline"], "2026-12-31T23:59:59Z");
        assert_eq!(body["roundNumber"], 1);
        assert!(body.get("existingArguments").is_none());
        let id = body["predictionId"].as_str().unwrap();
        assert_eq!(id, prediction_id(7, "Will it rain?"));
        assert_ne!(id, prediction_id(8, "Will it rain?"));
        let parsed = uuid::Uuid::parse_str(id).unwrap();
        assert_eq!(parsed.get_version_num(), 8);
        let no_deadline = ResolveRequest {
            deadline: None,
            context: Some("ctx".into()),
            ..req
        };
        let body = prediction_request(&no_deadline, 2, Some(vec![]), 86_400 * 365);
        assert_eq!(body["deadline"], "1971-01-01T00:00:00Z");
        assert_eq!(body["description"], "ctx");
        assert_eq!(body["existingArguments"], json!([]));
    }

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601_utc(1_770_819_309), "2026-02-11T14:15:09Z");
    }

    #[test]
    fn error_body_becomes_rejected_even_when_cut() {
        let full = WorkerFailure::HttpStatus {
            status: 500,
            excerpt: r#"{"code":"LLM_API_ERROR","error":"Internal agent error","message":"Failed to connect"}"#.into(),
        };
        assert_eq!(
            error_response(full),
            WorkerFailure::Rejected {
                code: "LLM_API_ERROR".into(),
                detail: "Failed to connect".into()
            }
        );
        let cut = WorkerFailure::HttpStatus {
            status: 503,
            excerpt: r#"{"code": "RATE_LIMIT", "error": "Too many", "message": "slow do"#.into(),
        };
        assert_eq!(
            error_response(cut),
            WorkerFailure::Rejected {
                code: "RATE_LIMIT".into(),
                detail: "Too many".into()
            }
        );
        for kept in [
            WorkerFailure::HttpStatus {
                status: 401,
                excerpt: r#"{"code":"X","error":"Unauthorized"}"#.into(),
            },
            WorkerFailure::HttpStatus {
                status: 500,
                excerpt: "oops".into(),
            },
            WorkerFailure::Timeout { after_ms: 5 },
        ] {
            assert_eq!(error_response(kept.clone()), kept);
        }
    }

    #[test]
    fn debug_redacts_the_token() {
        let s = FactagoraSettings {
            token: Some("s3cret-token".into()),
            token_hosts: vec!["api.factagora.example".into()],
        };
        let p = FactagoraProtocol::new(s.clone());
        for text in [format!("{s:?}"), format!("{p:?}")] {
            assert!(!text.contains("s3cret"), "{text}");
            assert!(text.contains("REDACTED"), "{text}");
        }
    }

    #[test]
    fn round_two_text_notes_a_change() {
        let r = validate_agent_response(&good()).unwrap();
        let own_yes = ResolveAnswer {
            determination: true,
            confidence: 0.8,
            evidence: "e".into(),
            sources: vec![],
            abstain: false,
            notes: vec![],
            cuts: vec![],
        };
        let t = r.round_two_text(&own_yes);
        assert!(
            t.starts_with("Round 2: NO at 85% (position changed from YES in round 1)"),
            "{t}"
        );
        assert!(t.contains("Reasoning: Base rates"), "{t}");
        let own_no = ResolveAnswer {
            determination: false,
            ..own_yes
        };
        assert!(
            r.round_two_text(&own_no)
                .contains("(unchanged from round 1)")
        );
    }
}
