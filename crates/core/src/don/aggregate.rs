//! The aggregate of a fixed set of observations: what every DON member recomputes from the
//! set the consensus decided before it signs a report.
//!
//! The result depends only on the *set*: the observations are sorted by observer before
//! anything is checked or counted, so any permutation of the same observations yields the
//! same [`Aggregate`] (or the same [`AggregateError`]). Every rule is integer arithmetic on
//! observed values, so all members agree bit for bit.
//!
//! # The rule, and why it is bounded by what honest members saw
//!
//! With at most `f` lying observations in a set of `m >= 2f + 1`, a value taken at a sorted
//! index `i` with `f <= i <= k - 1 - f` of `k` values lies between two honest values: at
//! least `f + 1` values are at or below it (one of them honest) and at least `f + 1` at or
//! above it. The lower median of `k >= 2f + 1` values, at index `(k - 1) / 2`, is such an
//! index. Hence, with no condition on how honest and lying values are spread:
//!
//! * a set needs `2f + 1` distinct observers, all bound to the round ([`Binding`]) and all
//!   listing exactly the registered workers, in registration order, with in-range values;
//! * the round's timestamp is the lower median of all `m` timestamps;
//! * a worker counts as answered only when at least `2f + 1` observations in the set hold
//!   an answer from it (so at least `f + 1` honest members saw one);
//! * its position is the lower median of the answers' positions ordered
//!   `No < Abstain < Yes`, and its confidence and each of its 3 scores are per-field lower
//!   medians of the answers: each lies between values honest members observed.
//!
//! A worker with fewer than `2f + 1` answers in the set counts as not answered. That is
//! an honest outcome whenever the set holds every honest observation (then fewer than
//! `2f + 1` answers means some honest member saw no answer). When the set omits honest
//! observations, f liars can withhold answers and so leave a worker out; no rule can do
//! better on a set of exactly `2f + 1`: from {a, b, none} no output is right both when the
//! `none` lies (it must be answered, between a and b) and when `a` lies (it must be none or
//! b). The leader therefore proposes every usable observation it holds, after a grace for
//! the last ones. A liar can drop a worker; it can never put a value on chain that no honest
//! member's observations bracket.

use super::{Observation, ObservedAnswer, Position};
use crate::MarketId;
use crate::tally::{Dimensions, Reputation, TallyWorker, Vote};
use alloy_primitives::{Address, B256};
use serde::{Deserialize, Serialize};

/// The binding every observation of the set must carry: which DON, which configuration,
/// which execution and which market it observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The DON the observation was made for.
    pub don_id: u32,
    /// The version of the DON's configuration (its member set and `f`).
    pub config_version: u32,
    /// The round's execution id (see [`super::execution_id`]).
    pub execution_id: B256,
    /// The market contract the round resolves a market of.
    pub market: Address,
    /// The market's id on that contract.
    pub market_id: MarketId,
}

/// One registered worker, as the set of observations agrees on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregatedWorker {
    /// The worker's address.
    pub address: Address,
    /// The number of observations in the set holding a valid answer from it.
    pub answered_by: usize,
    /// `Some` when `answered_by >= 2f + 1`: the lower median of the positions
    /// (`No < Abstain < Yes`) and the per-field lower medians of the confidence and the 3
    /// scores.
    pub answer: Option<ObservedAnswer>,
}

/// The aggregate of a set of observations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aggregate {
    /// The lower median of the observers' timestamps.
    pub timestamp: u32,
    /// The observers, sorted ascending.
    pub observers: Vec<Address>,
    /// Every registered worker, in registration order.
    pub workers: Vec<AggregatedWorker>,
}

/// Why a set of observations cannot be aggregated. When a set has several faults, the
/// one reported is fixed by the set alone: `TooFew` first, then the smallest duplicated
/// observer, then the first fault of the first faulty observation in observer order
/// (binding, then worker list, then ranges).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AggregateError {
    /// The set holds fewer than `2f + 1` observations.
    #[error("{have} observations, at least {need} (2f + 1) are needed")]
    TooFew {
        /// Observations in the set.
        have: usize,
        /// Observations needed: `2f + 1`.
        need: usize,
    },
    /// Two observations of the set come from the same observer.
    #[error("observer {0} appears more than once in the set")]
    DuplicateObserver(Address),
    /// An observation is bound to another DON, configuration, execution or market.
    #[error("the observation of {observer} is bound to another {field}")]
    Unbound {
        /// The member that made the observation.
        observer: Address,
        /// The [`Binding`] field that differs (`don_id`, `market`, …).
        field: &'static str,
    },
    /// An observation does not list exactly the registered workers in registration order.
    #[error("the observation of {observer} does not list exactly the registered workers, in order")]
    WorkerList {
        /// The member that made the observation.
        observer: Address,
    },
    /// An observation fails [`Observation::check_ranges`].
    #[error("the observation of {observer} has a value out of range: {detail}")]
    Range {
        /// The member that made the observation.
        observer: Address,
        /// What is out of range, as `check_ranges` words it.
        detail: String,
    },
}

/// Aggregates a set of observations of one round.
///
/// * `observations`: the set, in any order (the result does not depend on it).
/// * `binding`: what each observation must be bound to (`don_id`, `config_version`,
///   `execution_id`, `market`, `market_id`); a mismatch is [`AggregateError::Unbound`].
/// * `workers`: the registered workers in registration order; each observation must list
///   exactly these addresses in this order ([`AggregateError::WorkerList`]).
/// * `f`: the number of faulty members tolerated; the set needs at least `2f + 1`
///   observations ([`AggregateError::TooFew`]) from distinct observers
///   ([`AggregateError::DuplicateObserver`]), each passing
///   [`Observation::check_ranges`] ([`AggregateError::Range`]).
///
/// Per worker, an answer needs `2f + 1` observations holding one; the position, the
/// confidence and the 3 scores are per-field lower medians over those answers (positions
/// ordered `No < Abstain < Yes`); the timestamp is the lower median of all the observers'
/// timestamps. See the module documentation for why each lies between honest values.
pub fn aggregate(
    observations: &[Observation],
    binding: &Binding,
    workers: &[Address],
    f: usize,
) -> Result<Aggregate, AggregateError> {
    let need = f.saturating_mul(2).saturating_add(1);
    if observations.len() < need {
        return Err(AggregateError::TooFew {
            have: observations.len(),
            need,
        });
    }
    let mut sorted: Vec<&Observation> = observations.iter().collect();
    sorted.sort_by_key(|o| o.observer);
    if let Some(pair) = sorted.windows(2).find(|p| p[0].observer == p[1].observer) {
        return Err(AggregateError::DuplicateObserver(pair[0].observer));
    }
    for o in &sorted {
        check_observation(o, binding, workers)?;
    }

    let mut timestamps: Vec<u32> = sorted.iter().map(|o| o.timestamp).collect();
    let timestamp = lower_median(&mut timestamps).unwrap_or_default();
    let quorum = need;
    let workers = workers
        .iter()
        .enumerate()
        .map(|(i, address)| {
            let answers: Vec<ObservedAnswer> = sorted
                .iter()
                .filter_map(|o| o.workers.get(i).and_then(|w| w.answer))
                .collect();
            let answer = if answers.len() >= quorum {
                combine(&answers)
            } else {
                None
            };
            AggregatedWorker {
                address: *address,
                answered_by: answers.len(),
                answer,
            }
        })
        .collect();
    Ok(Aggregate {
        timestamp,
        observers: sorted.iter().map(|o| o.observer).collect(),
        workers,
    })
}

/// The binding, the worker list and the ranges of one observation (what makes it usable
/// in a set).
pub fn check_observation(
    o: &Observation,
    binding: &Binding,
    workers: &[Address],
) -> Result<(), AggregateError> {
    let mismatch = [
        ("don_id", o.don_id != binding.don_id),
        ("config_version", o.config_version != binding.config_version),
        ("execution_id", o.execution_id != binding.execution_id),
        ("market", o.market != binding.market),
        ("market_id", o.market_id != binding.market_id),
    ]
    .into_iter()
    .find(|(_, differs)| *differs);
    if let Some((field, _)) = mismatch {
        return Err(AggregateError::Unbound {
            observer: o.observer,
            field,
        });
    }
    if o.workers.len() != workers.len()
        || o.workers.iter().zip(workers).any(|(w, a)| w.address != *a)
    {
        return Err(AggregateError::WorkerList {
            observer: o.observer,
        });
    }
    o.check_ranges().map_err(|detail| AggregateError::Range {
        observer: o.observer,
        detail,
    })
}

/// The combined answer of a non-empty list of answers: per-field lower medians, the
/// position's over `No < Abstain < Yes`.
fn combine(answers: &[ObservedAnswer]) -> Option<ObservedAnswer> {
    let mut confidences: Vec<u32> = answers.iter().map(|a| a.confidence_ppm).collect();
    let confidence_ppm = lower_median(&mut confidences)?;
    let mut scores = [0u8; 3];
    for (k, score) in scores.iter_mut().enumerate() {
        let mut values: Vec<u8> = answers.iter().map(|a| a.scores[k]).collect();
        *score = lower_median(&mut values)?;
    }
    let mut positions: Vec<u8> = answers.iter().map(|a| position_rank(a.position)).collect();
    Some(ObservedAnswer {
        position: position_of_rank(lower_median(&mut positions)?),
        confidence_ppm,
        scores,
    })
}

/// A position's place in the order `No < Abstain < Yes`.
pub fn position_rank(p: Position) -> u8 {
    match p {
        Position::No => 0,
        Position::Abstain => 1,
        Position::Yes => 2,
    }
}

fn position_of_rank(r: u8) -> Position {
    match r {
        0 => Position::No,
        1 => Position::Abstain,
        _ => Position::Yes,
    }
}

/// The lower median: sorted ascending, the element at index `(k - 1) / 2` (`None` when
/// empty).
fn lower_median<T: Ord + Copy>(values: &mut [T]) -> Option<T> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    values.get((values.len() - 1) / 2).copied()
}

impl Aggregate {
    /// The tally's input, one [`TallyWorker`] per registered worker in order.
    ///
    /// An answered worker's 8 dimensions are built from its 3 aggregated scores so that
    /// [`Dimensions::reduce`] gives them back exactly: `res` → resolutionQuality,
    /// reasoningClarity, evidenceStrength; `src` → sourceQuality, timeliness; `depth` →
    /// analysisDepth, biasAwareness, collaboration (each group's weighted mean of equal
    /// integers is that integer, exactly, in f64). Its vote takes the aggregated
    /// position; confidence = `ppm / 1e6`. An unanswered worker has no vote and default dimensions.
    /// `reputations` is in worker order; a missing one is the default (no history).
    pub fn tally_workers(&self, reputations: &[Reputation]) -> Vec<TallyWorker> {
        self.workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let reputation = reputations.get(i).copied().unwrap_or_default();
                let (vote, scores) = match &w.answer {
                    Some(a) => {
                        let [res, src, depth] = a.scores.map(f64::from);
                        let scores = Dimensions {
                            resolution_quality: res,
                            reasoning_clarity: res,
                            evidence_strength: res,
                            source_quality: src,
                            timeliness: src,
                            analysis_depth: depth,
                            bias_awareness: depth,
                            collaboration: depth,
                        };
                        let vote = Vote {
                            position: a.position,
                            confidence: f64::from(a.confidence_ppm) / 1e6,
                        };
                        (Some(vote), scores)
                    }
                    None => (None, Dimensions::default()),
                };
                TallyWorker {
                    address: w.address,
                    vote,
                    scores,
                    reputation,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::don::WorkerObservation;
    use crate::tally::{OnchainScores, TieRule, tally};
    use proptest::prelude::*;

    fn binding() -> Binding {
        Binding {
            don_id: 7,
            config_version: 3,
            execution_id: B256::repeat_byte(0xee),
            market: Address::repeat_byte(0xaa),
            market_id: MarketId::from(42u64),
        }
    }

    fn worker_addrs(n: usize) -> Vec<Address> {
        (0..n)
            .map(|i| Address::repeat_byte(0xb0 + i as u8))
            .collect()
    }

    fn member(i: usize) -> Address {
        Address::with_last_byte(1 + i as u8)
    }

    fn ans(position: Position, confidence_ppm: u32, scores: [u8; 3]) -> Option<ObservedAnswer> {
        Some(ObservedAnswer {
            position,
            confidence_ppm,
            scores,
        })
    }

    fn obs(i: usize, timestamp: u32, answers: &[Option<ObservedAnswer>]) -> Observation {
        let b = binding();
        Observation {
            don_id: b.don_id,
            config_version: b.config_version,
            execution_id: b.execution_id,
            market: b.market,
            market_id: b.market_id,
            observer: member(i),
            timestamp,
            workers: worker_addrs(answers.len())
                .into_iter()
                .zip(answers)
                .map(|(address, answer)| WorkerObservation {
                    address,
                    answer: *answer,
                    failure: answer.is_none().then(|| "timeout".to_string()),
                })
                .collect(),
        }
    }

    fn run(set: &[Observation], f: usize) -> Result<Aggregate, AggregateError> {
        let n = set.first().map_or(0, |o| o.workers.len());
        aggregate(set, &binding(), &worker_addrs(n), f)
    }

    #[test]
    fn medians_mode_and_quorum() {
        use Position::*;
        let set = [
            obs(0, 100, &[ans(Yes, 900_000, [80, 70, 60]), None]),
            obs(1, 300, &[ans(Yes, 500_000, [10, 90, 61]), None]),
            obs(
                2,
                200,
                &[ans(No, 700_000, [50, 20, 62]), ans(No, 1, [1, 1, 1])],
            ),
            obs(3, 400, &[ans(Yes, 600_000, [40, 30, 63]), None]),
        ];
        let a = run(&set, 1).unwrap();
        assert_eq!(a.timestamp, 200);
        assert_eq!(a.observers, (0..4).map(member).collect::<Vec<_>>());
        assert_eq!(a.workers[0].answered_by, 4);
        // lower medians: sorted confidences 500k,600k,700k,900k → index 1
        assert_eq!(a.workers[0].answer, ans(Yes, 600_000, [40, 30, 61]));
        // one answer < 2f + 1 = 3: not answered
        assert_eq!(a.workers[1].answered_by, 1);
        assert_eq!(a.workers[1].answer, None);
    }

    #[test]
    fn positions_take_the_lower_median_no_abstain_yes() {
        use Position::*;
        let set = [
            obs(
                0,
                1,
                &[
                    ans(Yes, 1, [1, 1, 1]),
                    ans(Yes, 1, [1, 1, 1]),
                    ans(No, 1, [1, 1, 1]),
                ],
            ),
            obs(
                1,
                1,
                &[
                    ans(No, 1, [1, 1, 1]),
                    ans(Yes, 1, [1, 1, 1]),
                    ans(No, 1, [1, 1, 1]),
                ],
            ),
            obs(
                2,
                1,
                &[
                    ans(Abstain, 1, [1, 1, 1]),
                    ans(No, 1, [1, 1, 1]),
                    ans(Yes, 1, [1, 1, 1]),
                ],
            ),
            obs(3, 1, &[None, None, ans(Yes, 1, [1, 1, 1])]),
        ];
        let a = run(&set, 1).unwrap();
        assert_eq!(a.workers[0].answer.unwrap().position, Abstain);
        assert_eq!(a.workers[1].answer.unwrap().position, Yes);
        // No, No, Yes, Yes: the lower of the two middle ones
        assert_eq!(a.workers[2].answer.unwrap().position, No);
    }

    #[test]
    fn a_worker_that_answered_some_honest_members_keeps_a_liars_values_off() {
        use Position::*;
        let honest = ans(Yes, 900_000, [94, 70, 61]);
        let liar = ans(No, 1, [1, 1, 1]);
        // {liar, an honest member that saw the answer, one that did not}: two answers are
        // not 2f + 1, so the worker counts as not answered (an honest member saw that)
        let three = [obs(0, 1, &[liar]), obs(1, 1, &[honest]), obs(2, 1, &[None])];
        assert_eq!(run(&three, 1).unwrap().workers[0].answer, None);
        // with every observation, three answers: the medians are the honest values
        let four = [
            obs(0, 1, &[liar]),
            obs(1, 1, &[honest]),
            obs(2, 1, &[None]),
            obs(3, 1, &[honest]),
        ];
        assert_eq!(run(&four, 1).unwrap().workers[0].answer, honest);
    }

    #[test]
    fn too_few() {
        let set = [obs(0, 1, &[None]), obs(1, 1, &[None])];
        assert_eq!(
            run(&set, 1),
            Err(AggregateError::TooFew { have: 2, need: 3 })
        );
        assert_eq!(
            run(&set, usize::MAX),
            Err(AggregateError::TooFew {
                have: 2,
                need: usize::MAX
            })
        );
        assert!(run(&set[..1], 0).is_ok());
    }

    #[test]
    fn duplicate_observer() {
        let mut set = vec![obs(0, 1, &[None]), obs(1, 1, &[None]), obs(2, 1, &[None])];
        set[2].observer = member(1);
        set[2].timestamp = 9;
        assert_eq!(
            run(&set, 1),
            Err(AggregateError::DuplicateObserver(member(1)))
        );
        set.reverse();
        assert_eq!(
            run(&set, 1),
            Err(AggregateError::DuplicateObserver(member(1)))
        );
    }

    #[test]
    fn unbound() {
        type Edit = fn(&mut Observation);
        let edits: [(&str, Edit); 5] = [
            ("don_id", |o| o.don_id += 1),
            ("config_version", |o| o.config_version += 1),
            ("execution_id", |o| o.execution_id = B256::ZERO),
            ("market", |o| o.market = Address::ZERO),
            ("market_id", |o| o.market_id = MarketId::from(43u64)),
        ];
        for (field, edit) in edits {
            let mut set = vec![obs(0, 1, &[None]), obs(1, 1, &[None]), obs(2, 1, &[None])];
            edit(&mut set[1]);
            assert_eq!(
                run(&set, 1),
                Err(AggregateError::Unbound {
                    observer: member(1),
                    field
                })
            );
        }
    }

    #[test]
    fn worker_list() {
        let base = vec![
            obs(0, 1, &[None, None]),
            obs(1, 1, &[None, None]),
            obs(2, 1, &[None, None]),
        ];
        let edits: [fn(&mut Observation); 4] = [
            |o| o.workers.reverse(),
            |o| {
                o.workers.pop();
            },
            |o| o.workers.push(o.workers[0].clone()),
            |o| o.workers[1].address = Address::ZERO,
        ];
        for edit in edits {
            let mut set = base.clone();
            edit(&mut set[2]);
            let want = Err(AggregateError::WorkerList {
                observer: member(2),
            });
            assert_eq!(run(&set, 1), want);
        }
        // an observation listing no worker when one is registered
        assert_eq!(
            aggregate(&base, &binding(), &worker_addrs(3), 1),
            Err(AggregateError::WorkerList {
                observer: member(0)
            })
        );
    }

    #[test]
    fn range() {
        let mut set = vec![obs(0, 1, &[None]), obs(1, 1, &[None]), obs(2, 1, &[None])];
        set[0].workers[0].answer = ans(Position::Yes, 1_000_001, [0, 0, 0]);
        set[0].workers[0].failure = None;
        assert!(matches!(
            run(&set, 1),
            Err(AggregateError::Range { observer, .. }) if observer == member(0)
        ));
    }

    #[test]
    fn tally_workers_reduce_back_exactly() {
        for res in 0..=100u8 {
            for src in 0..=100u8 {
                let a = Aggregate {
                    timestamp: 0,
                    observers: vec![],
                    workers: (0..=100u8)
                        .map(|depth| AggregatedWorker {
                            address: Address::with_last_byte(depth),
                            answered_by: 1,
                            answer: ans(Position::Yes, 0, [res, src, depth]),
                        })
                        .collect(),
                };
                for (t, w) in a.tally_workers(&[]).iter().zip(&a.workers) {
                    let s = w.answer.unwrap().scores;
                    assert_eq!(
                        t.scores.reduce(),
                        OnchainScores {
                            res_quality: s[0],
                            src_quality: s[1],
                            analysis_depth: s[2]
                        }
                    );
                }
            }
        }
    }

    #[test]
    fn tally_workers_votes_and_reputations() {
        let rep = Reputation {
            res_quality: 80.0,
            src_quality: 70.0,
            analysis_depth: 60.0,
            count: 3,
        };
        let w = |i: u8, answer| AggregatedWorker {
            address: Address::with_last_byte(i),
            answered_by: 2,
            answer,
        };
        let a = Aggregate {
            timestamp: 5,
            observers: vec![member(0)],
            workers: vec![
                w(1, ans(Position::Yes, 250_000, [90, 80, 70])),
                w(2, ans(Position::No, 1_000_000, [10, 20, 30])),
                w(3, ans(Position::Abstain, 0, [50, 50, 50])),
                w(4, None),
            ],
        };
        let t = a.tally_workers(&[rep, rep]);
        assert_eq!(t.len(), 4);
        let votes: Vec<_> = t.iter().map(|t| t.vote).collect();
        let v = |position, confidence| {
            Some(Vote {
                position,
                confidence,
            })
        };
        assert_eq!(
            votes,
            vec![
                v(Position::Yes, 0.25),
                v(Position::No, 1.0),
                v(Position::Abstain, 0.0),
                None
            ]
        );
        assert_eq!(t[1].reputation, rep);
        assert_eq!(t[2].reputation, Reputation::default());
        assert_eq!(t[3].scores, Dimensions::default());
        assert_eq!(t[0].address, Address::with_last_byte(1));
        // the tally accepts it
        let out = tally(MarketId::from(1u64), &t, TieRule::Yes).unwrap();
        assert!(out.resolution);
        assert!(!out.workers[3].responded);
    }

    fn position() -> impl Strategy<Value = Position> {
        prop_oneof![
            Just(Position::Yes),
            Just(Position::No),
            Just(Position::Abstain)
        ]
    }

    fn answer() -> impl Strategy<Value = Option<ObservedAnswer>> {
        prop_oneof![
            1 => Just(None),
            3 => (position(), 0u32..=1_000_000, prop::array::uniform3(0u8..=100))
                .prop_map(|(position, confidence_ppm, scores)| Some(ObservedAnswer {
                    position,
                    confidence_ppm,
                    scores,
                })),
        ]
    }

    /// A set of `m` observations (2f+1 ≤ m ≤ 3f+1) of which `liar[i]` marks the (at most
    /// f) lying ones.
    #[derive(Debug, Clone)]
    struct Scenario {
        f: usize,
        set: Vec<Observation>,
        liar: Vec<bool>,
    }

    fn scenario() -> impl Strategy<Value = Scenario> {
        (1usize..=3, 1usize..=4)
            .prop_flat_map(|(f, nw)| ((2 * f + 1)..=(3 * f + 1), 0..=f, Just((f, nw))))
            .prop_flat_map(|(m, liars, (f, nw))| {
                (
                    Just(f),
                    prop::collection::vec((any::<u32>(), prop::collection::vec(answer(), nw)), m),
                    // per worker, maybe make every honest observation answer with one position
                    prop::collection::vec(prop::option::of((position(), any::<bool>())), nw),
                    Just((0..m).map(|i| i < liars).collect::<Vec<_>>()).prop_shuffle(),
                )
            })
            .prop_map(|(f, rows, agree, liar)| {
                let set = rows
                    .iter()
                    .enumerate()
                    .map(|(i, (ts, answers))| {
                        let mut answers = answers.clone();
                        if !liar[i] {
                            for (a, agree) in answers.iter_mut().zip(&agree) {
                                match (a.as_mut(), agree) {
                                    (Some(a), Some((p, _))) => a.position = *p,
                                    (None, Some((p, true))) => {
                                        *a = ans(*p, 123, [1, 2, 3]);
                                    }
                                    _ => {}
                                }
                            }
                        }
                        obs(i, *ts, &answers)
                    })
                    .collect();
                Scenario { f, set, liar }
            })
    }

    fn range_of(values: impl Iterator<Item = u32>) -> Option<(u32, u32)> {
        values.fold(None, |r, v| match r {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn order_independent(
            (s, shuffled) in scenario()
                .prop_flat_map(|s| { let set = s.set.clone(); (Just(s), Just(set).prop_shuffle()) })
        ) {
            prop_assert_eq!(run(&s.set, s.f), run(&shuffled, s.f));
        }

        #[test]
        fn liars_stay_within_honest_bounds(s in scenario()) {
            // no condition on how many honest answers there are, nor on how they spread
            let a = run(&s.set, s.f).unwrap();
            let honest = || s.set.iter().zip(&s.liar).filter(|(_, l)| !**l).map(|(o, _)| o);
            let lying = || s.set.iter().zip(&s.liar).filter(|(_, l)| **l).map(|(o, _)| o);
            let (lo, hi) = range_of(honest().map(|o| o.timestamp)).unwrap();
            prop_assert!(lo <= a.timestamp && a.timestamp <= hi);
            let honest_count = honest().count();
            for (j, w) in a.workers.iter().enumerate() {
                let h: Vec<ObservedAnswer> =
                    honest().filter_map(|o| o.workers[j].answer).collect();
                let l = lying().filter(|o| o.workers[j].answer.is_some()).count();
                prop_assert_eq!(w.answered_by, h.len() + l);
                match w.answer {
                    // answered: an honest member saw an answer, and every field lies
                    // between what honest members saw
                    Some(x) => {
                        prop_assert!(!h.is_empty());
                        let (lo, hi) = range_of(h.iter().map(|a| u32::from(position_rank(a.position)))).unwrap();
                        let p = u32::from(position_rank(x.position));
                        prop_assert!(lo <= p && p <= hi, "position {:?} outside the honest ones", x.position);
                        let (lo, hi) = range_of(h.iter().map(|a| a.confidence_ppm)).unwrap();
                        prop_assert!(lo <= x.confidence_ppm && x.confidence_ppm <= hi);
                        for k in 0..3 {
                            let (lo, hi) = range_of(h.iter().map(|a| u32::from(a.scores[k]))).unwrap();
                            let v = u32::from(x.scores[k]);
                            prop_assert!(lo <= v && v <= hi, "score {} = {} not in [{}, {}]", k, v, lo, hi);
                        }
                    }
                    // not answered: an honest member in the set saw no answer, or the set
                    // holds fewer than 2f + 1 honest observations (liars withheld theirs)
                    None => prop_assert!(
                        h.len() < honest_count || honest_count < 2 * s.f + 1,
                        "every one of {} honest observations answered, yet not answered",
                        honest_count
                    ),
                }
            }
        }
    }
}
