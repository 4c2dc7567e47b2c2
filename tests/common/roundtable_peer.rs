//! A round-table external agent on 127.0.0.1 (real axum server) serving `/analyze`,
//! `/challenge` and `/vote` from a script, and recording every request it receives
//! (path, `Authorization` header, JSON body) so tests can check what was sent.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How one endpoint answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 with this JSON body.
    Json(Value),
    /// 200 with this raw body (e.g. invalid JSON).
    Raw(String),
    /// This status with a short error body.
    Status(u16),
    /// Never answers (until the client gives up).
    Hang,
    /// 200 with this JSON body after a delay.
    Slow(Duration, Value),
    /// `/challenge` only: challenges every analysis whose finding disagrees with
    /// `stance` and concedes the others.
    AutoChallenge { stance: &'static str },
}

/// What each endpoint answers.
#[derive(Clone, Debug)]
pub struct Script {
    pub analyze: Reply,
    pub challenge: Reply,
    pub vote: Reply,
}

/// A valid analysis with tagged evidence (duplicates, an untagged and a [POSSIBLE]
/// observation included).
pub fn analysis_yes() -> Value {
    json!({
        "agent_name": "feed_checker",
        "domain": "market data",
        "observations": [
            {
                "finding": "The reference feed reported YES on 2026-05-01",
                "evidence": "[VERIFIED: https://feed.example/report/2026-05-01] The feed's report lists the outcome as YES.",
                "severity": "critical",
                "confidence": 0.95
            },
            {
                "finding": "Two news outlets confirm the report",
                "evidence": "[CORROBORATED: https://news-a.example/x + https://news-b.example/y] Both quote the feed.",
                "severity": "warning",
                "confidence": 0.8
            },
            {
                "finding": "The feed operator's status page shows no incident",
                "evidence": "[INDICATED: status.feed.example] No outage on that day; [VERIFIED: https://feed.example/report/2026-05-01] again.",
                "severity": "info"
            },
            {
                "finding": "A correction could still be issued",
                "evidence": "[POSSIBLE] Corrections happen rarely.",
                "severity": "info",
                "confidence": 0.2
            },
            {
                "finding": "Market chatter agrees",
                "evidence": "Forum posts say so.",
                "severity": "info"
            }
        ],
        "recommendations": [
            {"action": "Resolve YES", "rationale": "The primary source is unambiguous", "priority": "critical"}
        ],
        "confidence": 0.85
    })
}

/// A valid analysis without any confidence.
pub fn analysis_no() -> Value {
    json!({
        "agent_name": "skeptic",
        "domain": "fact checking",
        "observations": [
            {
                "finding": "The feed retracted its report",
                "evidence": "[VERIFIED: https://feed.example/retraction] The retraction notice is dated 2026-05-02.",
                "severity": "critical",
                "confidence": 0.7
            },
            {
                "finding": "The retraction was covered",
                "evidence": "[INDICATED: news-c.example] One outlet covered it.",
                "severity": "warning",
                "confidence": 0.5
            }
        ]
    })
}

pub fn approve() -> Value {
    json!({"agent_name": "feed_checker", "approve": true, "conditions": ["Only if the feed is not corrected before the deadline"], "dissent_reason": null})
}

pub fn dissent() -> Value {
    json!({"agent_name": "skeptic", "approve": false, "conditions": [], "dissent_reason": "The feed retracted its YES report on 2026-05-02."})
}

impl Script {
    /// Analyses with tagged evidence and approves the proposition.
    pub fn agrees_yes() -> Self {
        Self {
            analyze: Reply::Json(analysis_yes()),
            challenge: Reply::AutoChallenge { stance: "YES" },
            vote: Reply::Json(approve()),
        }
    }

    /// Analyses and dissents, with a reason.
    pub fn dissents_no() -> Self {
        Self {
            analyze: Reply::Json(analysis_no()),
            challenge: Reply::AutoChallenge { stance: "NO" },
            vote: Reply::Json(dissent()),
        }
    }
}

/// One request the peer received.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

#[derive(Clone)]
struct Peer {
    script: Arc<Script>,
    received: Arc<Mutex<Vec<Received>>>,
}

/// A running peer: its base URL and what it received.
#[derive(Clone)]
pub struct RoundTablePeer {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl RoundTablePeer {
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Bodies received on `path` (`/analyze`, `/challenge`, `/vote`), in order.
    pub fn bodies(&self, path: &str) -> Vec<Value> {
        self.received()
            .into_iter()
            .filter(|r| r.path == path)
            .map(|r| r.body)
            .collect()
    }
}

/// Starts a peer serving `script` on 127.0.0.1.
pub async fn spawn(script: Script) -> RoundTablePeer {
    let peer = Peer {
        script: Arc::new(script),
        received: Default::default(),
    };
    let app = Router::new()
        .route("/analyze", post(handle))
        .route("/challenge", post(handle))
        .route("/vote", post(handle))
        .with_state(peer.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    RoundTablePeer {
        url,
        received: peer.received,
    }
}

async fn handle(
    State(peer): State<Peer>,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let path = uri.path().to_string();
    peer.received.lock().unwrap().push(Received {
        path: path.clone(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body: body.clone(),
    });
    let reply = match path.as_str() {
        "/analyze" => &peer.script.analyze,
        "/challenge" => &peer.script.challenge,
        _ => &peer.script.vote,
    };
    match reply {
        Reply::Json(v) => Json(v.clone()).into_response(),
        Reply::Raw(s) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            s.clone(),
        )
            .into_response(),
        Reply::Status(code) => (
            StatusCode::from_u16(*code).unwrap(),
            format!("scripted failure {code}"),
        )
            .into_response(),
        Reply::Slow(delay, v) => {
            tokio::time::sleep(*delay).await;
            Json(v.clone()).into_response()
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Reply::AutoChallenge { stance } => Json(auto_challenge(&body, stance)).into_response(),
    }
}

fn auto_challenge(body: &Value, stance: &str) -> Value {
    let mut challenges = vec![];
    let mut concessions = vec![];
    let mine = format!("The answer is {stance} ");
    for a in body["other_analyses"].as_array().into_iter().flatten() {
        let target = a["agent_name"].clone();
        let finding = a["observations"][0]["finding"].as_str().unwrap_or("");
        if finding.starts_with(&mine) {
            concessions.push(json!({
                "target_agent": target,
                "finding_accepted": finding,
                "reason": format!("We reach the same conclusion ({stance}) from the same primary source."),
            }));
        } else {
            challenges.push(json!({
                "target_agent": target,
                "finding_challenged": finding,
                "counter_evidence": format!("[VERIFIED: https://feed.example/report/2026-05-01] The primary source says {stance}."),
            }));
        }
    }
    json!({"agent_name": "auto", "challenges": challenges, "concessions": concessions})
}
