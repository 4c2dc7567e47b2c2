//! What the node hands a member for one execution ([`Job`]), what it gets back when there
//! is no agreement ([`AgreeError`]), and what the operator sees of an execution in
//! consensus ([`InstanceStatus`]).

use crate::persist::PersistError;
use crate::wire::WireError;
use alloy::primitives::{Address, B256, Bytes, U256};
use cresolver_core::don::{Aggregate, Observation};
use serde::Serialize;
use std::sync::Arc;

/// Why an aggregate makes no report, as the node's report builder says it (a quorum
/// not met, a tally that fails).
pub type ReportRefusal = Box<dyn std::error::Error + Send + Sync>;

/// Builds the raw report of an aggregate (tally, report body, forwarder header), or says
/// why the aggregate makes no report.
pub type BuildReport = Arc<dyn Fn(&Aggregate) -> Result<Bytes, ReportRefusal> + Send + Sync>;

/// Why a set of observations makes no report on this member.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The observations do not aggregate (too few, or not of this execution).
    #[error(transparent)]
    Aggregate(#[from] cresolver_core::don::AggregateError),
    /// The node's report builder refused the aggregate.
    #[error("{0}")]
    Refused(ReportRefusal),
}

/// One execution this member observed and wants agreed.
#[derive(Clone)]
pub struct Job {
    /// The execution id (the forwarder's `workflowExecutionId`).
    pub execution_id: B256,
    /// The market contract.
    pub market: Address,
    /// The market id.
    pub market_id: U256,
    /// This member's observation (used when none is stored for the execution yet).
    pub observation: Observation,
    /// The market's registered workers, in registration order.
    pub workers: Vec<Address>,
    /// Builds the report of an aggregate.
    pub build: BuildReport,
}

/// Why an agreement did not end with a report.
#[derive(Debug, thiserror::Error)]
pub enum AgreeError {
    /// No set was decided in the rounds this call ran.
    #[error(
        "no decision after {rounds} consensus rounds (fewer than 2f+1 members reachable or observing); the round is retried and the consensus resumes where it stopped"
    )]
    Stalled {
        /// The rounds run.
        rounds: u32,
    },
    /// The node is shutting down; the consensus state is persisted.
    #[error("the node is shutting down; the agreement resumes on restart")]
    ShuttingDown,
    /// This member's state file holds its signature of another report for the
    /// execution (a state file older than the consensus protocol).
    #[error(
        "the decided set makes no report on this member: this member's state file holds a signature of another report for this execution"
    )]
    SignedAnother,
    /// The state file.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// Signing.
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// What the operator sees of one execution's consensus.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InstanceStatus {
    /// The execution.
    pub execution_id: B256,
    /// The current round (epoch) and its leader.
    pub round: u32,
    /// The leader of the current round.
    pub leader: Address,
    /// `propose`, `prevote`, `precommit` or `commit`.
    pub step: &'static str,
    /// The round and set id this member is locked on, if any.
    pub locked: Option<(u32, B256)>,
    /// The decided round and set id, with the precommits' signers.
    pub decided: Option<(u32, B256, Vec<Address>)>,
    /// Leader changes so far.
    pub leader_changes: u32,
}
