//! What the node hands a member for one execution ([`Job`]), what it gets back when there
//! is no agreement ([`AgreeError`]), and what the operator sees of an execution in
//! consensus ([`InstanceStatus`]).

use crate::persist::PersistError;
use crate::wire::WireError;
use alloy::primitives::{Address, B256, Bytes};
use cresolver_core::RoundKey;
use cresolver_core::don::{Aggregate, Observation};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why an aggregate makes no report, as the node's report builder says it (a quorum
/// not met, a tally that fails).
pub type ReportRefusal = Box<dyn std::error::Error + Send + Sync>;

/// Builds the raw report of an aggregate (tally, report body, forwarder header), or says
/// why the aggregate makes no report.
pub type BuildReport = Arc<dyn Fn(&Aggregate) -> Result<Bytes, ReportRefusal> + Send + Sync>;

/// Told of a report this member may transmit, with the leader of its round (who
/// transmits first): when this member proposes a set as its round's leader (the set's
/// report: nothing is signed, and the set may still not be decided), and when it
/// decides a set (the decided report), never when a restart replays either. Work that
/// needs only the report can start while the consensus and the report signatures run
/// (the transmitter's gas estimate of the receiver's call). It must not block.
pub type OnDecided = Arc<dyn Fn(&Bytes, Address) + Send + Sync>;

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
    /// The round: the market contract and the market id.
    pub round: RoundKey,
    /// This member's observation (used when none is stored for the execution yet).
    pub observation: Observation,
    /// The market's registered workers, in registration order.
    pub workers: Vec<Address>,
    /// Builds the report of an aggregate.
    pub build: BuildReport,
    /// Told of the proposed and the decided report ([`OnDecided`]); `None`: nobody to
    /// tell.
    pub on_decided: Option<OnDecided>,
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
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct InstanceStatus {
    /// The execution.
    #[schema(value_type = String, pattern = "^0x[0-9a-f]{64}$")]
    pub execution_id: B256,
    /// The current round (epoch) and its leader.
    pub round: u32,
    /// The leader of the current round.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub leader: Address,
    /// `propose`, `prevote`, `precommit` or `commit`.
    #[schema(value_type = String, pattern = "^(propose|prevote|precommit|commit)$")]
    pub step: &'static str,
    /// The round and set id this member is locked on, if any.
    #[schema(required = true, schema_with = locked_schema)]
    pub locked: Option<(u32, B256)>,
    /// The decided round and set id, with the precommits' signers.
    #[schema(required = true, schema_with = decided_schema)]
    pub decided: Option<(u32, B256, Vec<Address>)>,
    /// Leader changes so far.
    pub leader_changes: u32,
}

/// `[round, set id]` or `null` (the schema of [`InstanceStatus::locked`]).
fn locked_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    tuple_schema(
        vec![round_schema(), hex_schema("^0x[0-9a-f]{64}$")],
        "[round, set id] this member is locked on, or null",
    )
}

/// `[round, set id, [precommit signers]]` or `null` (the schema of
/// [`InstanceStatus::decided`]).
fn decided_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ArrayBuilder, Schema};
    let signers = ArrayBuilder::new()
        .items(utoipa::openapi::RefOr::T(hex_schema("^0x[0-9a-fA-F]{40}$")))
        .build();
    tuple_schema(
        vec![
            round_schema(),
            hex_schema("^0x[0-9a-f]{64}$"),
            Schema::Array(signers),
        ],
        "[round, set id, precommit signers] of the decision, or null",
    )
}

fn round_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0))
            .build(),
    )
}

fn hex_schema(pattern: &str) -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(pattern))
            .build(),
    )
}

/// A fixed-length JSON array of `items`, or `null`.
fn tuple_schema(
    items: Vec<utoipa::openapi::schema::Schema>,
    what: &str,
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ArrayBuilder, ArrayItems, Schema, SchemaType, Type};
    let n = items.len();
    utoipa::openapi::RefOr::T(Schema::Array(
        ArrayBuilder::new()
            .schema_type(SchemaType::Array(vec![Type::Array, Type::Null]))
            .prefix_items(items)
            .items(ArrayItems::False)
            .min_items(Some(n))
            .max_items(Some(n))
            .description(Some(what))
            .build(),
    ))
}

/// Executions whose phases a member keeps (the newest).
pub const PHASES_KEPT: usize = 1_024;

/// When each phase of one execution was first reached, for the bench's breakdown.
#[derive(Debug, Clone, Copy)]
pub struct Phases {
    /// When the consensus started (the member's own round had ended).
    pub began: Instant,
    /// When the agreement was reached.
    pub agreed: Instant,
    /// From the start of consensus to the first prevote step.
    pub to_prevote: Duration,
    /// From the prevote step to the precommit step.
    pub prevote: Duration,
    /// From the precommit step to the decision.
    pub precommit: Duration,
    /// From the decision to f+1 report signatures.
    pub signatures: Duration,
}
