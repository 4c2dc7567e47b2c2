//! The worker protocol layer: typed requests and answers of the two round stages, their
//! strict validation, the typed reasons a worker call fails, and the trait every agent
//! protocol implements (A2A is the first; other protocols plug in beside it).

use super::client::StageClient;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

/// Evidence longer than this (bytes) is a schema violation.
pub const MAX_EVIDENCE_BYTES: usize = 64 * 1024;
/// At most this many sources are accepted.
pub const MAX_SOURCES: usize = 64;
/// A single source longer than this (bytes) is a schema violation.
pub const MAX_SOURCE_BYTES: usize = 2048;
/// A single challenge response longer than this (bytes) is a schema violation.
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024;

/// `POST /a2a/resolve` request body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolveRequest {
    /// The market being resolved.
    pub market_id: u64,
    /// The market's question.
    pub question: String,
    /// The market's deadline (Unix seconds), when it has one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub deadline: Option<u64>,
    /// Extra context the market gives for its question, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub context: Option<String>,
}

/// A validated resolve answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolveAnswer {
    /// YES (`true`) or NO. Meaningless when `abstain` is set (adapters write `false`).
    pub determination: bool,
    /// The worker's confidence in its determination, 0–1.
    pub confidence: f64,
    /// The worker's evidence and reasoning, free text (at most
    /// [`MAX_EVIDENCE_BYTES`]).
    pub evidence: String,
    /// The sources it cites (at most [`MAX_SOURCES`], each at most
    /// [`MAX_SOURCE_BYTES`]).
    pub sources: Vec<String>,
    /// The worker took no position (Factagora's `NEUTRAL`): it is challenged, scored and
    /// rewarded like any responder, but its vote weighs nothing. Never set by A2A.
    #[serde(default, skip_serializing_if = "is_false")]
    pub abstain: bool,
    /// What the protocol adapter noticed but did not reject (a spec's soft warnings, a
    /// changed position in a later round), recorded in the transcript.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Lists cut to their bound: the answer is kept with what fits (recorded in the
    /// transcript).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cuts: Vec<ListCut>,
}

impl ResolveAnswer {
    /// The answer's position (its wire `determination` and `abstain` together).
    pub fn position(&self) -> cresolver_core::Position {
        cresolver_core::Position::from_answer(self.determination, self.abstain)
    }
}

/// A list field of an answer that was longer than its bound: kept, cut to the bound.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListCut {
    /// The field (`sources`).
    pub field: String,
    /// Entries the worker sent.
    pub received: usize,
    /// Entries kept.
    pub kept: usize,
    /// Entries dropped because one alone is over its size bound.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub oversize: usize,
    /// The bound on the number of entries.
    pub max: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl ListCut {
    /// What the cut did, for a person.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "`{}`: {} received, {} kept (at most {})",
            self.field, self.received, self.kept, self.max
        );
        if self.oversize > 0 {
            s.push_str(&format!(
                ", {} dropped for being over {MAX_SOURCE_BYTES} bytes",
                self.oversize
            ));
        }
        s
    }
}

/// Keeps the string entries of a list that fit (each at most `max_bytes`), at most `max`
/// of them; a cut, when anything was dropped. `Err` names the first entry that is not a
/// string.
pub fn cut_string_list(
    field: &str,
    items: &[Value],
    max: usize,
    max_bytes: usize,
) -> Result<(Vec<String>, Option<ListCut>), WorkerFailure> {
    let mut out = Vec::with_capacity(items.len().min(max));
    let mut oversize = 0;
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::String(s) if s.len() > max_bytes => oversize += 1,
            Value::String(s) => {
                if out.len() < max {
                    out.push(s.clone());
                }
            }
            other => {
                return Err(WorkerFailure::schema(format!(
                    "`{field}[{i}]` must be a string, got {}",
                    type_name(other)
                )));
            }
        }
    }
    let cut = (out.len() < items.len()).then(|| ListCut {
        field: field.to_string(),
        received: items.len(),
        kept: out.len(),
        oversize,
        max,
    });
    Ok((out, cut))
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A position as the neighbouring protocols write it: `YES`, `NO`, or `NEUTRAL` for an
/// abstention.
pub fn wire_word(p: cresolver_core::Position) -> &'static str {
    match p {
        cresolver_core::Position::Yes => "YES",
        cresolver_core::Position::No => "NO",
        cresolver_core::Position::Abstain => "NEUTRAL",
    }
}

/// Another worker's answer as shown to a worker in the challenge stage, under the same
/// opaque label (`W1`, `W2`, …) the evaluator sees: never an address or endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerAnswer {
    /// The peer's opaque label (`W1`, `W2`, …).
    pub label: String,
    /// Shared: every other worker of the round gets the same answer as a peer.
    pub answer: std::sync::Arc<ResolveAnswer>,
}

/// What the challenge stage puts to one worker.
#[derive(Debug, Clone, Copy)]
pub struct ChallengeRequest<'a> {
    /// The round's question (as sent in the resolve stage).
    pub request: &'a ResolveRequest,
    /// This worker's label.
    pub label: &'a str,
    /// This worker's own resolve answer.
    pub own: &'a ResolveAnswer,
    /// The challenge texts rendered from the workflow's templates. Protocols without free
    /// text challenges (Factagora, round-table) send `peers` instead and say in the
    /// returned [`ChallengeOutcome::challenges`] what they asked.
    pub challenges: &'a [String],
    /// Every *other* valid responder's answer.
    pub peers: &'a [PeerAnswer],
}

/// The round's synthesis, put to a ratifying vote after the tally.
#[derive(Debug, Clone, Copy)]
pub struct RatifyRequest<'a> {
    /// The round's question (as sent in the resolve stage).
    pub request: &'a ResolveRequest,
    /// The tallied outcome.
    pub resolution: bool,
    /// The answers that voted with the outcome, as [`PeerAnswer`]s.
    pub majority: &'a [PeerAnswer],
    /// The answers that did not (abstentions included).
    pub minority: &'a [PeerAnswer],
}

/// A worker's ratifying vote on the synthesis; dissent is recorded, never counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ratification {
    /// Whether the worker approves the synthesis.
    pub approve: bool,
    /// Conditions the worker attaches to its vote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<String>,
    /// Why the worker dissents, when it does and says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dissent_reason: Option<String>,
}

/// What a worker's challenge stage produced. Responses are matched to challenges by
/// position; a short or failed defence keeps what arrived and records why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChallengeOutcome {
    /// What the worker was asked.
    pub challenges: Vec<String>,
    /// Its responses, matched to `challenges` by position (possibly fewer).
    pub responses: Vec<String>,
    /// Why the defence is missing or incomplete, if it is.
    pub failure: Option<WorkerFailure>,
}

/// Why a worker call produced no (complete) valid answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkerFailure {
    /// The stage's budget ran out before a complete reply.
    #[error("timed out after {after_ms} ms")]
    Timeout {
        /// The budget that ran out (milliseconds).
        after_ms: u64,
    },
    /// No connection to the endpoint could be made.
    #[error("connection failed: {detail}")]
    Connect {
        /// The connect error, with its causes.
        detail: String,
    },
    /// The endpoint's name resolved to an address the node's policy refuses (loopback,
    /// private, metadata…) when the connection was made (see `workers::netguard`).
    #[error("refused at connect time: {detail}")]
    Refused {
        /// The host and the refused address.
        detail: String,
    },
    /// The endpoint answered with a status other than 2xx.
    #[error("HTTP status {status}: {excerpt}")]
    HttpStatus {
        /// The HTTP status code.
        status: u16,
        /// The start of the reply body (at most 200 characters).
        excerpt: String,
    },
    /// The reply is not JSON.
    #[error("invalid JSON: {detail}")]
    InvalidJson {
        /// The parser's error.
        detail: String,
    },
    /// The reply is JSON but breaks the protocol's schema.
    #[error("schema violation: {detail}")]
    Schema {
        /// Which field breaks which rule.
        detail: String,
    },
    /// The reply body is larger than the stage allows.
    #[error("response body exceeds {limit} bytes")]
    Oversize {
        /// The stage's bound on a body (bytes).
        limit: usize,
    },
    /// The call could not be made or finished for another reason (a bad endpoint, a
    /// body that cannot be sent, a transport error after connecting).
    #[error("request failed: {detail}")]
    Request {
        /// What went wrong.
        detail: String,
    },
    /// The call was still running when quorum was met and the grace period ended.
    #[error("not awaited: quorum was met and the grace period ended")]
    CutAfterQuorum,
    /// Discovery discarded the worker, so it was never called.
    #[error("not called: {reason}")]
    NotDiscovered {
        /// Why discovery discarded it.
        reason: String,
    },
    /// The worker answered with an explicit failure of its protocol (Chorus `FAILURE`,
    /// a Factagora error body, an Agora `ERROR`, a declined job).
    #[error("worker declined ({code}): {detail}")]
    Rejected {
        /// The protocol's error code, as the worker sent it.
        code: String,
        /// The worker's message.
        detail: String,
    },
    /// Signed messages failed verification (bad signature, stale timestamp, replayed id,
    /// out-of-order message) and no valid answer arrived.
    #[error("rejected message: {detail}")]
    Envelope {
        /// The reasons the messages were rejected.
        detail: String,
    },
    /// The last of several attempts failed (a protocol that retries, as Factagora's
    /// platform does): every earlier attempt is listed.
    #[error("{last} (the last of {} attempts; earlier: {})", attempts.len() + 1, attempts.join("; "))]
    Retried {
        /// Each earlier attempt's failure, in order.
        attempts: Vec<String>,
        /// The last attempt's failure.
        last: Box<WorkerFailure>,
    },
}

impl WorkerFailure {
    /// A short stable label for metrics and tables.
    pub fn kind(&self) -> &'static str {
        match self {
            WorkerFailure::Timeout { .. } => "timeout",
            WorkerFailure::Connect { .. } => "connect",
            WorkerFailure::Refused { .. } => "refused",
            WorkerFailure::HttpStatus { .. } => "http_status",
            WorkerFailure::InvalidJson { .. } => "invalid_json",
            WorkerFailure::Schema { .. } => "schema",
            WorkerFailure::Oversize { .. } => "oversize",
            WorkerFailure::Request { .. } => "request",
            WorkerFailure::CutAfterQuorum => "cut_after_quorum",
            WorkerFailure::NotDiscovered { .. } => "not_discovered",
            WorkerFailure::Rejected { .. } => "rejected",
            WorkerFailure::Envelope { .. } => "envelope",
            WorkerFailure::Retried { last, .. } => last.kind(),
        }
    }

    pub(crate) fn schema(detail: impl Into<String>) -> Self {
        WorkerFailure::Schema {
            detail: detail.into(),
        }
    }
}

/// An agent protocol: how the two stages of a round are put to a worker and how its
/// replies are validated. Implementations turn every problem into a [`WorkerFailure`].
pub trait WorkerProtocol: Send + Sync + std::fmt::Debug {
    /// A short name (`a2a`, …) for logs and transcripts.
    fn name(&self) -> &'static str;

    /// The investigation stage.
    fn resolve<'a>(
        &'a self,
        client: &'a StageClient,
        endpoint: &'a Url,
        request: &'a ResolveRequest,
    ) -> BoxFuture<'a, Result<ResolveAnswer, WorkerFailure>>;

    /// The defence stage. `ChallengeOutcome::challenges` holds what was asked, and
    /// `responses` the answers matched to it by position.
    fn challenge<'a>(
        &'a self,
        client: &'a StageClient,
        endpoint: &'a Url,
        request: ChallengeRequest<'a>,
    ) -> BoxFuture<'a, ChallengeOutcome>;

    /// The ratifying vote on the round's synthesis, for protocols that have one
    /// (round-table's `/vote`). `None`: the protocol has no such step.
    fn ratify<'a>(
        &'a self,
        _client: &'a StageClient,
        _endpoint: &'a Url,
        _request: RatifyRequest<'a>,
    ) -> Option<BoxFuture<'a, Result<Ratification, WorkerFailure>>> {
        None
    }
}

/// Parses a resolve answer from raw bytes: invalid JSON and schema violations are
/// told apart; unknown fields are ignored.
pub fn parse_resolve_answer(body: &[u8]) -> Result<ResolveAnswer, WorkerFailure> {
    validate_resolve_answer(&parse_json(body)?)
}

/// Parses a worker's reply body as JSON ([`WorkerFailure::InvalidJson`] when it is not).
pub fn parse_json(body: &[u8]) -> Result<Value, WorkerFailure> {
    serde_json::from_slice(body).map_err(|e| WorkerFailure::InvalidJson {
        detail: e.to_string(),
    })
}

/// Validates a resolve answer given as JSON.
pub fn validate_resolve_answer(v: &Value) -> Result<ResolveAnswer, WorkerFailure> {
    let obj = v
        .as_object()
        .ok_or_else(|| WorkerFailure::schema("answer is not a JSON object"))?;
    let determination = match obj.get("determination") {
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(WorkerFailure::schema(format!(
                "`determination` must be a boolean, got {}",
                type_name(other)
            )));
        }
        None => return Err(WorkerFailure::schema("`determination` is missing")),
    };
    let confidence = match obj.get("confidence") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(other) => {
            return Err(WorkerFailure::schema(format!(
                "`confidence` must be a number, got {}",
                type_name(other)
            )));
        }
        None => return Err(WorkerFailure::schema("`confidence` is missing")),
    };
    if !(confidence.is_finite() && (0.0..=1.0).contains(&confidence)) {
        return Err(WorkerFailure::schema(format!(
            "`confidence` = {confidence} is outside [0, 1]"
        )));
    }
    let evidence = match obj.get("evidence") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(WorkerFailure::schema(format!(
                "`evidence` must be a string, got {}",
                type_name(other)
            )));
        }
        None => return Err(WorkerFailure::schema("`evidence` is missing")),
    };
    if evidence.trim().is_empty() {
        return Err(WorkerFailure::schema("`evidence` is empty"));
    }
    if evidence.len() > MAX_EVIDENCE_BYTES {
        return Err(WorkerFailure::schema(format!(
            "`evidence` is {} bytes; the limit is {MAX_EVIDENCE_BYTES}",
            evidence.len()
        )));
    }
    let sources = match obj.get("sources") {
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(WorkerFailure::schema(format!(
                "`sources` must be an array of strings, got {}",
                type_name(other)
            )));
        }
        None => return Err(WorkerFailure::schema("`sources` is missing")),
    };
    // too many sources, or an over-long one, costs the worker those sources, not its answer
    let (out, cut) = cut_string_list("sources", sources, MAX_SOURCES, MAX_SOURCE_BYTES)?;
    Ok(ResolveAnswer {
        determination,
        confidence,
        evidence,
        sources: out,
        abstain: false,
        notes: vec![],
        cuts: cut.into_iter().collect(),
    })
}

/// Parses a defence and matches it to `challenges` by position.
pub fn parse_challenge_responses(body: &[u8], challenges: &[String]) -> ChallengeOutcome {
    let fail = |failure| ChallengeOutcome {
        challenges: challenges.to_vec(),
        responses: vec![],
        failure: Some(failure),
    };
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return fail(WorkerFailure::InvalidJson {
                detail: e.to_string(),
            });
        }
    };
    let items = match v.get("responses") {
        Some(Value::Array(items)) => items,
        Some(other) => {
            return fail(WorkerFailure::schema(format!(
                "`responses` must be an array of strings, got {}",
                type_name(other)
            )));
        }
        None => return fail(WorkerFailure::schema("`responses` is missing")),
    };
    let mut responses = Vec::with_capacity(challenges.len());
    for (i, item) in items.iter().take(challenges.len()).enumerate() {
        match item {
            Value::String(s) if s.len() <= MAX_RESPONSE_BYTES => responses.push(s.clone()),
            Value::String(s) => {
                return ChallengeOutcome {
                    challenges: challenges.to_vec(),
                    responses,
                    failure: Some(WorkerFailure::schema(format!(
                        "`responses[{i}]` is {} bytes; the limit is {MAX_RESPONSE_BYTES}",
                        s.len()
                    ))),
                };
            }
            other => {
                return ChallengeOutcome {
                    challenges: challenges.to_vec(),
                    responses,
                    failure: Some(WorkerFailure::schema(format!(
                        "`responses[{i}]` must be a string, got {}",
                        type_name(other)
                    ))),
                };
            }
        }
    }
    let failure = (items.len() != challenges.len()).then(|| {
        WorkerFailure::schema(format!(
            "`responses` has {} entries for {} challenges (matched by position)",
            items.len(),
            challenges.len()
        ))
    });
    ChallengeOutcome {
        challenges: challenges.to_vec(),
        responses,
        failure,
    }
}

/// How a JSON value is named in error messages ("a string", "null", …).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> Value {
        json!({"determination": true, "confidence": 0.8, "evidence": "e", "sources": ["a"], "extra": 1})
    }

    #[test]
    fn accepts_valid_and_ignores_unknown_fields() {
        let a = validate_resolve_answer(&good()).unwrap();
        assert!(a.determination);
        assert_eq!(a.sources, vec!["a"]);
    }

    #[test]
    fn rejects_each_violation_by_name() {
        let cases = [
            ("confidence", json!(1.7), "outside [0, 1]"),
            ("confidence", json!(-0.1), "outside [0, 1]"),
            ("confidence", json!("0.5"), "must be a number"),
            ("determination", json!("yes"), "must be a boolean"),
            ("evidence", json!("   "), "is empty"),
            ("sources", json!("http://x"), "array of strings"),
            ("sources", json!([1]), "sources[0]"),
        ];
        for (field, value, needle) in cases {
            let mut v = good();
            v[field] = value;
            let err = validate_resolve_answer(&v).unwrap_err();
            assert!(
                matches!(err, WorkerFailure::Schema { .. }),
                "{field}: {err}"
            );
            assert!(err.to_string().contains(needle), "{field}: {err}");
        }
        let mut v = good();
        v.as_object_mut().unwrap().remove("sources");
        assert!(
            validate_resolve_answer(&v)
                .unwrap_err()
                .to_string()
                .contains("`sources` is missing")
        );
        assert!(matches!(
            parse_resolve_answer(b"{not json"),
            Err(WorkerFailure::InvalidJson { .. })
        ));
    }

    #[test]
    fn responses_matched_by_position() {
        let ch: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        let out = parse_challenge_responses(br#"{"responses":["x","y"]}"#, &ch);
        assert_eq!(out.responses, vec!["x", "y"]);
        assert!(matches!(out.failure, Some(WorkerFailure::Schema { .. })));
        let out = parse_challenge_responses(br#"{"responses":["x","y","z"]}"#, &ch);
        assert_eq!(out.failure, None);
        let out = parse_challenge_responses(br#"{"responses":["x","y","z","w"]}"#, &ch);
        assert_eq!(out.responses.len(), 3);
        assert!(out.failure.is_some());
    }
}
