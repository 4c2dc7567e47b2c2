//! The stages a round has passed, as its caller persists them between stages: an enum
//! of the combinations there are (each stage is recorded only once complete, and only
//! after the one before it), stored in the flat JSON shape rounds have always stored.

use super::{ChallengeOutcome, Evaluation, RatifyResult, ResolveStage, RoundInput, Stage};
use serde::{Deserialize, Serialize};

/// The stages a round has passed (see [`super::Engine::run_resumable`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StoredProgress", into = "StoredProgress")]
pub enum RoundProgress {
    /// No stage yet.
    #[default]
    Fresh,
    /// The resolve stage met quorum.
    Answered {
        /// The resolve stage.
        resolve: ResolveStage,
    },
    /// The challenges are done.
    Challenged {
        /// The resolve stage.
        resolve: ResolveStage,
        /// Per worker (slot order): its defence, or `None` when it was not challenged.
        challenges: Vec<Option<ChallengeOutcome>>,
    },
    /// The evaluation is done (and, when the workflow asks for them, the ratifying votes).
    Evaluated {
        /// The resolve stage.
        resolve: ResolveStage,
        /// Per worker (slot order): its defence, or `None`.
        challenges: Vec<Option<ChallengeOutcome>>,
        /// The evaluation, with the order the evaluator saw the responders in (boxed:
        /// the other stages are small beside it).
        evaluation: Box<Evaluation>,
        /// The ratifying votes on the tallied outcome, once taken.
        ratification: Option<Vec<RatifyResult>>,
    },
}

impl RoundProgress {
    /// The resolve stage, if passed.
    pub fn resolve(&self) -> Option<&ResolveStage> {
        match self {
            Self::Fresh => None,
            Self::Answered { resolve }
            | Self::Challenged { resolve, .. }
            | Self::Evaluated { resolve, .. } => Some(resolve),
        }
    }

    /// The challenges, if passed.
    pub fn challenges(&self) -> Option<&[Option<ChallengeOutcome>]> {
        match self {
            Self::Challenged { challenges, .. } | Self::Evaluated { challenges, .. } => {
                Some(challenges)
            }
            _ => None,
        }
    }

    /// The evaluation, if passed.
    pub fn evaluation(&self) -> Option<&Evaluation> {
        match self {
            Self::Evaluated { evaluation, .. } => Some(evaluation),
            _ => None,
        }
    }

    /// The ratifying votes, if taken.
    pub fn ratification(&self) -> Option<&[RatifyResult]> {
        match self {
            Self::Evaluated {
                ratification: Some(r),
                ..
            } => Some(r),
            _ => None,
        }
    }

    /// Whether this progress belongs to a round over `input`'s workers (same addresses
    /// in the same order, and every recorded stage of that length).
    pub fn fits(&self, input: &RoundInput) -> bool {
        let n = input.workers.len();
        let same_workers = self.resolve().is_none_or(|r| {
            r.results
                .iter()
                .map(|r| r.address)
                .eq(input.workers.iter().map(|w| w.address))
        });
        same_workers && self.challenges().is_none_or(|c| c.len() == n)
    }

    /// The last stage this progress passed (`None`: not even the resolve stage).
    /// A ratification belongs to the evaluated stage.
    pub fn stage(&self) -> Option<Stage> {
        match self {
            Self::Fresh => None,
            Self::Answered { .. } => Some(Stage::Answered),
            Self::Challenged { .. } => Some(Stage::Challenged),
            Self::Evaluated { .. } => Some(Stage::Evaluated),
        }
    }
}

/// How a progress is stored: every stage optional, each skipped when absent (the shape
/// stored since the first release).
#[derive(Default, Serialize, Deserialize)]
struct StoredProgress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resolve: Option<ResolveStage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    challenges: Option<Vec<Option<ChallengeOutcome>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    evaluation: Option<Evaluation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ratification: Option<Vec<RatifyResult>>,
}

/// A stored progress with a stage recorded without the one before it.
#[derive(Debug, thiserror::Error)]
#[error("a round's stored progress records the {0} stage without the one before it")]
pub struct ProgressOutOfOrder(&'static str);

impl TryFrom<StoredProgress> for RoundProgress {
    type Error = ProgressOutOfOrder;

    fn try_from(s: StoredProgress) -> Result<Self, Self::Error> {
        Ok(
            match (s.resolve, s.challenges, s.evaluation, s.ratification) {
                (None, None, None, None) => Self::Fresh,
                (Some(resolve), None, None, None) => Self::Answered { resolve },
                (Some(resolve), Some(challenges), None, None) => Self::Challenged {
                    resolve,
                    challenges,
                },
                (Some(resolve), Some(challenges), Some(evaluation), ratification) => {
                    Self::Evaluated {
                        resolve,
                        challenges,
                        evaluation: Box::new(evaluation),
                        ratification,
                    }
                }
                (_, _, None, Some(_)) => return Err(ProgressOutOfOrder("ratification")),
                (_, None, Some(_), _) => return Err(ProgressOutOfOrder("evaluation")),
                (None, ..) => return Err(ProgressOutOfOrder("challenge")),
            },
        )
    }
}

impl From<RoundProgress> for StoredProgress {
    fn from(p: RoundProgress) -> Self {
        match p {
            RoundProgress::Fresh => Self::default(),
            RoundProgress::Answered { resolve } => Self {
                resolve: Some(resolve),
                ..Self::default()
            },
            RoundProgress::Challenged {
                resolve,
                challenges,
            } => Self {
                resolve: Some(resolve),
                challenges: Some(challenges),
                ..Self::default()
            },
            RoundProgress::Evaluated {
                resolve,
                challenges,
                evaluation,
                ratification,
            } => Self {
                resolve: Some(resolve),
                challenges: Some(challenges),
                evaluation: Some(*evaluation),
                ratification,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_shape_is_read_and_written_as_before() {
        let fresh: RoundProgress = serde_json::from_str("{}").unwrap();
        assert_eq!(fresh, RoundProgress::Fresh);
        assert_eq!(serde_json::to_string(&fresh).unwrap(), "{}");
    }

    #[test]
    fn a_stage_without_the_one_before_it_is_refused() {
        for (json, stage) in [
            (r#"{"challenges":[]}"#, "challenge"),
            (r#"{"ratification":[]}"#, "ratification"),
        ] {
            let e = serde_json::from_str::<RoundProgress>(json).unwrap_err();
            assert!(e.to_string().contains(stage), "{json}: {e}");
        }
    }
}
