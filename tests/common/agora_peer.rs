//! An Agora relay (`POST /events`, `GET /events` with real HTTP long polling, `GET
//! /health`) and a scripted Agora agent that subscribes to it by long polling and
//! answers REQUESTs with an OFFER and, after an ACCEPT, a RESULT — both on 127.0.0.1.
//! The agent signs with its own Ed25519 key; its behaviours script the failure modes.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use cresolver_workers::agora::didkey;
use cresolver_workers::agora::envelope::{
    self, Envelope, MessageType, Meta, Recipient, Sender, ThreadRef, VERSION, format_ts, parse_ts,
};
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Whether `since` excludes events stamped exactly at `since` (the reference relay) or
/// includes them (a relay that re-delivers the last event on every poll).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinceMode {
    Exclusive,
    Inclusive,
}

#[derive(Clone)]
struct RelayState {
    events: Arc<Mutex<Vec<Value>>>,
    polls: Arc<Mutex<Vec<HashMap<String, String>>>>,
    version: Arc<watch::Sender<u64>>,
    mode: SinceMode,
}

/// The running relay; its task stops when the handle is dropped.
pub struct RelayHandle {
    pub url: String,
    state: RelayState,
    task: JoinHandle<()>,
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RelayHandle {
    /// Every stored event, in arrival order.
    pub fn events(&self) -> Vec<Value> {
        self.state.events.lock().unwrap().clone()
    }

    /// Stored events of one type (`"ACCEPT"`, …).
    pub fn events_of_type(&self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["type"] == kind)
            .collect()
    }

    /// The query parameters of every `GET /events` received.
    pub fn polls(&self) -> Vec<HashMap<String, String>> {
        self.state.polls.lock().unwrap().clone()
    }

    /// Stores an event as if it had been posted.
    pub fn inject(&self, event: Value) {
        store(&self.state, event);
    }
}

fn store(state: &RelayState, event: Value) {
    state.events.lock().unwrap().push(event);
    state.version.send_modify(|v| *v += 1);
}

/// Starts a relay with an exclusive `since` (like the reference relay).
pub async fn agora_relay() -> (String, RelayHandle) {
    agora_relay_with(SinceMode::Exclusive).await
}

pub async fn agora_relay_with(mode: SinceMode) -> (String, RelayHandle) {
    let (version, _) = watch::channel(0u64);
    let state = RelayState {
        events: Default::default(),
        polls: Default::default(),
        version: Arc::new(version),
        mode,
    };
    let app = Router::new()
        .route("/events", get(subscribe).post(submit))
        .route(
            "/health",
            get(|| async { Json(json!({"ok": true, "version": "1.0.0"})) }),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url.clone(), RelayHandle { url, state, task })
}

async fn submit(State(s): State<RelayState>, Json(event): Json<Value>) -> Response {
    let Some(id) = event.get("id").and_then(Value::as_str).map(str::to_string) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"ok": false, "error": "INVALID_REQUEST", "message": "Event must have id"})),
        )
            .into_response();
    };
    store(&s, event);
    Json(json!({"ok": true, "id": id})).into_response()
}

async fn subscribe(
    State(s): State<RelayState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    s.polls.lock().unwrap().push(q.clone());
    let Some(since) = q.get("since").and_then(|v| parse_ts(v)) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(
                json!({"ok": false, "error": "INVALID_REQUEST", "message": "`since` is required"}),
            ),
        )
            .into_response();
    };
    let secs = q
        .get("timeout")
        .and_then(|t| t.parse::<f64>().ok())
        .filter(|t| t.is_finite() && *t > 0.0)
        .unwrap_or(30.0)
        .min(60.0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(secs);
    let field = |e: &Value, path: &str| e.pointer(path).and_then(Value::as_str).map(str::to_string);
    let matches = |e: &Value| {
        let Some(ts) = e.get("ts").and_then(Value::as_str).and_then(parse_ts) else {
            return false;
        };
        let after = match s.mode {
            SinceMode::Exclusive => ts > since,
            SinceMode::Inclusive => ts >= since,
        };
        after
            && [
                ("recipient", "/recipient/id"),
                ("sender", "/sender/id"),
                ("type", "/type"),
                ("thread", "/thread/id"),
            ]
            .iter()
            .all(|(param, path)| {
                q.get(*param)
                    .is_none_or(|want| field(e, path).as_ref() == Some(want))
            })
    };
    let mut rx = s.version.subscribe();
    loop {
        rx.borrow_and_update();
        let found: Vec<Value> = s
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches(e))
            .cloned()
            .collect();
        if !found.is_empty() {
            return Json(json!({"ok": true, "events": found, "hasMore": false})).into_response();
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => continue,
            _ => return Json(json!({"ok": true, "events": [], "hasMore": false})).into_response(),
        }
    }
}

/// How the scripted agent behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgoraBehaviour {
    /// A free OFFER (0 USD), then a valid RESULT (YES, 0.8; one response per challenge).
    Good,
    /// An OFFER at 1000 USD, then one at 0.05 USD, then a valid RESULT.
    OverBudgetThenGood,
    /// A RESULT whose output has confidence 1.7.
    InvalidResult,
    /// An ERROR message (`INTENT_NOT_SUPPORTED`) instead of an offer.
    ErrorMessage,
    /// Never answers.
    NeverOffers,
    /// An OFFER whose payload was changed after signing.
    TamperedSignature,
    /// A correctly signed OFFER stamped six minutes in the past.
    StaleTimestamp,
    /// A valid OFFER, then (after ACCEPT) a RESULT reusing the OFFER's id.
    ReplayedId,
    /// An OFFER claiming to be from the agent but signed with another key.
    WrongSenderKey,
    /// An OFFER from another did:key (validly signed by that key).
    Impostor,
    /// A RESULT straight away, without an OFFER or ACCEPT.
    ResultWithoutOffer,
    /// A free OFFER whose `valid_until` has already passed.
    ExpiredOffer,
    /// A free OFFER, then nothing after the ACCEPT.
    OffersThenSilent,
}

/// The running agent; its task stops when the handle is dropped.
pub struct AgentHandle {
    pub did: String,
    received: Arc<Mutex<Vec<Value>>>,
    rejected: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AgentHandle {
    /// The envelopes the agent received and verified.
    pub fn received(&self) -> Vec<Value> {
        self.received.lock().unwrap().clone()
    }

    /// Why the agent rejected envelopes it received.
    pub fn rejected(&self) -> Vec<String> {
        self.rejected.lock().unwrap().clone()
    }
}

struct ThreadInfo {
    client: String,
    request_id: String,
    intent: String,
    params: Value,
    offer_id: Option<String>,
}

struct Agent {
    relay: String,
    http: reqwest::Client,
    key: SigningKey,
    did: String,
    behaviour: AgoraBehaviour,
    last_ts: i64,
    threads: HashMap<String, ThreadInfo>,
}

/// Starts a scripted agent subscribed to `relay`; returns its did.
pub async fn agora_agent(relay: &str, behaviour: AgoraBehaviour) -> (String, AgentHandle) {
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let did = didkey::public_key_to_did(&key.verifying_key().to_bytes());
    let received: Arc<Mutex<Vec<Value>>> = Default::default();
    let rejected: Arc<Mutex<Vec<String>>> = Default::default();
    let mut agent = Agent {
        relay: relay.trim_end_matches('/').to_string(),
        http: reqwest::Client::new(),
        key,
        did: did.clone(),
        behaviour,
        last_ts: 0,
        threads: HashMap::new(),
    };
    let (rx, rj) = (received.clone(), rejected.clone());
    let task = tokio::spawn(async move { agent.run(rx, rj).await });
    (
        did.clone(),
        AgentHandle {
            did,
            received,
            rejected,
            task,
        },
    )
}

fn random_id(prefix: &str) -> String {
    format!("{prefix}_{:032x}", rand::random::<u128>())
}

impl Agent {
    async fn run(&mut self, received: Arc<Mutex<Vec<Value>>>, rejected: Arc<Mutex<Vec<String>>>) {
        let mut since = (now_ms() - 1000, format_ts(now_ms() - 1000));
        let mut seen = HashSet::new();
        loop {
            let mut url = url::Url::parse(&format!("{}/events", self.relay)).unwrap();
            url.query_pairs_mut()
                .append_pair("since", &since.1)
                .append_pair("recipient", &self.did)
                .append_pair("timeout", "1");
            let reply = self.http.get(url).send().await;
            let body: Value = match reply {
                Ok(r) => r.json().await.unwrap_or(Value::Null),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let events = body["events"].as_array().cloned().unwrap_or_default();
            for event in events {
                let id = event["id"].as_str().unwrap_or_default().to_string();
                if !seen.insert(id) {
                    continue;
                }
                let verified = match envelope::verify(&event, now_ms()) {
                    Ok(v) => v,
                    Err(r) => {
                        rejected.lock().unwrap().push(r.to_string());
                        continue;
                    }
                };
                if verified.ts_ms > since.0 {
                    since = (verified.ts_ms, verified.envelope.ts.clone());
                }
                received.lock().unwrap().push(event.clone());
                let env = verified.envelope;
                match env.kind {
                    MessageType::Request => self.on_request(env).await,
                    MessageType::Accept => self.on_accept(env).await,
                    _ => {}
                }
            }
        }
    }

    fn next_ts(&mut self) -> i64 {
        self.last_ts = now_ms().max(self.last_ts + 1);
        self.last_ts
    }

    fn envelope(&mut self, kind: MessageType, thread: &str, to: &str, payload: Value) -> Envelope {
        Envelope {
            version: VERSION.into(),
            id: random_id("msg"),
            ts: format_ts(self.next_ts()),
            kind,
            sender: Sender {
                id: self.did.clone(),
                name: Some(format!("scripted-{:?}", self.behaviour)),
                url: None,
            },
            recipient: Recipient { id: to.into() },
            payload,
            thread: ThreadRef { id: thread.into() },
            meta: Meta { ttl: 300, hop: 0 },
        }
    }

    async fn post(&self, signed: &Value) {
        let _ = self
            .http
            .post(format!("{}/events", self.relay))
            .json(signed)
            .send()
            .await;
    }

    async fn send(&mut self, env: Envelope) {
        let signed = env.sign(&self.key).unwrap();
        self.post(&signed).await;
    }

    fn offer(request_id: &str, amount: f64) -> Value {
        json!({
            "request_id": request_id,
            "plan": "Check the reference feed and report",
            "price": {"amount": amount, "currency": "USD"},
            "eta_seconds": 1,
            "valid_until": format_ts(now_ms() + 5 * 60 * 1000),
        })
    }

    async fn on_request(&mut self, env: Envelope) {
        let request_id = env.payload["request_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let thread = env.thread.id.clone();
        let client = env.sender.id.clone();
        self.threads.insert(
            thread.clone(),
            ThreadInfo {
                client: client.clone(),
                request_id: request_id.clone(),
                intent: env.payload["intent"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                params: env.payload["params"].clone(),
                offer_id: None,
            },
        );
        let good_offer = Self::offer(&request_id, 0.0);
        match self.behaviour {
            AgoraBehaviour::NeverOffers => {}
            AgoraBehaviour::ErrorMessage => {
                let e = self.envelope(
                    MessageType::Error,
                    &thread,
                    &client,
                    json!({"code": "INTENT_NOT_SUPPORTED", "message": "this agent does not resolve markets",
                           "details": {"intent": env.payload["intent"]}}),
                );
                self.send(e).await;
            }
            AgoraBehaviour::OverBudgetThenGood => {
                let e = self.envelope(
                    MessageType::Offer,
                    &thread,
                    &client,
                    Self::offer(&request_id, 1000.0),
                );
                self.send(e).await;
                let offer = Self::offer(&request_id, 0.05);
                self.send_good_offer(&thread, &client, offer).await;
            }
            AgoraBehaviour::TamperedSignature => {
                let e = self.envelope(MessageType::Offer, &thread, &client, good_offer);
                let mut signed = e.sign(&self.key).unwrap();
                signed["payload"]["plan"] = json!("Something else entirely");
                self.post(&signed).await;
            }
            AgoraBehaviour::StaleTimestamp => {
                let mut e = self.envelope(MessageType::Offer, &thread, &client, good_offer);
                e.ts = format_ts(now_ms() - 6 * 60 * 1000);
                self.send(e).await;
            }
            AgoraBehaviour::WrongSenderKey => {
                let e = self.envelope(MessageType::Offer, &thread, &client, good_offer);
                let other = SigningKey::generate(&mut rand::rngs::OsRng);
                self.post(&e.sign(&other).unwrap()).await;
            }
            AgoraBehaviour::Impostor => {
                let other = SigningKey::generate(&mut rand::rngs::OsRng);
                let mut e = self.envelope(MessageType::Offer, &thread, &client, good_offer);
                e.sender.id = didkey::public_key_to_did(&other.verifying_key().to_bytes());
                self.post(&e.sign(&other).unwrap()).await;
            }
            AgoraBehaviour::ExpiredOffer => {
                let mut offer = good_offer;
                offer["valid_until"] = json!(format_ts(now_ms() - 1000));
                self.send_good_offer(&thread, &client, offer).await;
            }
            AgoraBehaviour::ResultWithoutOffer => {
                let payload = self.result_payload(&thread, 0.8);
                let e = self.envelope(MessageType::Result, &thread, &client, payload);
                self.send(e).await;
            }
            AgoraBehaviour::Good
            | AgoraBehaviour::InvalidResult
            | AgoraBehaviour::ReplayedId
            | AgoraBehaviour::OffersThenSilent => {
                self.send_good_offer(&thread, &client, good_offer).await;
            }
        }
    }

    async fn send_good_offer(&mut self, thread: &str, client: &str, offer: Value) {
        let e = self.envelope(MessageType::Offer, thread, client, offer);
        if let Some(t) = self.threads.get_mut(thread) {
            t.offer_id = Some(e.id.clone());
        }
        self.send(e).await;
    }

    fn result_payload(&self, thread: &str, confidence: f64) -> Value {
        let t = &self.threads[thread];
        let output = if t.intent == "market.challenge" {
            let responses: Vec<String> = t.params["challenges"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|c| format!("Defence: {}", c.as_str().unwrap_or_default()))
                        .collect()
                })
                .unwrap_or_default();
            json!({"responses": responses})
        } else {
            json!({
                "determination": true,
                "confidence": confidence,
                "evidence": "The reference feed reported YES before the deadline.",
                "sources": ["https://feed.example/report", "https://feed.example/report"],
            })
        };
        json!({
            "request_id": t.request_id,
            "status": "success",
            "output": output,
            "artifacts": [],
            "metrics": {"latency_ms": 5, "cost_actual": 0.0},
        })
    }

    async fn on_accept(&mut self, env: Envelope) {
        let thread = env.thread.id.clone();
        let Some(t) = self.threads.get(&thread) else {
            return;
        };
        if env.payload["request_id"] != t.request_id.as_str() || env.sender.id != t.client {
            return;
        }
        let client = t.client.clone();
        let offer_id = t.offer_id.clone();
        match self.behaviour {
            AgoraBehaviour::OffersThenSilent => {}
            AgoraBehaviour::InvalidResult => {
                let payload = self.result_payload(&thread, 1.7);
                let e = self.envelope(MessageType::Result, &thread, &client, payload);
                self.send(e).await;
            }
            AgoraBehaviour::ReplayedId => {
                let payload = self.result_payload(&thread, 0.8);
                let mut e = self.envelope(MessageType::Result, &thread, &client, payload);
                e.id = offer_id.unwrap_or_default();
                self.send(e).await;
            }
            _ => {
                let payload = self.result_payload(&thread, 0.8);
                let e = self.envelope(MessageType::Result, &thread, &client, payload);
                self.send(e).await;
            }
        }
    }
}
