//! What every execution's core of one member shares: the DON's configuration
//! ([`Params`]: members, f, timeouts, report context) and, in mutation tests only, the
//! rule the member breaks on purpose ([`Mutation`]).

use alloy::primitives::{Address, B256, Bytes};
use malachitebft_core_driver::ThresholdParams;
use std::time::Duration;

/// A rule the simulator's mutation tests break on purpose, to show it finds the
/// violation (compiled in only with the `mutations` feature; never in a node).
#[cfg(feature = "mutations")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Prevote a valid proposal even when locked on another set.
    SkipLockCheck,
    /// Count f votes (not 2f+1) as a quorum, in the driver and in certificates.
    FVotesQuorum,
    /// Sign the report of a valid proposal's set before it is decided.
    SignBeforeDecision,
    /// Take a proposal from a member that is not the round's leader.
    AcceptNonLeaderProposal,
    /// Count a certificate's precommits without checking that the signers differ.
    DuplicateSigners,
    /// Send votes and proposals without syncing the log first (a power cut forgets them).
    NoSyncBeforeVote,
}

/// What every execution's core of one member shares: the DON's configuration.
#[derive(Debug, Clone)]
pub struct Params {
    /// The DON id, as on the forwarder.
    pub don_id: u32,
    /// The configuration version, as on the forwarder.
    pub config_version: u32,
    /// The faults tolerated.
    pub f: usize,
    /// Every member, in configuration order.
    pub members: Vec<Address>,
    /// The report context every member signs with.
    pub context: Bytes,
    /// The base of the consensus timeouts.
    pub attempt_timeout_ms: u64,
    /// How long a leader holding 2f+1 observations waits for the others.
    pub observation_grace_ms: u64,
    /// Rounds after which the instance gives up (the node retries it later).
    pub max_attempts: u32,
    /// The rule this member breaks (mutation tests only).
    #[cfg(feature = "mutations")]
    pub mutation: Option<Mutation>,
}

impl Params {
    /// Votes that decide: more than two thirds of the members (2f+1 when n = 3f+1).
    pub fn quorum(&self) -> usize {
        #[cfg(feature = "mutations")]
        if self.mutation == Some(Mutation::FVotesQuorum) {
            return self.f.max(1);
        }
        crate::wire::quorum_of(self.members.len())
    }

    /// The leader of `round` of an execution.
    pub fn leader(&self, exec: &B256, round: u32) -> Address {
        crate::config::leader_of(&self.members, exec, round)
    }

    /// The forwarder digest of a raw report with this DON's context.
    pub fn digest(&self, report: &[u8]) -> B256 {
        cresolver_core::don::forwarder_digest(report, &self.context)
    }

    /// How long the host waits between resends of what other members may have missed.
    pub fn rebroadcast_every(&self) -> Duration {
        Duration::from_millis((self.attempt_timeout_ms / 4).clamp(100, 2_000))
    }

    pub(super) fn thresholds(&self) -> ThresholdParams {
        #[cfg(feature = "mutations")]
        if self.mutation == Some(Mutation::FVotesQuorum) {
            let (f, n) = (self.f.max(1) as u64, self.members.len() as u64);
            return ThresholdParams {
                quorum: malachitebft_core_types::ThresholdParam::new(f - 1, n),
                honest: malachitebft_core_types::ThresholdParam::F_PLUS_ONE,
            };
        }
        ThresholdParams::default()
    }

    /// Whether this member breaks `m` (mutation tests only).
    #[cfg(feature = "mutations")]
    pub fn mutated(&self, m: Mutation) -> bool {
        self.mutation == Some(m)
    }
}
