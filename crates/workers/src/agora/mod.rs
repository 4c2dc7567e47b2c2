//! The Agora worker protocol (`agora-protocol.md`): signed envelopes exchanged through a
//! relay with HTTP long polling. A worker is an Agora agent known by its `did:key`; its
//! endpoint URL is the relay's base URL.
//!
//! How a round maps onto Agora:
//! - **resolve**: this node (an [`AgoraNode`], with its own Ed25519 identity) posts a
//!   signed REQUEST to the agent (`intent` = [`AgoraConfig::intent_resolve`], `title` =
//!   the question, `params` = `{market_id, question, deadline?, context?}`, `constraints` =
//!   `{max_cost_usd, max_latency_ms}`) in a new thread, long-polls the relay for the
//!   thread, accepts the first OFFER within budget whose `valid_until` has not passed
//!   (over-budget offers are skipped and noted), and waits for the RESULT. A RESULT with
//!   status `success` carries the A2A resolve fields in `output`
//!   (`{determination, confidence, evidence, sources}`), validated like an A2A answer; an
//!   ERROR message becomes [`WorkerFailure::Rejected`].
//! - **challenge**: the same negotiation with [`AgoraConfig::intent_challenge`] and
//!   `params` = `{market_id, question, challenges, peers: [{label, position, confidence,
//!   evidence}], own: {label, position, confidence}}`; the RESULT `output` is
//!   `{responses: [string]}`, matched to the challenges by position.
//! - There is no ratify step and no abstention.
//!
//! Every received envelope is verified (signature against the sender's did:key, ±5 min
//! timestamp, replayed ids, version, sender = the agent, thread, state machine) and
//! dropped if invalid; see [`negotiate`] for the polling rules and [`replay`] for how a
//! repeated delivery is told from a replay. The whole negotiation is bounded by the
//! stage budget; running out of it is a [`WorkerFailure::Timeout`], or a
//! [`WorkerFailure::Envelope`] naming the rejections if invalid envelopes arrived.

pub mod didkey;
pub mod envelope;
pub mod negotiate;
pub mod offer;
pub mod relay;
pub mod replay;
pub mod thread;

use super::client::StageClient;
use super::protocol::{
    ChallengeOutcome, ChallengeRequest, ResolveAnswer, ResolveRequest, WorkerFailure,
    WorkerProtocol, parse_challenge_responses, validate_resolve_answer,
};
use super::registry::AdapterFactory;
use ed25519_dalek::SigningKey;
use envelope::{Envelope, SignError};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use replay::{ReplayCache, ReplayVerdict};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// Tunables of the Agora client.
#[derive(Debug, Clone, PartialEq)]
pub struct AgoraConfig {
    /// `intent` of the resolve REQUEST.
    pub intent_resolve: String,
    /// `intent` of the challenge REQUEST.
    pub intent_challenge: String,
    /// Budget per request: offers above it are skipped (`constraints.max_cost_usd`).
    /// The default, 0, accepts free offers only.
    pub max_cost_usd: f64,
    /// Long-poll `timeout` (1 s to 60 s; the relay is asked in whole seconds); shortened
    /// to fit the stage budget.
    pub poll_timeout: Duration,
    /// `meta.ttl` of the node's messages (seconds).
    pub ttl_secs: u64,
}

impl Default for AgoraConfig {
    fn default() -> Self {
        Self {
            intent_resolve: "market.resolve".into(),
            intent_challenge: "market.challenge".into(),
            max_cost_usd: 0.0,
            poll_timeout: Duration::from_secs(30),
            ttl_secs: envelope::DEFAULT_TTL_SECS,
        }
    }
}

/// An Agora setting outside its bounds (see [`AgoraConfig::validate`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    /// An intent (named) is empty, longer than 128 bytes or holds control characters.
    #[error("agora `{0}` must be 1..=128 printable characters")]
    Intent(&'static str),
    /// `max_cost_usd` is negative or not finite; holds it.
    #[error("agora `max_cost_usd` = {0} must be a finite amount >= 0")]
    MaxCost(f64),
    /// `poll_timeout` is outside 1 s to 60 s; holds it.
    #[error("agora `poll_timeout` = {0:?} must be within 1s..=60s")]
    PollTimeout(Duration),
    /// `ttl_secs` is outside 1..=[`envelope::MAX_TTL_SECS`]; holds it.
    #[error("agora `ttl_secs` = {0} must be within 1..={max}", max = envelope::MAX_TTL_SECS)]
    Ttl(u64),
}

/// Why an [`AgoraNode`] cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NodeError {
    /// Its settings are outside their bounds.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The secret key is not 64 hex digits. The decoder's error is not kept: it would
    /// repeat part of the secret.
    #[error("agora secret key must be 64 hex digits")]
    SecretKey,
}

/// Why an [`AgoraProtocol`] cannot address an agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// The agent's did is not an Ed25519 `did:key`.
    #[error("agora agent {did:?}: {source}")]
    Did {
        /// The did as given (clipped).
        did: String,
        /// Why it is not one.
        #[source]
        source: didkey::DidKeyError,
    },
    /// The agent's did is this node's own.
    #[error("agora agent did is this node's own did")]
    OwnDid,
}

impl AgoraConfig {
    /// Checks every setting against its bounds; `Err` names the first one outside them.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for (name, intent) in [
            ("intent_resolve", &self.intent_resolve),
            ("intent_challenge", &self.intent_challenge),
        ] {
            if intent.trim().is_empty()
                || intent.len() > 128
                || intent.chars().any(char::is_control)
            {
                return Err(SettingsError::Intent(name));
            }
        }
        if !(self.max_cost_usd.is_finite() && self.max_cost_usd >= 0.0) {
            return Err(SettingsError::MaxCost(self.max_cost_usd));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.poll_timeout) {
            return Err(SettingsError::PollTimeout(self.poll_timeout));
        }
        if !(1..=envelope::MAX_TTL_SECS).contains(&self.ttl_secs) {
            return Err(SettingsError::Ttl(self.ttl_secs));
        }
        Ok(())
    }
}

/// Unix time in milliseconds; injectable for tests.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    })
}

/// This node as an Agora participant: its Ed25519 identity, settings, clock and the
/// replay cache shared by every Agora worker of the node.
pub struct AgoraNode {
    key: SigningKey,
    did: String,
    settings: AgoraConfig,
    replay: Mutex<ReplayCache>,
    clock: Clock,
}

impl std::fmt::Debug for AgoraNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgoraNode")
            .field("did", &self.did)
            .field("key", &"<redacted>")
            .field("settings", &self.settings)
            .field("tracked_ids", &self.tracked_ids())
            .finish()
    }
}

impl AgoraNode {
    /// A node from a 32-byte Ed25519 secret key (seed).
    pub fn new(secret: [u8; 32], settings: AgoraConfig) -> Result<Self, NodeError> {
        settings.validate()?;
        let key = SigningKey::from_bytes(&secret);
        let did = didkey::public_key_to_did(&key.verifying_key().to_bytes());
        Ok(Self {
            key,
            did,
            settings,
            replay: Mutex::new(ReplayCache::default()),
            clock: system_clock(),
        })
    }

    /// A node with a fresh random identity.
    pub fn generate(settings: AgoraConfig) -> Result<Self, NodeError> {
        let key = SigningKey::generate(&mut rand::rngs::OsRng);
        Self::new(key.to_bytes(), settings)
    }

    /// A node from a hex secret key (64 hex digits, optional `0x`). The error never
    /// repeats the input.
    pub fn from_secret_hex(hex: &str, settings: AgoraConfig) -> Result<Self, NodeError> {
        let h = hex.trim();
        let h = h.strip_prefix("0x").unwrap_or(h);
        let secret: [u8; 32] =
            alloy_primitives::hex::decode_to_array(h).map_err(|_| NodeError::SecretKey)?;
        Self::new(secret, settings)
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Replaces the replay cache bound.
    pub fn with_replay_capacity(self, capacity: usize) -> Self {
        Self {
            replay: Mutex::new(ReplayCache::new(capacity, replay::RETAIN_MS)),
            ..self
        }
    }

    /// This node's `did:key`.
    pub fn did(&self) -> String {
        self.did.clone()
    }

    /// The settings the node was made with.
    pub fn settings(&self) -> &AgoraConfig {
        &self.settings
    }

    /// The node clock (Unix milliseconds).
    pub fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    /// How many message ids the replay cache holds.
    pub fn tracked_ids(&self) -> usize {
        self.replay.lock().len()
    }

    fn sign(&self, envelope: &Envelope) -> Result<Value, SignError> {
        envelope.sign(&self.key)
    }

    fn remember(&self, id: &str, digest: [u8; 32], now_ms: i64) -> ReplayVerdict {
        self.replay.lock().check_and_insert(id, digest, now_ms)
    }
}

/// What the agent is asked to do in the resolve stage.
const RESOLVE_DESCRIPTION: &str = "Resolve this prediction-market question. Reply with a RESULT \
whose `output` is {\"determination\": true for YES / false for NO, \"confidence\": number in [0, 1], \
\"evidence\": text, \"sources\": [URL strings]}.";

/// What the agent is asked to do in the challenge stage.
const CHALLENGE_DESCRIPTION: &str = "Defend your answer to this prediction-market question \
against the challenges in `params.challenges`, considering the other answers in `params.peers`. \
Reply with a RESULT whose `output` is {\"responses\": [one string per challenge, in order]}.";

/// One Agora agent as a round worker.
#[derive(Debug, Clone)]
pub struct AgoraProtocol {
    node: Arc<AgoraNode>,
    agent_did: String,
}

impl AgoraProtocol {
    /// A worker for the agent `agent_did` (an Ed25519 `did:key`), spoken to as `node`.
    pub fn new(node: Arc<AgoraNode>, agent_did: &str) -> Result<Self, AgentError> {
        didkey::did_to_verifying_key(agent_did).map_err(|source| AgentError::Did {
            did: envelope::clip(agent_did, 64),
            source,
        })?;
        if agent_did == node.did {
            return Err(AgentError::OwnDid);
        }
        Ok(Self {
            node,
            agent_did: agent_did.to_string(),
        })
    }

    /// A per-worker adapter factory for the node's [`ProtocolSet`]: each Agora worker
    /// gets an adapter addressing the `did` of its service.
    ///
    /// [`ProtocolSet`]: crate::registry::ProtocolSet
    pub fn factory(node: Arc<AgoraNode>) -> AdapterFactory {
        Arc::new(move |did: Option<&str>| {
            let did = did.ok_or_else(|| {
                "the Agora service has no `did` (the agent's did:key)".to_string()
            })?;
            let adapter = AgoraProtocol::new(node.clone(), did).map_err(|e| e.to_string())?;
            let adapter: Arc<dyn WorkerProtocol> = Arc::new(adapter);
            Ok(adapter)
        })
    }

    /// The `did:key` of the agent this worker addresses.
    pub fn agent_did(&self) -> &str {
        &self.agent_did
    }

    /// The node this worker speaks as.
    pub fn node(&self) -> &Arc<AgoraNode> {
        &self.node
    }
}

/// A schema failure of a RESULT's `output`, named as such.
fn output_failure(e: WorkerFailure) -> WorkerFailure {
    match e {
        WorkerFailure::Schema { detail } => WorkerFailure::Schema {
            detail: format!("RESULT `output`: {detail}"),
        },
        other => other,
    }
}

/// Whether a RESULT `output` is a valid resolve answer (checked before the RESULT is
/// accepted, so that an invalid one is refused with a signed ERROR).
fn check_resolve_output(output: &Value) -> Result<(), WorkerFailure> {
    validate_resolve_answer(output)
        .map(|_| ())
        .map_err(output_failure)
}

/// Validates a RESULT `output` as a resolve answer and bounds the composed answer.
fn to_resolve_answer(delivered: negotiate::Delivered) -> Result<ResolveAnswer, WorkerFailure> {
    let prefix = output_failure;
    let answer = validate_resolve_answer(&delivered.output).map_err(prefix)?;
    // what the first validation cut (sources over the bound) stays recorded
    let cuts = answer.cuts.clone();
    let mut sources: Vec<String> = Vec::with_capacity(answer.sources.len());
    for s in answer.sources {
        let s = s.trim().to_string();
        if !s.is_empty() && !sources.contains(&s) {
            sources.push(s);
        }
    }
    let composed = json!({
        "determination": answer.determination,
        "confidence": answer.confidence,
        "evidence": answer.evidence,
        "sources": sources,
    });
    let mut answer = validate_resolve_answer(&composed).map_err(prefix)?;
    answer.abstain = false;
    answer.notes = delivered.notes;
    answer.cuts = cuts;
    Ok(answer)
}

impl WorkerProtocol for AgoraProtocol {
    fn name(&self) -> &'static str {
        "agora"
    }

    fn resolve<'a>(
        &'a self,
        client: &'a StageClient,
        endpoint: &'a Url,
        request: &'a ResolveRequest,
    ) -> BoxFuture<'a, Result<ResolveAnswer, WorkerFailure>> {
        Box::pin(async move {
            let mut params = json!({
                "market_id": request.market_id,
                "question": request.question,
            });
            if let Some(deadline) = request.deadline {
                params["deadline"] = json!(deadline);
            }
            if let Some(context) = &request.context {
                params["context"] = json!(context);
            }
            let delivered = negotiate::run(negotiate::Ask {
                node: &self.node,
                agent_did: &self.agent_did,
                client,
                relay: endpoint,
                intent: &self.node.settings.intent_resolve,
                title: envelope::clip(&request.question, 200),
                description: RESOLVE_DESCRIPTION,
                params,
                check: check_resolve_output,
            })
            .await?;
            to_resolve_answer(delivered)
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
            let peers: Vec<Value> = request
                .peers
                .iter()
                .map(|p| {
                    json!({
                        "label": p.label,
                        "position": crate::protocol::wire_word(p.answer.position()),
                        "confidence": p.answer.confidence,
                        "evidence": p.answer.evidence,
                    })
                })
                .collect();
            let params = json!({
                "market_id": request.request.market_id,
                "question": request.request.question,
                "challenges": challenges,
                "peers": peers,
                "own": {
                    "label": request.label,
                    "position": crate::protocol::wire_word(request.own.position()),
                    "confidence": request.own.confidence,
                },
            });
            let delivered = negotiate::run(negotiate::Ask {
                node: &self.node,
                agent_did: &self.agent_did,
                client,
                relay: endpoint,
                intent: &self.node.settings.intent_challenge,
                title: envelope::clip(&request.request.question, 200),
                description: CHALLENGE_DESCRIPTION,
                params,
                // defences are matched by position and kept in part: any output is
                // taken and judged by `parse_challenge_responses`
                check: |_| Ok(()),
            })
            .await;
            match delivered {
                Ok(d) => match serde_json::to_vec(&d.output) {
                    Ok(body) => parse_challenge_responses(&body, challenges),
                    Err(e) => ChallengeOutcome {
                        challenges: challenges.to_vec(),
                        responses: vec![],
                        failure: Some(WorkerFailure::InvalidJson {
                            detail: e.to_string(),
                        }),
                    },
                },
                Err(failure) => ChallengeOutcome {
                    challenges: challenges.to_vec(),
                    responses: vec![],
                    failure: Some(failure),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_key() {
        let secret = [0x42u8; 32];
        let node = AgoraNode::new(secret, AgoraConfig::default()).unwrap();
        let dbg = format!("{node:?}");
        assert!(dbg.contains("<redacted>"));
        assert!(dbg.contains(&node.did()));
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        assert!(!dbg.contains(&hex));
        assert!(!dbg.contains("66, 66"));
        let proto = AgoraProtocol::new(
            Arc::new(node),
            "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp",
        )
        .unwrap();
        let dbg = format!("{proto:?}");
        assert!(dbg.contains("<redacted>") && !dbg.contains(&hex));
    }

    #[test]
    fn node_identity_and_settings() {
        // The W3C did:key vector for the all-zero seed.
        let node = AgoraNode::from_secret_hex(&"00".repeat(32), AgoraConfig::default()).unwrap();
        assert_eq!(
            node.did(),
            "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
        );
        let err = AgoraNode::from_secret_hex("zz", AgoraConfig::default()).unwrap_err();
        assert_eq!(err, NodeError::SecretKey);
        assert!(!err.to_string().contains("zz"));
        assert_ne!(
            AgoraNode::generate(AgoraConfig::default()).unwrap().did(),
            AgoraNode::generate(AgoraConfig::default()).unwrap().did()
        );
        for (bad, text) in [
            (
                AgoraConfig {
                    poll_timeout: Duration::from_secs(61),
                    ..Default::default()
                },
                "agora `poll_timeout` = 61s must be within 1s..=60s",
            ),
            (
                AgoraConfig {
                    poll_timeout: Duration::from_millis(500),
                    ..Default::default()
                },
                "agora `poll_timeout` = 500ms must be within 1s..=60s",
            ),
            (
                AgoraConfig {
                    max_cost_usd: f64::NAN,
                    ..Default::default()
                },
                "agora `max_cost_usd` = NaN must be a finite amount >= 0",
            ),
            (
                AgoraConfig {
                    intent_resolve: " ".into(),
                    ..Default::default()
                },
                "agora `intent_resolve` must be 1..=128 printable characters",
            ),
            (
                AgoraConfig {
                    ttl_secs: 0,
                    ..Default::default()
                },
                "agora `ttl_secs` = 0 must be within 1..=86400",
            ),
        ] {
            let err = AgoraNode::new([1; 32], bad).unwrap_err();
            assert!(matches!(err, NodeError::Settings(_)));
            assert_eq!(err.to_string(), text);
        }
    }

    #[test]
    fn agent_did_is_validated() {
        let node = Arc::new(AgoraNode::new([1; 32], AgoraConfig::default()).unwrap());
        assert!(AgoraProtocol::new(node.clone(), "did:key:zTjsVPtY").is_err());
        assert!(AgoraProtocol::new(node.clone(), "https://agent.example").is_err());
        assert_eq!(
            AgoraProtocol::new(node.clone(), &node.did()).unwrap_err(),
            AgentError::OwnDid
        );
        let err = AgoraProtocol::new(node.clone(), "https://agent.example").unwrap_err();
        assert_eq!(
            err.to_string(),
            "agora agent \"https://agent.example\": not a did:key with base58btc multibase (must start with `did:key:z`)"
        );
        assert!(std::error::Error::source(&err).is_some());
        let did = "did:key:z6MkjchhfUsD6mmvni8mCdXHw216Xrm9bQe2mBH1P5RDjVJG";
        let p = AgoraProtocol::new(node.clone(), did).unwrap();
        assert_eq!(p.name(), "agora");
        assert_eq!(p.agent_did(), did);
        let factory = AgoraProtocol::factory(node);
        assert_eq!(factory(Some(did)).unwrap().name(), "agora");
        assert!(factory(None).unwrap_err().contains("no `did`"));
        assert!(factory(Some("did:key:zTjsVPtY")).is_err());
    }

    #[test]
    fn resolve_output_is_validated_and_sources_deduped() {
        let d = negotiate::Delivered {
            output: json!({"determination": false, "confidence": 0.6, "evidence": "e",
                "sources": ["https://a", " https://a ", "https://b"]}),
            notes: vec!["n".into()],
        };
        let a = to_resolve_answer(d).unwrap();
        assert_eq!(a.sources, vec!["https://a", "https://b"]);
        assert_eq!(a.notes, vec!["n"]);
        assert!(!a.determination && !a.abstain);
        let d = negotiate::Delivered {
            output: json!({"determination": true, "confidence": 1.7, "evidence": "e", "sources": []}),
            notes: vec![],
        };
        let err = to_resolve_answer(d).unwrap_err();
        assert!(matches!(err, WorkerFailure::Schema { .. }));
        assert!(
            err.to_string()
                .contains("RESULT `output`: `confidence` = 1.7"),
            "{err}"
        );
    }
}
