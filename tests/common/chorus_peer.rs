//! A Chorus agent on 127.0.0.1: `POST {base}/jobs` under a path prefix (`/agent`), one
//! scripted behaviour per skill, every Job Request recorded. A job for a skill it does
//! not have fails with `SKILL_MISMATCH`, as the spec's agents do.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const AGENT_ID: &str = "a3b8d1b6-0b3b-4b1a-9c1a-1a2b3c4d5e6f";

/// How the agent answers a job for one skill.
#[derive(Clone, Debug)]
pub enum ChorusBehaviour {
    /// `SUCCESS` with this `output_data`.
    Answer(Value),
    /// `SUCCESS` with `{responses}`: one per `input_data.challenges` entry, minus `short`.
    Defend { short: usize },
    /// `FAILURE` with this `error_message`.
    Fail(String),
    /// `PENDING` (the agent would deliver to a callback_url later).
    Pending,
    /// `SUCCESS` with this `output_data`, but echoing a different `job_id`.
    WrongJobId(Value),
    /// A result with this (non-spec) status and a valid output.
    Status(String),
    /// Never answers.
    Hang,
}

#[derive(Clone)]
struct PeerState {
    skills: HashMap<String, ChorusBehaviour>,
    received: Arc<Mutex<Vec<Value>>>,
}

/// A running agent: its base URL (with the `/agent` prefix) and the jobs it received.
pub struct ChorusPeer {
    pub url: String,
    pub received: Arc<Mutex<Vec<Value>>>,
}

impl ChorusPeer {
    pub fn jobs(&self) -> Vec<Value> {
        self.received.lock().unwrap().clone()
    }
}

/// Starts an agent with the given skills.
pub async fn spawn(skills: Vec<(&str, ChorusBehaviour)>) -> ChorusPeer {
    let received: Arc<Mutex<Vec<Value>>> = Default::default();
    let state = PeerState {
        skills: skills
            .into_iter()
            .map(|(k, b)| (k.to_string(), b))
            .collect(),
        received: received.clone(),
    };
    let app = Router::new()
        .route("/agent/jobs", post(jobs))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/agent", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    ChorusPeer { url, received }
}

/// An A2A resolve answer as `output_data`.
pub fn answer(determination: bool, confidence: f64) -> Value {
    json!({
        "determination": determination,
        "confidence": confidence,
        "evidence": "The reference feed reported the value above the threshold before the deadline.",
        "sources": ["https://feed.example/page"]
    })
}

async fn jobs(State(s): State<PeerState>, Json(job): Json<Value>) -> Response {
    s.received.lock().unwrap().push(job.clone());
    let job_id = job["job_id"].as_str().unwrap_or_default().to_string();
    let skill = job["skill_name"].as_str().unwrap_or_default();
    let result = |job_id: &str, status: &str, output: Value, error: Value| {
        Json(json!({
            "job_id": job_id,
            "agent_id": AGENT_ID,
            "status": status,
            "output_data": output,
            "execution_cost": 0.0,
            "execution_time_ms": 12,
            "error_message": error,
            "timestamp_utc": "2026-02-11T14:15:09Z"
        }))
        .into_response()
    };
    let Some(behaviour) = s.skills.get(skill).cloned() else {
        return result(
            &job_id,
            "FAILURE",
            Value::Null,
            json!(format!("SKILL_MISMATCH: no skill named {skill}")),
        );
    };
    match behaviour {
        ChorusBehaviour::Answer(out) => result(&job_id, "SUCCESS", out, Value::Null),
        ChorusBehaviour::Defend { short } => {
            let n = job["input_data"]["challenges"]
                .as_array()
                .map_or(0, Vec::len)
                .saturating_sub(short);
            let responses: Vec<String> = (1..=n)
                .map(|i| {
                    format!("Defence {i}: the primary feed and two mirrors agree on the value.")
                })
                .collect();
            result(
                &job_id,
                "SUCCESS",
                json!({"responses": responses}),
                Value::Null,
            )
        }
        ChorusBehaviour::Fail(msg) => result(&job_id, "FAILURE", Value::Null, json!(msg)),
        ChorusBehaviour::Pending => result(&job_id, "PENDING", Value::Null, Value::Null),
        ChorusBehaviour::WrongJobId(out) => result(
            "00000000-0000-4000-8000-000000000000",
            "SUCCESS",
            out,
            Value::Null,
        ),
        ChorusBehaviour::Status(status) => result(&job_id, &status, answer(true, 0.5), Value::Null),
        ChorusBehaviour::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            result(&job_id, "FAILURE", Value::Null, json!("AGENT_OFFLINE"))
        }
    }
}
