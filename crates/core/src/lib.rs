//! cresolver-core: the pure arithmetic of a round — quorum, the 8→3 score reduction,
//! the weighted vote, reward weights and the report bytes — and the untrusted-text
//! rules that every stage applies to text a stranger wrote. No I/O lives here: this
//! crate depends on no provider, runtime, HTTP client or database.

pub mod don;
pub mod jsmath;
pub mod position;
pub mod quorum;
pub mod report;
pub mod request;
pub mod round_key;
pub mod schema;
pub mod tally;
pub mod untrusted;

pub use position::Position;
pub use quorum::QuorumRule;
pub use report::{ReportError, decode_report, encode_report};
pub use request::LogRef;
pub use round_key::{MarketId, MarketIdTooLarge, RoundKey};
pub use tally::{Dimensions, Reputation, TallyError, TallyOutcome, TallyWorker, TieRule, tally};
