//! The parsers of untrusted bytes under test, each with the valid seeds its mutations
//! start from and the properties an accepted input must have: worker replies (A2A,
//! Factagora, Chorus; round-table's are fuzzed in `cresolver-workers`' unit tests, where
//! its parsers are), Agora envelopes and relay polls, ERC-8004 registration files and
//! `data:` URIs, LLM replies, and `eth_getLogs` logs.

use alloy::primitives::{Address, B256, LogData, U256};
use alloy::sol_types::SolEvent;
use cresolver_chain::bindings::ICREsolverMarket::{MarketResolved, ResolutionRequested};
use cresolver_workers::protocol::{MAX_EVIDENCE_BYTES, MAX_RESPONSE_BYTES, MAX_SOURCE_BYTES};
use cresolver_workers::{agora, chorus, factagora, protocol};
use proptest::prelude::*;
use serde_json::{Value, json};

/// One parser under test.
pub struct Target {
    /// The target's name, as failures show it.
    pub name: &'static str,
    /// Feeds the bytes to the parser: whether it accepted them (an accepted input is
    /// checked for its properties first).
    pub run: fn(&[u8]) -> Result<bool, TestCaseError>,
    /// Valid inputs that mutations start from (each accepted: `every_seed_is_accepted`).
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// The time the Agora envelopes are verified at (Unix ms), the seed's `ts`.
const NOW_MS: i64 = 1_780_000_000_000;
/// The bound `decode_data_uri` is given.
const DATA_URI_MAX: usize = 64 * 1024;

fn json_seeds(values: Vec<Value>) -> Vec<Vec<u8>> {
    values
        .into_iter()
        .map(|v| v.to_string().into_bytes())
        .collect()
}

/// Every target: the worker replies, the Agora messages, the registration files, the
/// LLM reply and the chain logs.
pub fn all() -> Vec<Target> {
    vec![
        Target {
            name: "a2a_resolve",
            run: a2a_resolve,
            seeds: || {
                json_seeds(vec![
                    json!({"determination": true, "confidence": 0.8, "evidence": "x", "sources": ["https://a.example"]}),
                ])
            },
        },
        Target {
            name: "a2a_challenge",
            run: a2a_challenge,
            seeds: || json_seeds(vec![json!({"responses": ["because", "nothing"]})]),
        },
        Target {
            name: "factagora_reply",
            run: factagora_reply,
            seeds: || json_seeds(vec![factagora_seed()]),
        },
        Target {
            name: "chorus_result",
            run: |b| {
                let v = serde_json::from_slice::<Value>(b);
                Ok(v.is_ok_and(|v| chorus::validate_job_result(&v, "job-1", 1.0).is_ok()))
            },
            seeds: || {
                json_seeds(vec![
                    json!({"job_id": "job-1", "status": "SUCCESS", "output_data": {"determination": true, "confidence": 0.7, "evidence": "e"}, "execution_cost": 0.5}),
                ])
            },
        },
        Target {
            name: "agora_envelope",
            run: agora_envelope,
            seeds: || json_seeds(vec![signed_envelope()]),
        },
        Target {
            name: "agora_poll",
            run: |b| Ok(agora::relay::parse_poll_reply(b).is_ok()),
            seeds: || {
                json_seeds(vec![
                    json!({"ok": true, "events": [{"type": "OFFER", "id": "x"}], "next": 3}),
                ])
            },
        },
        Target {
            name: "registration",
            run: |b| {
                let reg = cresolver_chain::discovery::parse_registration(b);
                Ok(reg.is_ok_and(|r| cresolver_chain::discovery::worker_service(&r).is_some()))
            },
            seeds: || {
                json_seeds(vec![
                    json!({"type": "https://eips.ethereum.org/EIPS/eip-8004#registration-v1", "name": "w", "services": [{"name": "A2A", "endpoint": "https://w.example/a2a", "version": "0.3.0"}], "active": true}),
                    json!({"name": "w", "endpoints": [{"name": "MCP", "endpoint": "https://w.example/mcp"}, {"name": "A2A", "endpoint": "https://w.example/a2a"}]}),
                ])
            },
        },
        Target {
            name: "data_uri",
            run: data_uri,
            seeds: || {
                vec![
                    b"data:application/json;base64,eyJuYW1lIjoidyJ9".to_vec(),
                    b"data:application/json,%7B%22name%22%3A%22w%22%7D".to_vec(),
                ]
            },
        },
        Target {
            name: "llm_reply",
            run: llm_reply,
            seeds: llm_seeds,
        },
        Target {
            name: "rpc_log",
            run: rpc_log,
            seeds: || {
                let ev = ResolutionRequested {
                    marketId: U256::from(7),
                    question: "Will it?".into(),
                };
                vec![log_bytes(&ev.encode_log_data())]
            },
        },
    ]
}

fn a2a_resolve(b: &[u8]) -> Result<bool, TestCaseError> {
    use cresolver_workers::protocol::MAX_SOURCES;
    if let Ok(a) = protocol::parse_resolve_answer(b) {
        prop_assert!((0.0..=1.0).contains(&a.confidence), "{}", a.confidence);
        prop_assert!(!a.evidence.trim().is_empty());
        prop_assert!(a.evidence.len() <= MAX_EVIDENCE_BYTES);
        prop_assert!(a.sources.len() <= MAX_SOURCES);
        prop_assert!(a.sources.iter().all(|s| s.len() <= MAX_SOURCE_BYTES));
        return Ok(true);
    }
    Ok(false)
}

fn a2a_challenge(b: &[u8]) -> Result<bool, TestCaseError> {
    let asked = ["Why?".to_string(), "What else?".to_string()];
    let out = protocol::parse_challenge_responses(b, &asked);
    prop_assert_eq!(&out.challenges, &asked);
    prop_assert!(out.responses.len() <= asked.len());
    prop_assert!(out.responses.iter().all(|r| r.len() <= MAX_RESPONSE_BYTES));
    if out.failure.is_none() {
        prop_assert_eq!(out.responses.len(), asked.len());
    }
    Ok(out.failure.is_none())
}

fn factagora_seed() -> Value {
    json!({
        "position": "NO",
        "confidence": 0.85,
        "reactCycle": {
            "initialThought": "AGI has been predicted for decades but never materialized.",
            "actions": [
                {"type": "web_search", "query": "AGI compute", "result": "100x gap", "source": "https://search.example/q"}
            ],
            "observations": ["Base rate favours skepticism", "Compute gap is large"],
            "synthesisThought": "Every data point supports skepticism. Even optimistic estimates put AGI at 2030+, and alignment is unsolved, so 2026 is very unlikely.",
            "evidence": [
                {"type": "data", "title": "Historical accuracy: 5%", "description": "95% failed", "reliability": 0.95},
                {"type": "link", "title": "Compute requirements", "url": "https://arxiv.example/1"}
            ]
        },
        "reasoning": "Base rates, hardware and alignment make it unlikely.",
        "limitations": ["Unknown unknowns"]
    })
}

fn factagora_reply(b: &[u8]) -> Result<bool, TestCaseError> {
    use cresolver_workers::factagora::{
        MAX_ACTIONS, MAX_EVIDENCE_ITEMS, MAX_OBSERVATIONS, MAX_REASONING_CHARS,
    };
    let Ok(v) = protocol::parse_json(b) else {
        return Ok(false);
    };
    if let Ok(r) = factagora::validate_agent_response(&v) {
        prop_assert!((0.0..=1.0).contains(&r.confidence), "{}", r.confidence);
        prop_assert!(!r.actions.is_empty() && r.actions.len() <= MAX_ACTIONS);
        prop_assert!(r.observations.len() <= MAX_OBSERVATIONS);
        prop_assert!(r.evidence.len() <= MAX_EVIDENCE_ITEMS);
        let reasoning = r.reasoning.as_deref().unwrap_or_default();
        prop_assert!(reasoning.chars().count() <= MAX_REASONING_CHARS);
        return Ok(true);
    }
    Ok(false)
}

/// A REQUEST signed by a fixed key, valid at [`NOW_MS`].
fn signed_envelope() -> Value {
    use agora::envelope::{Envelope, MessageType, Meta, Recipient, Sender, ThreadRef};
    let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let did = agora::didkey::public_key_to_did(&key.verifying_key().to_bytes());
    let env = Envelope {
        version: agora::envelope::VERSION.into(),
        id: "m1".into(),
        ts: agora::envelope::format_ts(NOW_MS),
        kind: MessageType::Request,
        sender: Sender {
            id: did.clone(),
            name: Some("w".into()),
            url: None,
        },
        recipient: Recipient { id: did },
        payload: json!({"intent": "resolve", "params": {"market_id": 1}}),
        thread: ThreadRef { id: "t1".into() },
        meta: Meta { ttl: 300, hop: 0 },
    };
    env.sign(&key).expect("the seed signs")
}

fn agora_envelope(b: &[u8]) -> Result<bool, TestCaseError> {
    use agora::envelope::{MAX_ID_BYTES, VERSION};
    let Ok(v) = serde_json::from_slice::<Value>(b) else {
        return Ok(false);
    };
    if let Ok(ok) = agora::envelope::verify(&v, NOW_MS) {
        prop_assert_eq!(ok.envelope.version.as_str(), VERSION);
        prop_assert!(ok.envelope.id.len() <= MAX_ID_BYTES);
        prop_assert!(ok.envelope.thread.id.len() <= MAX_ID_BYTES);
        return Ok(true);
    }
    Ok(false)
}

fn data_uri(b: &[u8]) -> Result<bool, TestCaseError> {
    let s = String::from_utf8_lossy(b);
    if let Ok(bytes) = cresolver_chain::discovery::decode_data_uri(&s, DATA_URI_MAX) {
        prop_assert!(bytes.len() <= DATA_URI_MAX);
        return Ok(true);
    }
    Ok(false)
}

/// Three workers, labelled `W1`…`W3`, as the evaluator's prompt names them.
fn eval_input() -> cresolver_evaluate::EvalInput {
    use cresolver_evaluate::EvalWorker;
    let w = |i: u8| EvalWorker {
        label: format!("W{i}"),
        address: Address::repeat_byte(i),
        answer: cresolver_workers::ResolveAnswer {
            determination: true,
            confidence: 0.5,
            evidence: "e".into(),
            sources: vec![],
            abstain: false,
            notes: vec![],
            cuts: vec![],
        },
        challenges: vec![],
        responses: vec![],
    };
    cresolver_evaluate::EvalInput {
        market_id: 1u64.into(),
        question: "q".into(),
        workers: vec![w(1), w(2), w(3)],
        reference_time: 0,
    }
}

fn llm_seeds() -> Vec<Vec<u8>> {
    let scores: Vec<Value> = (1..=3)
        .map(|i| json!({"workerId": format!("W{i}"), "resolutionQuality": 80, "sourceQuality": 70, "analysisDepth": 60, "reasoningClarity": 50, "evidenceStrength": 40, "biasAwareness": 30, "timeliness": 20, "collaboration": 10}))
        .collect();
    let content = json!({"workers": scores}).to_string();
    json_seeds(vec![
        json!({"choices": [{"message": {"content": content}}]}),
        json!({"choices": [{"message": {"content": format!("```json\n{content}\n```")}}]}),
    ])
}

fn llm_reply(b: &[u8]) -> Result<bool, TestCaseError> {
    use cresolver_evaluate::llm;
    let Ok(content) = llm::completion_content(b) else {
        return Ok(false);
    };
    if let Ok(scores) = llm::parse_scores(llm::strip_fences(&content), &eval_input()) {
        prop_assert_eq!(scores.len(), 3);
        for s in scores.iter().flat_map(|d| d.to_array()) {
            prop_assert!((0.0..=100.0).contains(&s) && s.fract() == 0.0, "{}", s);
        }
        return Ok(true);
    }
    Ok(false)
}

/// A log as the `rpc_log` target reads its bytes: the number of topics, the topics,
/// then the data.
fn log_bytes(log: &LogData) -> Vec<u8> {
    let mut b = vec![log.topics().len() as u8];
    for t in log.topics() {
        b.extend_from_slice(t.as_slice());
    }
    b.extend_from_slice(&log.data);
    b
}

/// `eth_getLogs` logs decoded as the market's `ResolutionRequested` and `MarketResolved`
/// events: the first byte (mod 5) is the number of topics, taken from the next 32-byte
/// words, and the rest is the data.
fn rpc_log(b: &[u8]) -> Result<bool, TestCaseError> {
    let n = (b.first().copied().unwrap_or(0) % 5) as usize;
    let rest = b.get(1..).unwrap_or(&[]);
    let topics: Vec<B256> = rest
        .chunks(32)
        .take(n)
        .map(B256::right_padding_from)
        .collect();
    let data = rest.get(n * 32..).unwrap_or(&[]).to_vec();
    let Some(log) = LogData::new(topics, data.into()) else {
        return Ok(false);
    };
    let requested = ResolutionRequested::decode_log_data(&log).is_ok();
    if requested {
        prop_assert_eq!(log.topics()[0], ResolutionRequested::SIGNATURE_HASH);
    }
    let resolved = MarketResolved::decode_log_data(&log).is_ok();
    Ok(requested || resolved)
}
