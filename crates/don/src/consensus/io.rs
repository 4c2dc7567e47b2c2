//! What goes in and out of the core: the [`Input`]s the host gives it, the [`Effect`]s it
//! asks for, the [`Timer`]s it schedules, and what it [`Held`] for a peer.

use super::{LogEntry, StepKind};
use crate::agreed::Agreed;
use crate::persist::Lock;
use crate::wire::{Body, Envelope};
use alloy::primitives::{Address, B256, Bytes};
use cresolver_metrics::DonEvent;
use std::time::Duration;

/// A timer the core asks the host for ([`Effect::Schedule`]) and is given back
/// ([`Input::Timeout`]) when it is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// A Tendermint timeout of a round and step.
    Step {
        /// The round.
        round: u32,
        /// Propose, prevote or precommit.
        kind: StepKind,
    },
    /// Send again what other members may have missed.
    Rebroadcast,
    /// The leader's wait for the last observations is over.
    Grace,
}

/// What the host gives the core.
#[derive(Debug, Clone)]
pub enum Input {
    /// The first input: the execution's consensus log as persisted and the report this
    /// member signed for it, if any.
    Start {
        /// The consensus log, in order.
        log: Vec<LogEntry>,
        /// The report signed before (never replaced).
        lock: Option<Lock>,
    },
    /// A member's message of this execution, its envelope signature checked.
    Message(Envelope),
    /// A timer the core asked for is due.
    Timeout(Timer),
}

/// What the core asks the host to do, in order. `Append` and `Lock` are committed in
/// order; when the batch [`must_sync`] they are committed and synced to disk before any
/// `Send` returned with them is performed. Otherwise the host may send first: a crash
/// may then lose them, as a power cut loses every write since the last sync, and no vote
/// or proposal rests on them.
#[derive(Debug, Clone)]
pub enum Effect {
    /// Append these inputs to the execution's consensus log.
    Append(Vec<LogEntry>),
    /// Store the report this member signs (insert once: never replaced).
    Lock(Lock),
    /// Send a message to one member, or to every other member (`to: None`).
    Send {
        /// The recipient, or `None` for all the others.
        to: Option<Address>,
        /// The message.
        env: Envelope,
    },
    /// Give [`Input::Timeout`] back at this reading of the member's clock.
    Schedule {
        /// When.
        at: Duration,
        /// Which.
        timer: Timer,
    },
    /// This member proposed a set as its round's leader (only when the job listens:
    /// [`crate::job::Job::on_decided`]). Nothing is signed: the report is what the
    /// leader, the first transmitter, will transmit if the set is decided.
    Proposed {
        /// The round.
        round: u32,
        /// The proposed set's report.
        report: Bytes,
    },
    /// A set is decided (its report built and about to be signed).
    Decided {
        /// The deciding round.
        round: u32,
        /// The set's id.
        set: B256,
    },
    /// f+1 report signatures over the decided report: the instance is done.
    Agreed(Box<Agreed>),
    /// No decision within the rounds allowed: the instance stops (its log is kept).
    Stalled {
        /// The rounds run.
        rounds: u32,
    },
    /// This member's state file holds its signature of another report for this
    /// execution (a state file older than the consensus protocol): the instance stops.
    SignedAnother,
    /// A metric event (`don_event`).
    Event(DonEvent),
}

/// What one member holds for one peer (see [`Core::held_for`]); the simulator checks it
/// against the bounds after every step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The peer's observations held: at most 1.
    pub observations: usize,
    /// The peer's votes held from beyond the round window: at most 1.
    pub ahead_votes: usize,
    /// The peer's report signatures held before the decision.
    pub early_signatures: usize,
    /// Report signatures held before the decision, from every peer: at most 2n.
    pub early_signatures_total: usize,
    /// The peer's (round, kind) votes remembered: at most 2 per round reached, plus the
    /// window ahead.
    pub votes_seen: usize,
    /// The peer's prevotes taken from `Polka` messages and kept aside (they conflict with
    /// its prevote held in their round): at most [`super::RELAYED_POLKAS`].
    pub relayed_prevotes: usize,
    /// Consensus log entries of the execution: at most [`crate::persist::MAX_LOG_ENTRIES`].
    pub log_entries: usize,
}

/// Whether a batch's writes must be synced to disk before its sends: when it sends a
/// proposal or a vote, which this member must never sign twice differently for one round
/// (a restarted member replays its log to the state that sent them).
///
/// Nothing else needs the sync. A report signature rests on a decision, and a decision on
/// 2f+1 precommits that the `Decided` message carries: no other set can be decided, and
/// the report is a function of the set, so a member that loses its lock to a power cut
/// signs the same report again (RFC 6979: the same bytes). Its own observation, an
/// observation sent to a new leader, a relayed polka and an input that sent nothing are
/// made again, or sent again, as honestly. Committed writes survive a crash of the
/// process at once, and a power cut from the next synced commit on.
pub fn must_sync(batch: &[Effect]) -> bool {
    batch.iter().any(|e| {
        matches!(
            e,
            Effect::Send { env, .. }
                if matches!(env.body, Body::Proposal { .. } | Body::Vote { .. })
        )
    })
}
