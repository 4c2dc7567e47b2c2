//! A worker call's metric labels: the stage and how it ended (`ok`, or the failure's
//! kind), as the metrics' enums.

use cresolver_metrics::WorkerCallOutcome;
use cresolver_workers::WorkerFailure;

/// The `outcome` label of a call that ended in `failure`: the value of
/// [`WorkerFailure::kind`] (a retried call is labelled by its last failure).
pub(super) fn failure_outcome(failure: &WorkerFailure) -> WorkerCallOutcome {
    match failure {
        WorkerFailure::Timeout { .. } => WorkerCallOutcome::Timeout,
        WorkerFailure::Connect { .. } => WorkerCallOutcome::Connect,
        WorkerFailure::Refused { .. } => WorkerCallOutcome::Refused,
        WorkerFailure::HttpStatus { .. } => WorkerCallOutcome::HttpStatus,
        WorkerFailure::InvalidJson { .. } => WorkerCallOutcome::InvalidJson,
        WorkerFailure::Schema { .. } => WorkerCallOutcome::Schema,
        WorkerFailure::Oversize { .. } => WorkerCallOutcome::Oversize,
        WorkerFailure::Request { .. } => WorkerCallOutcome::Request,
        WorkerFailure::CutAfterQuorum => WorkerCallOutcome::CutAfterQuorum,
        WorkerFailure::NotDiscovered { .. } => WorkerCallOutcome::NotDiscovered,
        WorkerFailure::Rejected { .. } => WorkerCallOutcome::Rejected,
        WorkerFailure::Envelope { .. } => WorkerCallOutcome::Envelope,
        WorkerFailure::Retried { last, .. } => failure_outcome(last),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The label is the failure's `kind()`, for every failure: the exported values stay
    /// those of the workers' vocabulary.
    #[test]
    fn every_failure_is_labelled_by_its_kind() {
        let d = || "d".to_string();
        let failures = [
            WorkerFailure::Timeout { after_ms: 1 },
            WorkerFailure::Connect { detail: d() },
            WorkerFailure::Refused { detail: d() },
            WorkerFailure::HttpStatus {
                status: 500,
                excerpt: d(),
            },
            WorkerFailure::InvalidJson { detail: d() },
            WorkerFailure::Schema { detail: d() },
            WorkerFailure::Oversize { limit: 1 },
            WorkerFailure::Request { detail: d() },
            WorkerFailure::CutAfterQuorum,
            WorkerFailure::NotDiscovered { reason: d() },
            WorkerFailure::Rejected {
                code: d(),
                detail: d(),
            },
            WorkerFailure::Envelope { detail: d() },
        ];
        for f in &failures {
            assert_eq!(failure_outcome(f).as_str(), f.kind(), "{f:?}");
        }
        // every failure outcome is reached (all but `ok`)
        let reached: std::collections::HashSet<_> = failures.iter().map(failure_outcome).collect();
        assert_eq!(reached.len(), WorkerCallOutcome::ALL.len() - 1);
        assert!(!reached.contains(&WorkerCallOutcome::Ok));
        let retried = WorkerFailure::Retried {
            attempts: vec![d()],
            last: Box::new(WorkerFailure::Schema { detail: d() }),
        };
        assert_eq!(failure_outcome(&retried), WorkerCallOutcome::Schema);
        assert_eq!(retried.kind(), "schema");
    }
}
