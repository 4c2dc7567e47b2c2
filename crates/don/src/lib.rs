//! cresolver-don: makes a set of independent cresolver nodes a DON that tolerates f
//! Byzantine members out of n >= 3f+1. Each member observes a round itself (the pipeline
//! does that), signs its observation and sends it to the other members. For each execution
//! the members then run one instance of Tendermint consensus, using Malachite's state
//! machine (`informalsystems-malachitebft-core-driver`, no I/O): the leader of a round
//! proposes a set of at least 2f+1 signed observations, members prevote and precommit, and
//! 2f+1 precommits decide the set. Only then does a member recompute the report from the
//! decided set with the pure aggregate and tally of `cresolver-core` and sign the
//! forwarder's digest; f+1 such signatures are an agreement, which the pipeline transmits
//! through the KeystoneForwarder. Any two quorums of 2f+1 share an honest member, so at
//! most one set is ever decided per execution and honest members sign one report.
//!
//! - [`config`]: the `[don]` section and its start-up checks.
//! - [`wire`]: the signed messages between members and their bounds.
//! - [`context`]: the DON's types for the Tendermint state machine.
//! - [`decided`]: the executions decided lately, for the operator.
//! - [`consensus`]: one execution's consensus as a pure state machine (no I/O, no
//!   clock): inputs in, effects out.
//! - [`host`]: the async host that performs a core's effects.
//! - [`journal`]: the group commit of the state file.
//! - [`book`]: the bounded inboxes messages wait in.
//! - [`persist`]: what a member must remember across a restart (its observation, its
//!   consensus log, the one report it signed, the agreement).
//! - [`job`]: what the node hands a member for one execution, and gets back.
//! - [`member`]: the member itself and the node's entry points (on a `shared` state its
//!   parts use).
//! - [`server`]: the HTTP endpoint the other members send to.

pub mod agreed;
pub mod book;
pub mod config;
pub mod consensus;
pub mod context;
pub mod decided;
pub mod host;
pub mod job;
pub mod journal;
pub mod member;
pub mod persist;
pub mod server;
mod shared;
pub mod wire;

pub use config::{DonConfig, DonConfigError, MemberConfig};
pub use member::{
    AgreeError, Agreed, BuildError, DecidedExecution, Don, InstanceStatus, Job, ReportRefusal,
};
