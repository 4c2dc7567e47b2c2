//! What a request does to a market's round: the one decision table both backends
//! follow ([`decide`]), from the round's stage (if it has a round) and the chain's word.
//! The backends then make the writes the decision names.

use crate::Stage;

/// What recording a request decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestDecision {
    /// This exact log was seen before.
    DuplicateLog,
    /// A new round was created.
    New,
    /// The market's failed round was reopened for another attempt.
    Reopened,
    /// A done round (`finalized`, `skipped`) of a market the chain says is unresolved:
    /// a new attempt was started (the old one is kept in `round_attempts`).
    Renewed,
    /// A `confirmed` round of a market the chain says is unresolved (its transaction left
    /// the canonical chain): reopened at the submission stage, the same nonce re-sent.
    Resubmit,
    /// The market already has a round in progress or finished: nothing to do, unless
    /// the round is done (`confirmed`, `finalized`, `skipped`) and the chain says the
    /// market is unresolved (see [`crate::Finality::renew_round`]).
    AlreadyHandled(Stage),
}

impl RequestDecision {
    /// Whether a round should be (re)started.
    pub fn starts_round(self) -> bool {
        matches!(
            self,
            RequestDecision::New
                | RequestDecision::Reopened
                | RequestDecision::Renewed
                | RequestDecision::Resubmit
        )
    }
}

/// Why a confirmed round is reopened when a new request finds its market unresolved.
pub const RESUBMIT_REASON: &str = "a new request found the market unresolved on chain: our resolution left the canonical chain; re-sending it";

/// What a new request (a log not seen before, or a manual one) does to the market's
/// round: `existing` is the round's stage (`None`: the market has no round), and
/// `unresolved_on_chain` whether the caller read the chain and found the market
/// unresolved. No round: a [`RequestDecision::New`] one. A failed round: reopened. A
/// done round the chain says is unresolved: a `confirmed` one is re-sent
/// ([`RequestDecision::Resubmit`]), a `finalized` or `skipped` one gets a new attempt
/// ([`RequestDecision::Renewed`]). Anything else is already handled.
pub fn decide(existing: Option<Stage>, unresolved_on_chain: bool) -> RequestDecision {
    match existing {
        None => RequestDecision::New,
        Some(Stage::Failed) => RequestDecision::Reopened,
        Some(Stage::Confirmed) if unresolved_on_chain => RequestDecision::Resubmit,
        Some(s) if unresolved_on_chain && s.is_resolved() => RequestDecision::Renewed,
        Some(s) => RequestDecision::AlreadyHandled(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RequestDecision::*;

    /// Every row of the table: each stage (and no round), with and without the chain
    /// saying the market is unresolved.
    #[test]
    fn every_row_of_the_table() {
        let table = [
            (None, New, New),
            (
                Some(Stage::Requested),
                AlreadyHandled(Stage::Requested),
                AlreadyHandled(Stage::Requested),
            ),
            (
                Some(Stage::Discovered),
                AlreadyHandled(Stage::Discovered),
                AlreadyHandled(Stage::Discovered),
            ),
            (
                Some(Stage::Answered),
                AlreadyHandled(Stage::Answered),
                AlreadyHandled(Stage::Answered),
            ),
            (
                Some(Stage::Challenged),
                AlreadyHandled(Stage::Challenged),
                AlreadyHandled(Stage::Challenged),
            ),
            (
                Some(Stage::Evaluated),
                AlreadyHandled(Stage::Evaluated),
                AlreadyHandled(Stage::Evaluated),
            ),
            (
                Some(Stage::Submitted),
                AlreadyHandled(Stage::Submitted),
                AlreadyHandled(Stage::Submitted),
            ),
            (
                Some(Stage::Confirmed),
                AlreadyHandled(Stage::Confirmed),
                Resubmit,
            ),
            (
                Some(Stage::Finalized),
                AlreadyHandled(Stage::Finalized),
                Renewed,
            ),
            (Some(Stage::Failed), Reopened, Reopened),
            (
                Some(Stage::Skipped),
                AlreadyHandled(Stage::Skipped),
                Renewed,
            ),
        ];
        // the table names every stage once
        for s in Stage::ALL {
            assert_eq!(table.iter().filter(|r| r.0 == Some(s)).count(), 1, "{s:?}");
        }
        for (existing, judged_resolved, judged_unresolved) in table {
            assert_eq!(
                decide(existing, false),
                judged_resolved,
                "{existing:?}, chain not read"
            );
            assert_eq!(
                decide(existing, true),
                judged_unresolved,
                "{existing:?}, unresolved"
            );
        }
    }

    #[test]
    fn only_new_work_starts_a_round() {
        assert!(New.starts_round() && Reopened.starts_round());
        assert!(Renewed.starts_round() && Resubmit.starts_round());
        assert!(!DuplicateLog.starts_round());
        assert!(!AlreadyHandled(Stage::Requested).starts_round());
    }
}
