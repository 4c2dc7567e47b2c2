//! The Chorus protocol (`chorus-protocol.md`) as a round worker: each stage is one
//! synchronous Chorus job.
//!
//! How it maps onto a round:
//! - **resolve** = a Job Request `POST {endpoint}/jobs` with a fresh `job_id` (UUID v4),
//!   this node's `orchestrator_id`, `skill_name` = the configured resolve skill
//!   (`market_resolve` by default), `input_data` = the A2A resolve request
//!   (`market_id`, `question`, and `deadline` / `context` when set), the configured
//!   `budget` in `chorus_credits_v1` and `timestamp_utc`. No `callback_url` is sent:
//!   the node takes the Job Result from the HTTP reply. The result must echo our
//!   `job_id`; `SUCCESS` carries the A2A resolve fields in `output_data` (validated by
//!   [`validate_resolve_answer`]); `FAILURE` becomes [`WorkerFailure::Rejected`] with the
//!   spec's error code found in `error_message` (`SKILL_MISMATCH`, …) or `FAILURE`;
//!   `PENDING` (asynchronous delivery) becomes `Rejected{code: "PENDING"}`, as this node
//!   does not support callbacks; any other status is a schema violation.
//! - **challenge** = a second job with the challenge skill (`market_challenge` by
//!   default) and `input_data` = `{market_id, question, challenges}` (the workflow's
//!   rendered texts); its `SUCCESS` `output_data` is `{responses: [...]}`, matched to the
//!   challenges by position as in A2A. With no challenge skill configured no call is
//!   made: the outcome has no challenges and `Rejected{code: "NO_CHALLENGE_SKILL"}`.
//!
//! Job ids come from the `uuid` crate (v4, OS randomness).

use super::client::{StageClient, join_endpoint};
use super::factagora::{clip_chars, iso8601_utc, now_unix};
use super::protocol::parse_json;
use super::protocol::{
    ChallengeOutcome, ChallengeRequest, ResolveAnswer, ResolveRequest, WorkerFailure,
    WorkerProtocol, parse_challenge_responses, type_name, validate_resolve_answer,
};
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use std::sync::OnceLock;
use url::Url;

/// The currency of every job (the spec's only one).
pub const CURRENCY: &str = "chorus_credits_v1";
/// The spec's error codes, looked for in a `FAILURE`'s `error_message`.
pub const ERROR_CODES: [&str; 5] = [
    "SKILL_MISMATCH",
    "BUDGET_INSUFFICIENT",
    "AGENT_OFFLINE",
    "EXECUTION_ERROR",
    "TRANSFER_FAILED",
];
/// Code of the challenge outcome when no challenge skill is configured.
pub const NO_CHALLENGE_SKILL: &str = "NO_CHALLENGE_SKILL";
/// A `FAILURE`'s `error_message` is kept up to this many characters.
const MAX_ERROR_CHARS: usize = 500;
/// Values echoed in error messages are clipped to this many characters.
const ECHO_CHARS: usize = 60;

/// Settings of one Chorus worker.
#[derive(Debug, Clone, PartialEq)]
pub struct ChorusConfig {
    /// The skill asked for in the resolve stage.
    pub skill: String,
    /// The skill asked for in the challenge stage; `None`: the worker is not challenged.
    pub challenge_skill: Option<String>,
    /// Credits offered per job (rounded to 2 decimals when sent).
    pub budget: f64,
    /// This node's id as an orchestrator (a UUID).
    pub orchestrator_id: String,
}

impl Default for ChorusConfig {
    /// `market_resolve` / `market_challenge`, budget 0, and an orchestrator id drawn once
    /// per process (every worker of one node shares it; configure a fixed one to keep it
    /// across restarts).
    fn default() -> Self {
        static PROCESS_ORCHESTRATOR: OnceLock<String> = OnceLock::new();
        Self {
            skill: "market_resolve".into(),
            challenge_skill: Some("market_challenge".into()),
            budget: 0.0,
            orchestrator_id: PROCESS_ORCHESTRATOR
                .get_or_init(|| uuid::Uuid::new_v4().to_string())
                .clone(),
        }
    }
}

impl ChorusConfig {
    /// Checks the settings a config loader should refuse: empty skills, a budget that is
    /// not a finite non-negative number, an orchestrator id that is not a UUID.
    pub fn validate(&self) -> Result<(), String> {
        if self.skill.trim().is_empty() {
            return Err("chorus `skill` must not be empty".into());
        }
        if self
            .challenge_skill
            .as_deref()
            .is_some_and(|s| s.trim().is_empty())
        {
            return Err("chorus `challenge_skill` must not be empty (omit it instead)".into());
        }
        if !(self.budget.is_finite() && self.budget >= 0.0) {
            return Err(format!(
                "chorus `budget` = {} must be a finite number >= 0",
                self.budget
            ));
        }
        match uuid::Uuid::parse_str(&self.orchestrator_id) {
            Ok(u) if u.get_version_num() == 4 => {}
            _ => {
                return Err(format!(
                    "chorus `orchestrator_id` {:?} is not a UUID v4 (leave it empty: the node draws one once and keeps it in its store)",
                    self.orchestrator_id
                ));
            }
        }
        Ok(())
    }
}

/// The Chorus job protocol.
#[derive(Debug, Clone)]
pub struct ChorusProtocol {
    settings: ChorusConfig,
}

impl ChorusProtocol {
    /// A budget that is not a finite non-negative number is sent as 0 (see
    /// [`ChorusConfig::validate`] to refuse it up front).
    pub fn new(mut settings: ChorusConfig) -> Self {
        if !(settings.budget.is_finite() && settings.budget >= 0.0) {
            tracing::warn!(budget = settings.budget, "chorus budget invalid; using 0");
            settings.budget = 0.0;
        }
        Self { settings }
    }

    /// The settings in use (the budget as sent).
    pub fn settings(&self) -> &ChorusConfig {
        &self.settings
    }

    /// The Job Request body for `skill`.
    pub fn job_request(&self, job_id: &str, skill: &str, input_data: Value, now: u64) -> Value {
        json!({
            "job_id": job_id,
            "orchestrator_id": self.settings.orchestrator_id,
            "skill_name": skill,
            "input_data": input_data,
            "budget": (self.settings.budget * 100.0).round() / 100.0,
            "currency": CURRENCY,
            "timestamp_utc": iso8601_utc(now),
        })
    }

    /// Runs one synchronous job; returns the `SUCCESS` result's `output_data` and the
    /// notes on the result.
    async fn run_job(
        &self,
        client: &StageClient,
        endpoint: &Url,
        skill: &str,
        input_data: Value,
    ) -> Result<(Map<String, Value>, Vec<String>), WorkerFailure> {
        let job_id = uuid::Uuid::new_v4().to_string();
        let url = join_endpoint(endpoint, "jobs")?;
        let body = self.job_request(&job_id, skill, input_data, now_unix());
        let reply = match client.post_json(url, &body).await {
            Ok(reply) => reply,
            Err(failure) => return Err(failure_result_of_status(failure, &job_id)),
        };
        validate_job_result(&parse_json(&reply.body)?, &job_id, self.settings.budget)
    }
}

impl WorkerProtocol for ChorusProtocol {
    fn name(&self) -> &'static str {
        "chorus"
    }

    fn resolve<'a>(
        &'a self,
        client: &'a StageClient,
        endpoint: &'a Url,
        request: &'a ResolveRequest,
    ) -> BoxFuture<'a, Result<ResolveAnswer, WorkerFailure>> {
        Box::pin(async move {
            let input = serde_json::to_value(request).map_err(|e| WorkerFailure::Request {
                detail: e.to_string(),
            })?;
            let (output, notes) = self
                .run_job(client, endpoint, &self.settings.skill, input)
                .await?;
            let mut answer =
                validate_resolve_answer(&Value::Object(output)).map_err(|e| match e {
                    WorkerFailure::Schema { detail } => {
                        WorkerFailure::schema(format!("in `output_data`: {detail}"))
                    }
                    other => other,
                })?;
            answer.notes = notes;
            Ok(answer)
        })
    }

    fn challenge<'a>(
        &'a self,
        client: &'a StageClient,
        endpoint: &'a Url,
        request: ChallengeRequest<'a>,
    ) -> BoxFuture<'a, ChallengeOutcome> {
        let challenges = request.challenges;
        Box::pin(async move {
            let fail = |asked: Vec<String>, failure| ChallengeOutcome {
                challenges: asked,
                responses: vec![],
                failure: Some(failure),
            };
            let Some(skill) = &self.settings.challenge_skill else {
                return fail(
                    vec![],
                    WorkerFailure::Rejected {
                        code: NO_CHALLENGE_SKILL.into(),
                        detail: "no challenge skill is configured for this Chorus worker; \
                                 it was not challenged"
                            .into(),
                    },
                );
            };
            let input = json!({
                "market_id": request.request.market_id,
                "question": request.request.question,
                "challenges": challenges,
            });
            match self.run_job(client, endpoint, skill, input).await {
                Ok((output, _notes)) => match serde_json::to_vec(&Value::Object(output)) {
                    Ok(bytes) => {
                        let mut out = parse_challenge_responses(&bytes, challenges);
                        out.failure = out.failure.map(|f| match f {
                            WorkerFailure::Schema { detail } => {
                                WorkerFailure::schema(format!("in `output_data`: {detail}"))
                            }
                            other => other,
                        });
                        out
                    }
                    Err(e) => fail(
                        challenges.to_vec(),
                        WorkerFailure::Request {
                            detail: e.to_string(),
                        },
                    ),
                },
                Err(failure) => fail(challenges.to_vec(), failure),
            }
        })
    }
}

/// Validates a Job Result against the `job_id` we sent. `SUCCESS` gives its
/// `output_data` (an object) and notes; `FAILURE`, `PENDING` and anything else are
/// typed failures.
pub fn validate_job_result(
    v: &Value,
    job_id: &str,
    budget: f64,
) -> Result<(Map<String, Value>, Vec<String>), WorkerFailure> {
    let obj = v
        .as_object()
        .ok_or_else(|| WorkerFailure::schema("job result is not a JSON object"))?;
    match obj.get("job_id") {
        Some(Value::String(s)) if s == job_id => {}
        Some(Value::String(s)) => {
            return Err(WorkerFailure::schema(format!(
                "`job_id` {:?} does not echo the request's job_id {job_id:?}",
                clip_chars(s, ECHO_CHARS)
            )));
        }
        Some(other) => return Err(wrong_type("job_id", "a string", other)),
        None => return Err(WorkerFailure::schema("`job_id` is missing")),
    }
    let status = match obj.get("status") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(wrong_type("status", "a string", other)),
        None => return Err(WorkerFailure::schema("`status` is missing")),
    };
    let error_message = match obj.get("error_message") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(other) => return Err(wrong_type("error_message", "a string or null", other)),
    };
    match obj.get("agent_id") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(other) => return Err(wrong_type("agent_id", "a string", other)),
    }
    match status {
        "SUCCESS" => {}
        "FAILURE" => return Err(failure_of(error_message)),
        "PENDING" => {
            return Err(WorkerFailure::Rejected {
                code: "PENDING".into(),
                detail: "the agent answered PENDING (asynchronous delivery to a \
                         callback_url); this node sends no callback_url and does not \
                         support asynchronous results"
                    .into(),
            });
        }
        other => {
            return Err(WorkerFailure::schema(format!(
                "`status` {:?} is not SUCCESS, FAILURE or PENDING",
                clip_chars(other, ECHO_CHARS)
            )));
        }
    }
    let output = match obj.get("output_data") {
        Some(Value::Object(m)) => m.clone(),
        Some(other) => return Err(wrong_type("output_data", "an object", other)),
        None => return Err(WorkerFailure::schema("`output_data` is missing")),
    };
    let mut notes = Vec::new();
    match obj.get("execution_cost") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) => {
            if let Some(cost) = n.as_f64()
                && cost > budget + 1e-9
            {
                notes.push(format!(
                    "the job reports execution_cost {cost} above the offered budget {budget}"
                ));
            }
        }
        Some(other) => return Err(wrong_type("execution_cost", "a number", other)),
    }
    if let Some(msg) = error_message.filter(|m| !m.trim().is_empty()) {
        notes.push(format!(
            "SUCCESS carried an error_message: {}",
            clip_chars(msg, MAX_ERROR_CHARS)
        ));
    }
    Ok((output, notes))
}

/// `Rejected` for a `FAILURE`: the earliest spec error code in the message, else
/// `FAILURE`.
fn failure_of(error_message: Option<&str>) -> WorkerFailure {
    let Some(msg) = error_message.filter(|m| !m.trim().is_empty()) else {
        return WorkerFailure::Rejected {
            code: "FAILURE".into(),
            detail: "the agent reported FAILURE without an error_message".into(),
        };
    };
    let code = ERROR_CODES
        .iter()
        .filter_map(|c| msg.find(c).map(|at| (at, *c)))
        .min()
        .map(|(_, c)| c)
        .unwrap_or("FAILURE");
    WorkerFailure::Rejected {
        code: code.into(),
        detail: clip_chars(msg, MAX_ERROR_CHARS),
    }
}

/// A non-2xx reply whose body (as far as the client kept it) is a `FAILURE` Job Result
/// for our job becomes that failure; anything else is returned unchanged.
fn failure_result_of_status(failure: WorkerFailure, job_id: &str) -> WorkerFailure {
    if let WorkerFailure::HttpStatus { excerpt, .. } = &failure
        && let Ok(v) = serde_json::from_str::<Value>(excerpt)
        && v.get("status").and_then(Value::as_str) == Some("FAILURE")
        && v.get("job_id").and_then(Value::as_str) == Some(job_id)
    {
        return failure_of(v.get("error_message").and_then(Value::as_str));
    }
    failure
}

fn wrong_type(path: &str, expected: &str, got: &Value) -> WorkerFailure {
    WorkerFailure::schema(format!(
        "`{path}` must be {expected}, got {}",
        type_name(got)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = "f81d4fae-7dec-41d0-a765-00a0c91e6bf6";

    fn result(status: &str) -> Value {
        json!({
            "job_id": JOB,
            "agent_id": "a3b8d1b6-0b3b-4b1a-9c1a-1a2b3c4d5e6f",
            "status": status,
            "output_data": {"determination": true, "confidence": 0.7, "evidence": "e", "sources": []},
            "execution_cost": 0.1,
            "execution_time_ms": 1250,
            "error_message": null,
            "timestamp_utc": "2026-02-11T14:15:09Z"
        })
    }

    #[test]
    fn success_gives_output_and_cost_note() {
        let (out, notes) = validate_job_result(&result("SUCCESS"), JOB, 0.05).unwrap();
        assert_eq!(out["confidence"], 0.7);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("execution_cost 0.1 above the offered budget 0.05"));
        let (_, notes) = validate_job_result(&result("SUCCESS"), JOB, 0.1).unwrap();
        assert!(notes.is_empty());
    }

    #[test]
    fn statuses_and_ids_are_typed() {
        let err = validate_job_result(&result("SUCCESS"), "other", 1.0).unwrap_err();
        assert!(err.to_string().contains("does not echo"), "{err}");
        let err = validate_job_result(&result("success"), JOB, 1.0).unwrap_err();
        assert!(
            matches!(&err, WorkerFailure::Schema { detail } if detail.contains("`status` \"success\"")),
            "{err}"
        );
        let err = validate_job_result(&result("PENDING"), JOB, 1.0).unwrap_err();
        assert!(matches!(&err, WorkerFailure::Rejected { code, .. } if code == "PENDING"));
        let mut v = result("FAILURE");
        v["error_message"] = json!("Agent says: BUDGET_INSUFFICIENT (also not SKILL_MISMATCH)");
        assert_eq!(
            validate_job_result(&v, JOB, 1.0).unwrap_err(),
            WorkerFailure::Rejected {
                code: "BUDGET_INSUFFICIENT".into(),
                detail: "Agent says: BUDGET_INSUFFICIENT (also not SKILL_MISMATCH)".into()
            }
        );
        v["error_message"] = json!(null);
        assert!(matches!(
            validate_job_result(&v, JOB, 1.0).unwrap_err(),
            WorkerFailure::Rejected { code, .. } if code == "FAILURE"
        ));
        for (field, value, needle) in [
            (
                "output_data",
                json!("text"),
                "`output_data` must be an object",
            ),
            ("job_id", json!(5), "`job_id` must be a string"),
            (
                "execution_cost",
                json!("free"),
                "`execution_cost` must be a number",
            ),
            (
                "error_message",
                json!(1),
                "`error_message` must be a string or null",
            ),
        ] {
            let mut v = result("SUCCESS");
            v[field] = value;
            let err = validate_job_result(&v, JOB, 1.0).unwrap_err();
            assert!(err.to_string().contains(needle), "{field}: {err}");
        }
    }

    #[test]
    fn failure_body_on_error_status_is_rejected() {
        let mut v = result("FAILURE");
        v["error_message"] = json!("EXECUTION_ERROR: boom");
        let f = WorkerFailure::HttpStatus {
            status: 500,
            excerpt: v.to_string(),
        };
        assert!(matches!(
            failure_result_of_status(f.clone(), JOB),
            WorkerFailure::Rejected { code, .. } if code == "EXECUTION_ERROR"
        ));
        assert_eq!(failure_result_of_status(f.clone(), "other"), f);
    }

    #[test]
    fn job_request_shape_and_settings() {
        let p = ChorusProtocol::new(ChorusConfig {
            budget: 0.129,
            ..ChorusConfig::default()
        });
        let body = p.job_request(JOB, "market_resolve", json!({"market_id": 1}), 0);
        assert_eq!(body["budget"], 0.13);
        assert_eq!(body["currency"], CURRENCY);
        assert_eq!(body["timestamp_utc"], "1970-01-01T00:00:00Z");
        assert!(body.get("callback_url").is_none());
        let d = ChorusConfig::default();
        assert_eq!(d.orchestrator_id, ChorusConfig::default().orchestrator_id);
        assert!(d.validate().is_ok());
        assert!(
            ChorusConfig {
                orchestrator_id: "node-1".into(),
                ..d.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            ChorusConfig {
                budget: f64::NAN,
                ..d.clone()
            }
            .validate()
            .is_err()
        );
        let p = ChorusProtocol::new(ChorusConfig { budget: -1.0, ..d });
        assert_eq!(p.settings().budget, 0.0);
    }
}
