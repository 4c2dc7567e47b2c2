//! Tally: reduces each worker's 8 dimension scores to the 3 on-chain scores, computes
//! the reputation-weighted vote and the reward weights, exactly as the reference
//! workflow does (f64 arithmetic, `Math.round`), and lists every registered worker in
//! registration order — non-responders with weight 0 and scores (0,0,0).

use super::jsmath::js_round;
use crate::MarketId;
use crate::Position;
use alloy_primitives::{Address, U256};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The 8 evaluation dimensions, each 0–100.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dimensions {
    /// Whether the determination follows from the evidence and the confidence is calibrated (weight 20).
    pub resolution_quality: f64,
    /// The diversity, reliability and relevance of the cited sources (weight 15).
    pub source_quality: f64,
    /// The thoroughness, nuance and detail of the evidence (weight 15).
    pub analysis_depth: f64,
    /// The structure, flow and coherence of the arguments (weight 15).
    pub reasoning_clarity: f64,
    /// The factual backing and verifiability of the claims (weight 10).
    pub evidence_strength: f64,
    /// Acknowledged uncertainty and counterarguments addressed (weight 10).
    pub bias_awareness: f64,
    /// The recency of the sources and data (weight 10).
    pub timeliness: f64,
    /// The quality of the worker's answers to its challenge questions (weight 5).
    pub collaboration: f64,
}

impl Dimensions {
    /// The JSON names of the dimensions, in the order of `getScoringCriteria()`.
    pub const NAMES: [&'static str; 8] = [
        "resolutionQuality",
        "sourceQuality",
        "analysisDepth",
        "reasoningClarity",
        "evidenceStrength",
        "biasAwareness",
        "timeliness",
        "collaboration",
    ];
    /// Their weights in percent, as `getScoringCriteria()` returns them.
    pub const WEIGHTS: [u32; 8] = [20, 15, 15, 15, 10, 10, 10, 5];

    /// Every dimension set to `v` (the reference's neutral fallback uses 50).
    pub fn uniform(v: f64) -> Self {
        Self::from_array([v; 8])
    }

    /// The 8 scores in the order of [`Self::NAMES`].
    pub fn to_array(&self) -> [f64; 8] {
        [
            self.resolution_quality,
            self.source_quality,
            self.analysis_depth,
            self.reasoning_clarity,
            self.evidence_strength,
            self.bias_awareness,
            self.timeliness,
            self.collaboration,
        ]
    }

    /// The dimensions from 8 scores in the order of [`Self::NAMES`].
    pub fn from_array(a: [f64; 8]) -> Self {
        Self {
            resolution_quality: a[0],
            source_quality: a[1],
            analysis_depth: a[2],
            reasoning_clarity: a[3],
            evidence_strength: a[4],
            bias_awareness: a[5],
            timeliness: a[6],
            collaboration: a[7],
        }
    }

    /// The first dimension that is not a finite number in [0, 100], if any.
    pub fn out_of_range(&self) -> Option<(&'static str, f64)> {
        Self::NAMES
            .iter()
            .zip(self.to_array())
            .find(|(_, v)| !(v.is_finite() && (0.0..=100.0).contains(v)))
            .map(|(n, v)| (*n, v))
    }

    /// Each score rounded (`Math.round`) and clamped to [0, 100], as the reference does
    /// to the evaluator's raw numbers before anything else. Idempotent.
    pub fn normalized(&self) -> Self {
        Self::from_array(self.to_array().map(|v| js_round(v).clamp(0.0, 100.0)))
    }

    /// The 8 → 3 reduction onto the on-chain scores (on the normalized scores; the
    /// operation order is the reference's, for bit-exact f64 results).
    pub fn reduce(&self) -> OnchainScores {
        let d = self.normalized();
        let res = js_round(
            (d.resolution_quality * 20.0 + d.reasoning_clarity * 15.0 + d.evidence_strength * 10.0)
                / 45.0,
        );
        let src = js_round((d.source_quality * 15.0 + d.timeliness * 10.0) / 25.0);
        let depth = js_round(
            (d.analysis_depth * 15.0 + d.bias_awareness * 10.0 + d.collaboration * 5.0) / 30.0,
        );
        OnchainScores {
            res_quality: to_score(res),
            src_quality: to_score(src),
            analysis_depth: to_score(depth),
        }
    }
}

fn to_score(v: f64) -> u8 {
    // Inputs are validated to [0,100]; the clamp only guards the cast.
    v.clamp(0.0, 100.0) as u8
}

/// The three scores written on chain, each 0–100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct OnchainScores {
    /// `resQuality`: resolution quality, reasoning clarity and evidence strength.
    pub res_quality: u8,
    /// `srcQuality`: source quality and timeliness.
    pub src_quality: u8,
    /// `analysisDepth`: analysis depth, bias awareness and collaboration.
    pub analysis_depth: u8,
}

impl OnchainScores {
    /// `round((res + src + depth) / 3)`.
    pub fn quality(&self) -> f64 {
        js_round(
            (f64::from(self.res_quality)
                + f64::from(self.src_quality)
                + f64::from(self.analysis_depth))
                / 3.0,
        )
    }
}

/// A worker's on-chain reputation as `getReputation` returns it (averages 0–100).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reputation {
    /// The worker's average `resQuality` over the resolutions it was scored in.
    pub res_quality: f64,
    /// The worker's average `srcQuality` over the resolutions it was scored in.
    pub src_quality: f64,
    /// The worker's average `analysisDepth` over the resolutions it was scored in.
    pub analysis_depth: f64,
    /// How many resolutions the averages cover (0: no history).
    pub count: u64,
}

impl Reputation {
    /// `1.0` without history, else `(res + src + depth) / 3 / 100 + 0.5`.
    pub fn factor(&self) -> f64 {
        if self.count == 0 {
            1.0
        } else {
            (self.res_quality + self.src_quality + self.analysis_depth) / 3.0 / 100.0 + 0.5
        }
    }
}

/// How an exactly tied vote is decided.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TieRule {
    /// YES wins a tie (the reference's behaviour).
    #[default]
    Yes,
    /// NO wins a tie.
    No,
    /// A tie fails the round.
    Fail,
}

impl fmt::Display for TieRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TieRule::Yes => "yes",
            TieRule::No => "no",
            TieRule::Fail => "fail",
        })
    }
}

/// What a worker voted, if it gave a valid resolve response.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Vote {
    /// The worker's position. An abstention is scored and rewarded (with the 50
    /// multiplier, as it did not vote with the outcome), but has no vote weight.
    pub position: Position,
    /// The worker's stated confidence, in [0, 1].
    pub confidence: f64,
}

/// One registered worker as the tally sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TallyWorker {
    /// The worker's address.
    pub address: Address,
    /// `None` for a worker that gave no valid resolve response.
    pub vote: Option<Vote>,
    /// The evaluator's 8 scores (ignored for non-responders).
    pub scores: Dimensions,
    /// The worker's on-chain reputation, which scales its vote and reward weight.
    pub reputation: Reputation,
}

/// Per-worker results of the tally.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerResult {
    /// The worker's address.
    pub address: Address,
    /// Whether it gave a valid resolve response.
    pub responded: bool,
    /// The side it voted (`true`: YES); `None` when it abstained or did not respond.
    pub determination: Option<bool>,
    /// Its 3 on-chain scores ((0, 0, 0) for a non-responder).
    pub scores: OnchainScores,
    /// `round((res + src + depth) / 3)` of its on-chain scores.
    pub quality: f64,
    /// Its reputation factor ([`Reputation::factor`]).
    pub reputation_factor: f64,
    /// `quality * reputation_factor`, or 0 when it abstained or did not respond.
    pub vote_weight: f64,
    /// Whether its vote matched the resolution.
    pub voted_with_outcome: bool,
    /// Its reward weight: `round(quality * multiplier * reputation_factor)`, the
    /// multiplier 200 with the outcome and 50 otherwise (0 for a non-responder).
    pub weight: u64,
}

/// The outcome of a tally: everything `resolveMarket` needs, plus the working.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TallyOutcome {
    /// The market the tally resolves.
    pub market_id: MarketId,
    /// The outcome: `true` for YES.
    pub resolution: bool,
    /// The summed vote weight of the YES votes.
    pub yes_weight: f64,
    /// The summed vote weight of the NO votes.
    pub no_weight: f64,
    /// Whether the two weights were equal (the tie rule decided the outcome).
    pub tie: bool,
    /// Every registered worker, in registration order.
    pub workers: Vec<WorkerResult>,
}

impl TallyOutcome {
    /// The vote weight behind the resolution (the YES weight for YES, else the NO).
    pub fn winning_weight(&self) -> f64 {
        if self.resolution {
            self.yes_weight
        } else {
            self.no_weight
        }
    }

    /// What `resolveMarket` pays each worker, in wei, in the tally's worker order:
    /// `rewardPool * weight / totalWeight` (integer division, as the contract) plus the
    /// worker's stake back (`stakes` in the same order; a missing one counts 0). `None`
    /// when the weights sum to 0 (the contract reverts `ZeroTotalWeight`).
    pub fn payouts(&self, reward_pool: U256, stakes: &[U256]) -> Option<Vec<U256>> {
        let total = self
            .workers
            .iter()
            .fold(U256::ZERO, |t, w| t.saturating_add(U256::from(w.weight)));
        if total.is_zero() {
            return None;
        }
        Some(
            self.workers
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let share = reward_pool.saturating_mul(U256::from(w.weight)) / total;
                    share.saturating_add(stakes.get(i).copied().unwrap_or_default())
                })
                .collect(),
        )
    }

    /// The workers' addresses, in the tally's worker order.
    pub fn addresses(&self) -> Vec<Address> {
        self.workers.iter().map(|w| w.address).collect()
    }
    /// The workers' reward weights, in the tally's worker order.
    pub fn weights(&self) -> Vec<U256> {
        self.workers.iter().map(|w| U256::from(w.weight)).collect()
    }
    /// `(resQuality, srcQuality, analysisDepth)` packed per worker.
    pub fn dim_scores(&self) -> Vec<u8> {
        self.workers
            .iter()
            .flat_map(|w| {
                [
                    w.scores.res_quality,
                    w.scores.src_quality,
                    w.scores.analysis_depth,
                ]
            })
            .collect()
    }
    /// The CRE report bytes for this outcome.
    pub fn report(&self) -> alloy_primitives::Bytes {
        super::report::encode_report(
            self.market_id,
            &self.addresses(),
            &self.weights(),
            &self.dim_scores(),
            self.resolution,
        )
    }
}

/// Why a tally has no outcome.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TallyError {
    /// No worker gave a valid resolve response.
    #[error("no worker gave a valid response: nothing to tally")]
    NoResponders,
    /// The vote is tied and the tie rule is [`TieRule::Fail`].
    #[error("the vote is tied ({weight} each side) and the workflow's tie rule is `fail`")]
    Tie {
        /// The vote weight on each side.
        weight: f64,
    },
    /// Every reward weight is 0, so `resolveMarket` would revert.
    #[error(
        "every responding worker has reward weight 0 (quality scores all 0): the market would revert with ZeroTotalWeight"
    )]
    ZeroTotalWeight,
    /// A responder's dimension score is not a number in [0, 100].
    #[error("worker {address}: {field} = {value} is outside [0, 100]")]
    ScoreOutOfRange {
        /// The worker's address.
        address: Address,
        /// The dimension's JSON name (one of [`Dimensions::NAMES`]).
        field: &'static str,
        /// The score given.
        value: f64,
    },
    /// A responder's confidence is not a number in [0, 1].
    #[error("worker {address}: confidence {value} is not a number in [0, 1]")]
    BadConfidence {
        /// The worker's address.
        address: Address,
        /// The confidence given.
        value: f64,
    },
    /// A reputation average is negative or not finite.
    #[error("worker {address}: reputation {field} = {value} is not a finite number >= 0")]
    BadReputation {
        /// The worker's address.
        address: Address,
        /// The average's on-chain name (`resQuality`, `srcQuality`, `analysisDepth`).
        field: &'static str,
        /// The average given.
        value: f64,
    },
    /// A worker appears twice in the list.
    #[error("worker {address} is listed twice")]
    DuplicateWorker {
        /// The worker's address.
        address: Address,
    },
}

/// Runs the tally over the registered workers, in registration order.
pub fn tally(
    market_id: MarketId,
    workers: &[TallyWorker],
    tie: TieRule,
) -> Result<TallyOutcome, TallyError> {
    validate(workers)?;
    let mut yes = 0.0_f64;
    let mut no = 0.0_f64;
    let mut rows = Vec::with_capacity(workers.len());
    for w in workers {
        let rep = w.reputation.factor();
        match w.vote {
            Some(v) => {
                let scores = w.scores.reduce();
                let quality = scores.quality();
                let vote_weight = if v.position.is_abstain() {
                    0.0
                } else {
                    quality * rep
                };
                match v.position {
                    Position::Yes => yes += vote_weight,
                    Position::No => no += vote_weight,
                    Position::Abstain => {}
                }
                rows.push(WorkerResult {
                    address: w.address,
                    responded: true,
                    determination: v.position.side(),
                    scores,
                    quality,
                    reputation_factor: rep,
                    vote_weight,
                    voted_with_outcome: false,
                    weight: 0,
                });
            }
            None => rows.push(WorkerResult {
                address: w.address,
                responded: false,
                determination: None,
                scores: OnchainScores::default(),
                quality: 0.0,
                reputation_factor: rep,
                vote_weight: 0.0,
                voted_with_outcome: false,
                weight: 0,
            }),
        }
    }
    if !rows.iter().any(|r| r.responded) {
        return Err(TallyError::NoResponders);
    }
    let is_tie = yes == no;
    let resolution = if is_tie {
        match tie {
            TieRule::Yes => true,
            TieRule::No => false,
            TieRule::Fail => return Err(TallyError::Tie { weight: yes }),
        }
    } else {
        yes > no
    };
    for r in rows.iter_mut().filter(|r| r.responded) {
        let with = r.determination == Some(resolution);
        let multiplier = if with { 200.0 } else { 50.0 };
        r.voted_with_outcome = with;
        // Same operation order as the reference: round(quality * multiplier * repFactor).
        r.weight = js_round(r.quality * multiplier * r.reputation_factor).max(0.0) as u64;
    }
    if rows.iter().all(|r| r.weight == 0) {
        return Err(TallyError::ZeroTotalWeight);
    }
    Ok(TallyOutcome {
        market_id,
        resolution,
        yes_weight: yes,
        no_weight: no,
        tie: is_tie,
        workers: rows,
    })
}

fn validate(workers: &[TallyWorker]) -> Result<(), TallyError> {
    let mut seen = std::collections::HashSet::new();
    for w in workers {
        if !seen.insert(w.address) {
            return Err(TallyError::DuplicateWorker { address: w.address });
        }
        let rep = &w.reputation;
        for (field, value) in [
            ("resQuality", rep.res_quality),
            ("srcQuality", rep.src_quality),
            ("analysisDepth", rep.analysis_depth),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(TallyError::BadReputation {
                    address: w.address,
                    field,
                    value,
                });
            }
        }
        if let Some(v) = w.vote {
            if !(v.confidence.is_finite() && (0.0..=1.0).contains(&v.confidence)) {
                return Err(TallyError::BadConfidence {
                    address: w.address,
                    value: v.confidence,
                });
            }
            if let Some((field, value)) = w.scores.out_of_range() {
                return Err(TallyError::ScoreOutOfRange {
                    address: w.address,
                    field,
                    value,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(weights: &[u64]) -> TallyOutcome {
        TallyOutcome {
            market_id: MarketId::ZERO,
            resolution: true,
            yes_weight: 2.0,
            no_weight: 0.5,
            tie: false,
            workers: weights
                .iter()
                .enumerate()
                .map(|(i, w)| WorkerResult {
                    address: Address::repeat_byte(i as u8 + 1),
                    responded: true,
                    determination: Some(true),
                    scores: OnchainScores::default(),
                    quality: 0.0,
                    reputation_factor: 1.0,
                    vote_weight: 1.0,
                    voted_with_outcome: true,
                    weight: *w,
                })
                .collect(),
        }
    }

    #[test]
    fn payouts_are_what_the_contract_pays() {
        // the figures of the contract test (tests/contracts.rs): 1 ETH pool, 0.01 stake
        let stake = U256::from(10u64.pow(16));
        let o = outcome(&[16000, 3025, 0]);
        assert_eq!(
            o.payouts(U256::from(10u64.pow(18)), &[stake; 3]).unwrap(),
            vec![
                U256::from(850_998_685_939_553_219u64),
                U256::from(169_001_314_060_446_780u64),
                stake
            ]
        );
        assert_eq!(o.winning_weight(), 2.0);
        assert_eq!(outcome(&[0, 0]).payouts(U256::from(1), &[]), None);
    }
}
