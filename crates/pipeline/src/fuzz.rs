//! A fuzz harness for every parser of untrusted bytes: worker replies (A2A, Factagora,
//! round-table, Chorus), Agora envelopes and relay polls, ERC-8004 registration files and
//! `data:` URIs, LLM replies, and `eth_getLogs` logs. Each case is random bytes, a
//! random JSON document, or a valid seed mutated (bytes flipped, inserted, deleted,
//! spliced, truncated, nested deeper); a case passes when the parser returns, whatever it
//! returns. A panic is caught and counted with the input that caused it. This is
//! randomized and mutation-based, not coverage-guided; it needs no nightly toolchain.
//! `cresolver fuzz` runs it; the test suite runs a short pass.

use serde_json::{Value, json};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// One parser under test: a name and what it does with the bytes.
pub struct Target {
    /// The target's name, as reports show it.
    pub name: &'static str,
    /// Feeds the bytes to the parser; its result is dropped.
    pub run: fn(&[u8]),
    /// Valid inputs that mutations start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The target's name.
    pub target: &'static str,
    /// Cases run.
    pub cases: u64,
    /// Inputs that made the parser panic (at most 5 kept), with the panic message.
    pub panics: Vec<(Vec<u8>, String)>,
    /// Cases that made the parser panic, all of them counted.
    pub panic_count: u64,
}

fn eval_input() -> cresolver_evaluate::EvalInput {
    use cresolver_evaluate::EvalWorker;
    let w = |i: u8| EvalWorker {
        label: format!("W{i}"),
        address: alloy::primitives::Address::repeat_byte(i),
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

fn json_seeds(values: Vec<Value>) -> Vec<Vec<u8>> {
    values
        .into_iter()
        .map(|v| v.to_string().into_bytes())
        .collect()
}

/// Every target: the worker replies, the Agora messages, the registration files, the
/// LLM reply and the chain logs, in that order.
pub fn targets() -> Vec<Target> {
    let mut all = worker_reply_targets();
    all.extend(agora_targets());
    all.extend(registration_targets());
    all.push(llm_reply_target());
    all.push(rpc_log_target());
    all
}

/// The workers' replies: A2A answers and defences, Factagora, round-table and Chorus.
fn worker_reply_targets() -> Vec<Target> {
    vec![
        Target {
            name: "a2a_resolve",
            run: |b| {
                let _ = cresolver_workers::protocol::parse_resolve_answer(b);
            },
            seeds: || {
                json_seeds(vec![
                    json!({"determination": true, "confidence": 0.8, "evidence": "x", "sources": ["https://a.example"]}),
                ])
            },
        },
        Target {
            name: "a2a_challenge",
            run: |b| {
                let _ = cresolver_workers::protocol::parse_challenge_responses(
                    b,
                    &["Why?".to_string(), "What else?".to_string()],
                );
            },
            seeds: || json_seeds(vec![json!({"responses": ["because", "nothing"]})]),
        },
        Target {
            name: "factagora_reply",
            run: |b| {
                if let Ok(v) = cresolver_workers::protocol::parse_json(b) {
                    let _ = cresolver_workers::factagora::validate_agent_response(&v);
                }
            },
            seeds: || {
                json_seeds(vec![
                    json!({"position": "YES", "confidence": 0.8, "reasoning": {"summary": "s", "initialThought": "t", "reactCycle": [{"thought": "t", "action": {"tool": "web_search", "query": "q"}, "observation": "o"}], "synthesis": "s", "limitations": ["l"]}, "evidence": [{"type": "link", "title": "t", "url": "https://a.example", "relevance": 0.9}]}),
                ])
            },
        },
        Target {
            name: "roundtable_reply",
            run: |b| {
                if let Ok(v) = cresolver_workers::protocol::parse_json(b) {
                    cresolver_workers::roundtable::parse_every_reply(&v);
                }
            },
            seeds: || {
                json_seeds(vec![
                    json!({"agent_name": "a", "confidence": 0.8, "observations": [{"content": "c", "tags": ["VERIFIED:https://a.example"]}], "stance": "support"}),
                    json!({"agent_name": "a", "approve": true, "conditions": [], "dissent_reason": null}),
                    json!({"agent_name": "a", "remarks": [{"target_agent": "W1", "verdict": "challenge", "reasoning": "r", "severity": "warning"}]}),
                ])
            },
        },
        Target {
            name: "chorus_result",
            run: |b| {
                if let Ok(v) = serde_json::from_slice::<Value>(b) {
                    let _ = cresolver_workers::chorus::validate_job_result(&v, "job-1", 1.0);
                }
            },
            seeds: || {
                json_seeds(vec![
                    json!({"job_id": "job-1", "status": "SUCCESS", "output_data": {"determination": true, "confidence": 0.7, "evidence": "e"}, "cost": 0.5}),
                ])
            },
        },
    ]
}

/// Agora's signed envelopes and relay poll replies.
fn agora_targets() -> Vec<Target> {
    vec![
        Target {
            name: "agora_envelope",
            run: |b| {
                if let Ok(v) = serde_json::from_slice::<Value>(b) {
                    let _ = cresolver_workers::agora::envelope::verify(&v, 1_780_000_000_000);
                }
            },
            seeds: || {
                json_seeds(vec![
                    json!({"type": "PROPOSE", "id": "m1", "thread": "t1", "from": "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", "to": ["did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"], "ts": "2026-05-01T00:00:00Z", "body": {"x": 1}, "sig": "AAAA"}),
                ])
            },
        },
        Target {
            name: "agora_poll",
            run: |b| {
                let _ = cresolver_workers::agora::relay::parse_poll_reply(b);
            },
            seeds: || {
                json_seeds(vec![
                    json!({"events": [{"type": "ACCEPT", "id": "x"}], "next": 3}),
                ])
            },
        },
    ]
}

/// ERC-8004 registration files and the `data:` URIs that carry them.
fn registration_targets() -> Vec<Target> {
    vec![
        Target {
            name: "registration",
            run: |b| {
                if let Ok(reg) = cresolver_chain::discovery::parse_registration(b) {
                    let _ = cresolver_chain::discovery::worker_service(&reg);
                }
            },
            seeds: || {
                json_seeds(vec![
                    json!({"type": "https://eips.ethereum.org/EIPS/eip-8004#registration-v1", "name": "w", "services": [{"name": "A2A", "endpoint": "https://w.example/a2a", "version": "0.3.0"}], "active": true}),
                ])
            },
        },
        Target {
            name: "data_uri",
            run: |b| {
                let s = String::from_utf8_lossy(b);
                let _ = cresolver_chain::discovery::decode_data_uri(&s, 64 * 1024);
            },
            seeds: || {
                vec![
                    b"data:application/json;base64,eyJuYW1lIjoidyJ9".to_vec(),
                    b"data:application/json,%7B%22name%22%3A%22w%22%7D".to_vec(),
                ]
            },
        },
    ]
}

/// The LLM evaluator's reply: the completion envelope, then the scores inside it.
fn llm_reply_target() -> Target {
    Target {
        name: "llm_reply",
        run: |b| {
            if let Ok(content) = cresolver_evaluate::llm::completion_content(b) {
                let _ = cresolver_evaluate::llm::parse_scores(
                    cresolver_evaluate::llm::strip_fences(&content),
                    &eval_input(),
                );
            }
        },
        seeds: || {
            let scores: Vec<Value> = (1..=3)
                .map(|i| json!({"workerId": format!("W{i}"), "resolutionQuality": 80, "sourceQuality": 70, "analysisDepth": 60, "reasoningClarity": 50, "evidenceStrength": 40, "biasAwareness": 30, "timeliness": 20, "collaboration": 10}))
                .collect();
            let content = json!({"workers": scores}).to_string();
            json_seeds(vec![
                json!({"choices": [{"message": {"content": content}}]}),
            ])
        },
    }
}

/// `eth_getLogs` logs decoded as the market's `ResolutionRequested` and
/// `MarketResolved` events.
fn rpc_log_target() -> Target {
    Target {
        name: "rpc_log",
        run: |b| {
            use alloy::sol_types::SolEvent;
            // topics from the first 32-byte words, the rest as data
            let n = (b.first().copied().unwrap_or(0) % 5) as usize;
            let rest = b.get(1..).unwrap_or(&[]);
            let topics: Vec<alloy::primitives::B256> = rest
                .chunks(32)
                .take(n)
                .map(alloy::primitives::B256::right_padding_from)
                .collect();
            let data = rest.get(n * 32..).unwrap_or(&[]).to_vec();
            if let Some(log) = alloy::primitives::LogData::new(topics, data.into()) {
                let _ = cresolver_chain::bindings::ICREsolverMarket::ResolutionRequested::decode_log_data(&log);
                let _ =
                    cresolver_chain::bindings::ICREsolverMarket::MarketResolved::decode_log_data(
                        &log,
                    );
            }
        },
        seeds: || {
            use alloy::sol_types::SolEvent;
            let ev = cresolver_chain::bindings::ICREsolverMarket::ResolutionRequested {
                marketId: alloy::primitives::U256::from(7),
                question: "Will it?".into(),
            };
            let log = ev.encode_log_data();
            let mut b = vec![log.topics().len() as u8];
            for t in log.topics() {
                b.extend_from_slice(t.as_slice());
            }
            b.extend_from_slice(&log.data);
            vec![b]
        },
    }
}

/// A small, fast, seedable generator (xorshift64*): runs are reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes that matter to JSON and URI parsers.
const INTERESTING: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"null",
    b"true",
    b"-0",
    b"1e999",
    b"-1",
    b"18446744073709551616",
    b"NaN",
    b"%",
    b"%ff",
    b";base64,",
    b"=",
    b"\xff",
    b"\xc3",
    b"\xe2\x80\xae",
    b"\n",
    b" ",
    b"0.5",
    b"\"W1\"",
    b"[[[[[[[[",
    b"{\"a\":",
];

fn random_json(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 6 { 5 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => json!(rng.next() as i64),
        3 => json!((rng.next() as f64) / 1e6 - 1e12),
        4 => {
            let len = rng.below(40);
            Value::String(
                (0..len)
                    .map(|_| char::from_u32(rng.below(0x2FFF) as u32).unwrap_or('?'))
                    .collect(),
            )
        }
        5 | 6 => Value::Array(
            (0..rng.below(5))
                .map(|_| random_json(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let keys = [
                "determination",
                "confidence",
                "evidence",
                "sources",
                "responses",
                "position",
                "workers",
                "workerId",
                "type",
                "status",
                "job_id",
                "output_data",
                "choices",
                "message",
                "content",
                "services",
                "endpoint",
                "name",
                "remarks",
                "approve",
                "events",
                "sig",
                "from",
            ];
            Value::Object(
                (0..rng.below(6))
                    .map(|_| {
                        (
                            keys[rng.below(keys.len())].to_string(),
                            random_json(rng, depth + 1),
                        )
                    })
                    .collect(),
            )
        }
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..=rng.below(8) {
        match rng.below(7) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            1 => {
                let i = rng.below(b.len() + 1);
                let ins = INTERESTING[rng.below(INTERESTING.len())];
                b.splice(i..i, ins.iter().copied());
            }
            2 if !b.is_empty() => {
                let i = rng.below(b.len());
                let j = (i + rng.below(16)).min(b.len());
                b.drain(i..j);
            }
            3 => b.truncate(rng.below(b.len() + 1)),
            4 if !b.is_empty() => {
                // duplicate a slice (repetition, deep nesting)
                let i = rng.below(b.len());
                let j = (i + rng.below(64)).min(b.len());
                let piece = b[i..j].to_vec();
                for _ in 0..rng.below(20) {
                    b.splice(i..i, piece.iter().copied());
                }
            }
            5 => {
                let depth = rng.below(200);
                let mut nested = vec![b'['; depth];
                nested.extend_from_slice(&b);
                nested.extend(std::iter::repeat_n(b']', depth));
                b = nested;
            }
            _ => {
                // replace a JSON value: splice in a random document
                let doc = random_json(rng, 0).to_string().into_bytes();
                let i = rng.below(b.len() + 1);
                b.splice(i..i, doc);
            }
        }
    }
    b
}

/// Runs `cases` cases against `target` from `seed`. Panics are caught and reported.
pub fn run(target: &Target, cases: u64, seed: u64) -> Report {
    let mut rng = Rng(seed.max(1) ^ 0x9E37_79B9_7F4A_7C15);
    let seeds = (target.seeds)();
    let mut report = Report {
        target: target.name,
        ..Report::default()
    };
    // a caught panic must not print a backtrace per case
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for _ in 0..cases {
        let input = match rng.below(4) {
            0 => (0..rng.below(256)).map(|_| rng.next() as u8).collect(),
            1 => random_json(&mut rng, 0).to_string().into_bytes(),
            _ if !seeds.is_empty() => {
                let s = &seeds[rng.below(seeds.len())];
                mutate(&mut rng, s)
            }
            _ => vec![],
        };
        report.cases += 1;
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| (target.run)(&input))) {
            report.panic_count += 1;
            if report.panics.len() < 5 {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                report.panics.push((input, msg));
            }
        }
    }
    std::panic::set_hook(hook);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_parses() {
        // the seeds are valid inputs: the harness starts from what parsers accept
        assert!(targets().len() >= 11);
        for t in targets() {
            assert!(!(t.seeds)().is_empty(), "{}", t.name);
        }
        let ok = cresolver_workers::protocol::parse_resolve_answer(&(targets()[0].seeds)()[0]);
        assert!(ok.is_ok(), "{ok:?}");
    }
}
