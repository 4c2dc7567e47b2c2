//! Fan-out: a round's resolve calls go to every discovered worker at once; quorum is
//! counted over the *registered* set (discarded workers count in n). With a grace
//! period, stragglers are cut off once quorum is met and the grace has run out. Then
//! every valid responder is challenged, again concurrently.

use super::challenge::{ChallengeTemplates, challenges_for, votes};
use super::client::StageClient;
use super::protocol::{
    ChallengeOutcome, ChallengeRequest, PeerAnswer, Ratification, RatifyRequest, ResolveAnswer,
    ResolveRequest, WorkerFailure, WorkerProtocol,
};
use alloy_primitives::Address;
use cresolver_core::QuorumRule;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::Url;

/// Where and how to reach a discovered worker.
#[derive(Debug, Clone)]
pub struct WorkerTarget {
    /// The worker's endpoint (base URL, webhook or relay, as its protocol reads it).
    pub endpoint: Url,
    /// The protocol the worker speaks.
    pub protocol: Arc<dyn WorkerProtocol>,
}

/// One registered worker of the market, in registration order.
#[derive(Debug, Clone)]
pub struct WorkerSlot {
    /// The worker's registered address.
    pub address: Address,
    /// `Err(reason)` when discovery discarded the worker.
    pub target: Result<WorkerTarget, String>,
}

/// What one worker's resolve call produced.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ResolveResult {
    /// The worker's registered address.
    pub address: Address,
    /// Its validated answer, or why there is none.
    pub outcome: Result<ResolveAnswer, WorkerFailure>,
    /// How long the call took (milliseconds; 0 for a worker not called or cut off).
    pub elapsed_ms: u64,
}

impl ResolveResult {
    /// The answer, when the call produced a valid one.
    pub fn answer(&self) -> Option<&ResolveAnswer> {
        self.outcome.as_ref().ok()
    }
}

/// The resolve stage's results, in slot order, and the quorum verdict.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ResolveStage {
    /// One result per registered worker, in slot order.
    pub results: Vec<ResolveResult>,
    /// Workers registered for the market (discarded ones included): the quorum's n.
    pub registered: usize,
    /// Valid answers the quorum rule requires of `registered`.
    pub required: usize,
    /// Valid answers received.
    pub valid: usize,
    /// Whether `valid` meets the quorum rule.
    pub quorum_met: bool,
}

/// Calls `/resolve` on every discovered worker concurrently.
pub async fn resolve_stage(
    client: &StageClient,
    slots: &[WorkerSlot],
    request: &ResolveRequest,
    rule: QuorumRule,
    grace: Option<Duration>,
) -> ResolveStage {
    let n = slots.len();
    let mut results: Vec<Option<ResolveResult>> = vec![None; n];
    let mut pending = FuturesUnordered::new();
    for (i, slot) in slots.iter().enumerate() {
        match &slot.target {
            Ok(target) => pending.push(async move {
                let started = Instant::now();
                let outcome = target
                    .protocol
                    .resolve(client, &target.endpoint, request)
                    .await;
                (i, outcome, started.elapsed().as_millis() as u64)
            }),
            Err(reason) => {
                results[i] = Some(ResolveResult {
                    address: slot.address,
                    outcome: Err(WorkerFailure::NotDiscovered {
                        reason: reason.clone(),
                    }),
                    elapsed_ms: 0,
                })
            }
        }
    }
    let mut valid = 0usize;
    let mut cutoff: Option<tokio::time::Instant> = None;
    loop {
        let next = match cutoff {
            Some(at) => match tokio::time::timeout_at(at, pending.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => pending.next().await,
        };
        let Some((i, outcome, elapsed_ms)) = next else {
            break;
        };
        if outcome.is_ok() {
            valid += 1;
        }
        results[i] = Some(ResolveResult {
            address: slots[i].address,
            outcome,
            elapsed_ms,
        });
        if let (Some(g), None) = (grace, cutoff)
            && rule.is_met(valid, n)
        {
            cutoff = Some(tokio::time::Instant::now() + g);
        }
    }
    drop(pending);
    let results: Vec<ResolveResult> = results
        .into_iter()
        .zip(slots)
        .map(|(r, slot)| {
            r.unwrap_or(ResolveResult {
                address: slot.address,
                outcome: Err(WorkerFailure::CutAfterQuorum),
                elapsed_ms: 0,
            })
        })
        .collect();
    ResolveStage {
        registered: n,
        required: rule.required(n),
        valid,
        quorum_met: rule.is_met(valid, n),
        results,
    }
}

/// The valid responders as peers: `(slot index, label + answer)` in slot order; the
/// k-th valid responder is labelled `W{numbering[k]}`. Workers are shown a fresh random
/// numbering per stage ([`random_numbering`]), independent of the evaluator's labels, so
/// no worker can tell which label the evaluator sees it under.
pub fn labelled_answers(stage: &ResolveStage, numbering: &[usize]) -> Vec<(usize, PeerAnswer)> {
    stage
        .results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.answer().map(|a| (i, a.clone())))
        .enumerate()
        .map(|(k, (i, answer))| {
            (
                i,
                PeerAnswer {
                    label: format!("W{}", numbering.get(k).copied().unwrap_or(k + 1)),
                    answer: answer.into(),
                },
            )
        })
        .collect()
}

/// `1..=n` in a random order.
pub fn random_numbering(n: usize) -> Vec<usize> {
    use rand::seq::SliceRandom;
    let mut v: Vec<usize> = (1..=n).collect();
    v.shuffle(&mut rand::thread_rng());
    v
}

/// Challenges every valid responder concurrently; `None` for workers without a valid
/// answer. Each worker gets the workflow's rendered challenge texts and the other
/// responders' answers (under opaque labels); its protocol decides which it sends.
/// Results are in slot order.
pub async fn challenge_stage(
    client: &StageClient,
    templates: &ChallengeTemplates,
    request: &ResolveRequest,
    slots: &[WorkerSlot],
    stage: &ResolveStage,
) -> Vec<Option<ChallengeOutcome>> {
    let labelled = labelled_answers(stage, &random_numbering(stage.valid));
    let determinations = votes(labelled.iter().map(|(_, p)| &*p.answer));
    let calls = labelled.iter().map(|(i, me)| {
        let determinations = &determinations;
        let labelled = &labelled;
        async move {
            let Ok(target) = &slots[*i].target else {
                return (*i, None);
            };
            let challenges =
                challenges_for(templates, &request.question, &me.answer, determinations);
            let peers: Vec<PeerAnswer> = labelled
                .iter()
                .filter(|(j, _)| j != i)
                .map(|(_, p)| p.clone())
                .collect();
            let outcome = target
                .protocol
                .challenge(
                    client,
                    &target.endpoint,
                    ChallengeRequest {
                        request,
                        label: &me.label,
                        own: &me.answer,
                        challenges: &challenges,
                        peers: &peers,
                    },
                )
                .await;
            (*i, Some(outcome))
        }
    });
    let mut out = vec![None; slots.len()];
    for (i, outcome) in futures::future::join_all(calls).await {
        out[i] = outcome;
    }
    out
}

/// One worker's ratifying vote: its label, and the vote or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RatifyResult {
    /// The worker's registered address.
    pub address: Address,
    /// The label the worker was shown under in this vote.
    pub label: String,
    /// Its vote, or why there is none.
    pub outcome: Result<Ratification, WorkerFailure>,
}

/// Puts the tallied outcome to a ratifying vote of every valid responder whose
/// protocol has one, concurrently. Dissent is recorded, never counted. In slot order;
/// workers whose protocol has no vote are left out.
pub async fn ratify_stage(
    client: &StageClient,
    request: &ResolveRequest,
    slots: &[WorkerSlot],
    stage: &ResolveStage,
    resolution: bool,
) -> Vec<RatifyResult> {
    let labelled = labelled_answers(stage, &random_numbering(stage.valid));
    let (majority, minority): (Vec<PeerAnswer>, Vec<PeerAnswer>) = labelled
        .iter()
        .map(|(_, p)| p.clone())
        .partition(|p| !p.answer.abstain && p.answer.determination == resolution);
    let calls = labelled.iter().filter_map(|(i, me)| {
        let target = slots[*i].target.as_ref().ok()?;
        let call = target.protocol.ratify(
            client,
            &target.endpoint,
            RatifyRequest {
                request,
                resolution,
                majority: &majority,
                minority: &minority,
            },
        )?;
        let address = slots[*i].address;
        let label = me.label.clone();
        Some(async move {
            RatifyResult {
                address,
                label,
                outcome: call.await,
            }
        })
    });
    futures::future::join_all(calls).await
}
