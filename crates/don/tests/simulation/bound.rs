//! The liveness bound. After GST (every honest member up, no message lost, every delay
//! at most Δ), with R the highest round an honest member is in at GST, every honest
//! member decides
//!
//! - by round R + f + 6 ([`rounds`]), and
//! - within [`time_bound`] of GST: the three timeouts of every round from R to
//!   R + f + 6, plus two rebroadcast periods, the leader's observation grace and 10 Δ.
//!
//! Why: the timeouts of round r are `propose(r) = T(1 + r/2)` and
//! `prevote(r) = precommit(r) = ⌈T/2⌉(1 + r/2)` (T = `attempt_timeout_ms`, each capped at
//! 60 s; `timeout_after` in `consensus/mod.rs`), and the simulator draws Δ ≤ T/4. Leaders
//! rotate through the members in configuration order, so among any f+1 consecutive
//! rounds one has an honest leader. After GST the honest members catch up on the highest
//! round within a rebroadcast period plus Δ (f+1 votes of a later round move a member to
//! it; every member sends its current votes again each rebroadcast period, T/4 clamped
//! to 0.1–2 s), and a round with an honest leader, entered by every honest member within
//! less than its propose timeout of each other, decides: the round R may have begun
//! before GST, up to f rounds after it may have Byzantine leaders, and one more may be
//! lost to the members' skew in entering it: about R + f + 2. The simulator measured up
//! to R + f + 4 (below); the bound keeps 2 rounds of margin over that.
//!
//! Measured (70,000 seeds of the default draw, and 12,000 with every Byzantine member a
//! lock breaker), before polka certificates: at most f + 4 rounds past R, and at most
//! 30 % of [`time_bound`] (about 9.5 s after GST), except where honest members stayed
//! locked on a polka the others could not see (it counted a vote of an equivocating
//! member that they held in its other form): seeds 15722, 37148, 52382, 67142, 69547
//! decided 8 to 13 rounds past R, seeds 24022, 30291, 31301, 50719, 57176 not at all.
//! With polka certificates (`consensus/polka.rs`, the relay of such a polka): seeds 0 to
//! 70,000 of the default draw, and 10,000 each with every Byzantine member an
//! equivocating voter, a forger or a lock breaker, all decide within the bound: at most
//! f + 1 rounds past R and 13 % of [`time_bound`] (7.8 s after GST).

use crate::check::Violation;
use crate::scenario::Scenario;
use crate::sim::Outcome;

/// Rounds past the highest honest round at GST within which every honest member decides
/// is `f + ROUNDS_OVER_F`.
pub const ROUNDS_OVER_F: u32 = 6;

/// The rounds bound of a run.
pub fn rounds(sc: &Scenario) -> u32 {
    sc.f as u32 + ROUNDS_OVER_F
}

/// Round r's three timeouts, as the core computes them (`timeout_after`).
fn round_timeouts(attempt_ms: u64, r: u32) -> u64 {
    let step = |unit: u64| (unit + unit * u64::from(r) / 2).min(60_000);
    (step(attempt_ms) + 2 * step(attempt_ms.div_ceil(2))) * 1_000
}

/// The time after GST within which every honest member decides, in microseconds: the
/// timeouts of every round from the highest at GST to the rounds bound, two rebroadcast
/// periods, the leader's grace and ten network delays.
pub fn time_bound(sc: &Scenario, round_at_gst: u32) -> u64 {
    let p = &sc.params;
    let timeouts: u64 = (round_at_gst..=round_at_gst + rounds(sc))
        .map(|r| round_timeouts(p.attempt_timeout_ms, r))
        .sum();
    let rebroadcast = p.rebroadcast_every().as_micros() as u64;
    timeouts + 2 * rebroadcast + p.observation_grace_ms * 1_000 + 10 * sc.net.delta
}

/// Checks a run's decisions against the bound.
pub fn check(sc: &Scenario, out: &Outcome) -> Result<(), Violation> {
    let rounds = rounds(sc);
    if out.rounds_after_gst > rounds {
        return Err(Violation(format!(
            "liveness: an honest member decided {} rounds past the highest round at GST ({}), bound {rounds}",
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
