//! Resolve: the pure arithmetic of a round — quorum, the 8→3 score reduction, the
//! weighted vote, reward weights and the report bytes. No I/O lives here.

pub mod jsmath;
pub mod quorum;
pub mod report;
pub mod tally;

pub use quorum::QuorumRule;
pub use report::{ReportError, decode_report, encode_report};
pub use tally::{Dimensions, Reputation, TallyError, TallyOutcome, TallyWorker, TieRule, tally};
