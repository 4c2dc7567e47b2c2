//! The report a DON builds from a decided set's aggregate: the workflow's quorum over the
//! aggregated workers, the tally with the members' reputations, and the forwarder's
//! execution header. Every member runs this same pure function on the same aggregate,
//! so they sign the same bytes; the node and the DON simulator both call it.

use super::Aggregate;
use crate::MarketId;
use crate::report::{ExecutionHeader, ReportMetadata, build_raw_report};
use crate::{QuorumRule, Reputation, TallyError, TieRule, tally};
use alloy_primitives::{B256, Bytes};

/// What a report is built with, besides the aggregate.
#[derive(Debug, Clone)]
pub struct ReportSpec {
    /// The market id.
    pub market_id: MarketId,
    /// The execution (the forwarder's `workflowExecutionId`).
    pub execution_id: B256,
    /// The DON id, as on the forwarder.
    pub don_id: u32,
    /// The DON's configuration version.
    pub config_version: u32,
    /// The workflow's quorum over the registered workers.
    pub quorum: QuorumRule,
    /// The workflow's tie rule.
    pub tie: TieRule,
    /// The workers' reputations, in registration order.
    pub reputations: Vec<Reputation>,
    /// The forwarder metadata of the workflow.
    pub metadata: ReportMetadata,
}

/// Why an aggregate makes no report.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportRefused {
    /// Too few workers answered for the workflow's quorum.
    #[error(
        "the DON's aggregate has {answered} answered worker(s) of {total}: quorum {quorum} is not met"
    )]
    Quorum {
        /// Workers with an aggregated answer.
        answered: usize,
        /// Registered workers.
        total: usize,
        /// The workflow's rule.
        quorum: QuorumRule,
    },
    /// The tally refused the workers.
    #[error(transparent)]
    Tally(#[from] TallyError),
}

/// The raw report (execution header, metadata, tally body) of an aggregate.
pub fn build_report(spec: &ReportSpec, agg: &Aggregate) -> Result<Bytes, ReportRefused> {
    let total = agg.workers.len();
    let answered = agg.workers.iter().filter(|w| w.answer.is_some()).count();
    if !spec.quorum.is_met(answered, total) {
        return Err(ReportRefused::Quorum {
            answered,
            total,
            quorum: spec.quorum,
        });
    }
    let t = tally(
        spec.market_id,
        &agg.tally_workers(&spec.reputations),
        spec.tie,
    )?;
    let header = ExecutionHeader {
        version: 1,
        workflow_execution_id: spec.execution_id,
        timestamp: agg.timestamp,
        don_id: spec.don_id,
        don_config_version: spec.config_version,
    };
    Ok(build_raw_report(&header, &spec.metadata, &t.report()))
}
