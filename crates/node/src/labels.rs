//! The metrics' label values of the store's stages: a round's state, how its drive
//! ended and why it stopped, as the metrics' enums (spelled as the store spells them).

use cresolver_metrics::{RoundOutcome, RoundState, StopReason};
use cresolver_store::Stage;

/// The `state` (or `stage`) label of a round at `stage`.
pub(crate) fn round_state(stage: Stage) -> RoundState {
    match stage {
        Stage::Requested => RoundState::Requested,
        Stage::Discovered => RoundState::Discovered,
        Stage::Answered => RoundState::Answered,
        Stage::Challenged => RoundState::Challenged,
        Stage::Evaluated => RoundState::Evaluated,
        Stage::Submitted => RoundState::Submitted,
        Stage::Confirmed => RoundState::Confirmed,
        Stage::Finalized => RoundState::Finalized,
        Stage::Failed => RoundState::Failed,
        Stage::Skipped => RoundState::Skipped,
    }
}

/// The `outcome` label of a round whose drive ended at `stage`: `None` unless the stage
/// is final.
pub(crate) fn round_outcome(stage: Stage) -> Option<RoundOutcome> {
    match stage {
        Stage::Confirmed => Some(RoundOutcome::Confirmed),
        Stage::Finalized => Some(RoundOutcome::Finalized),
        Stage::Failed => Some(RoundOutcome::Failed),
        Stage::Skipped => Some(RoundOutcome::Skipped),
        _ => None,
    }
}

/// The `reason` label of a round that ended at `stage` short of confirmed: `None`
/// unless it failed or was skipped.
pub(crate) fn stop_reason(stage: Stage) -> Option<StopReason> {
    match stage {
        Stage::Failed => Some(StopReason::Failed),
        Stage::Skipped => Some(StopReason::Skipped),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_spelled_as_the_store_spells_its_stages() {
        for s in Stage::ALL {
            assert_eq!(round_state(s).as_str(), s.as_str());
            assert_eq!(round_outcome(s).is_some(), s.is_final(), "{s:?}");
            if let Some(o) = round_outcome(s) {
                assert_eq!(o.as_str(), s.as_str());
            }
            assert_eq!(
                stop_reason(s).is_some(),
                matches!(s, Stage::Failed | Stage::Skipped),
                "{s:?}"
            );
            if let Some(r) = stop_reason(s) {
                assert_eq!(r.as_str(), s.as_str());
            }
        }
        assert_eq!(RoundState::ALL.len(), Stage::ALL.len());
    }
}
