//! A node as a DON member (`[don]`): the membership checked from the node's config, and
//! the pure parts of its rounds — the member's observation of its own round's outcome
//! (or of its missed quorum) and the transcript's record of an agreement. The round's
//! `agree` and `transmit` steps are in `round::don`.

use crate::Pipeline;
use alloy::primitives::{Address, B256};
use alloy::signers::local::PrivateKeySigner;
use cresolver_metrics::Metrics;
use cresolver_pipeline::config::NodeConfig;
use cresolver_pipeline::transcript::{DonMemberRecord, DonRecord};
use cresolver_store::MarketId;
use std::sync::Arc;

use cresolver_core::don::{Observation, ObservedAnswer, Position, WorkerObservation};
use cresolver_don::{Agreed, Don};
use cresolver_submit::SubmitMode;

/// Why a node cannot be the DON member its config names.
#[derive(Debug, thiserror::Error)]
pub enum DonSetupError {
    /// The node has no signing key.
    #[error(
        "a DON member signs with its own key: set [signer] (the env var, a key file or a keystore)"
    )]
    NoSigner,
    /// `[don]` is inconsistent, or does not list this node's key.
    #[error(transparent)]
    Config(#[from] cresolver_don::DonConfigError),
    /// The node runs on a shared (PostgreSQL) store.
    #[error(
        "a DON member keeps its own state: leave store.url empty (the embedded SQLite file); a PostgreSQL cluster cannot be one member"
    )]
    SharedStore,
    /// A workflow submits directly instead of through the forwarder.
    #[error(
        "workflow {0:?} submits directly: a DON delivers through the KeystoneForwarder; set [submit] mode = \"report\" in the workflow and submit.forwarder / submit.receiver in the node config"
    )]
    DirectSubmission(String),
    /// The data dir cannot be created.
    #[error("cannot create {path}: {error}")]
    DataDir {
        /// The data dir.
        path: std::path::PathBuf,
        /// The operating system's refusal.
        error: std::io::Error,
    },
    /// The member's consensus log cannot be opened.
    #[error("{path}: {error}")]
    Log {
        /// The log's file.
        path: std::path::PathBuf,
        /// What opening it met.
        error: cresolver_don::persist::PersistError,
    },
}

/// The checks of [`member`] that open nothing: a key that is a member of a consistent
/// `[don]`, report mode everywhere, and the embedded store. Returns the `[don]` section
/// (`None`: the node is no DON member).
pub(super) fn check<'a>(
    cfg: &'a NodeConfig,
    me: Option<Address>,
    pipelines: &[Pipeline],
    shared_store: bool,
) -> Result<Option<&'a cresolver_don::DonConfig>, DonSetupError> {
    let Some(dc) = &cfg.don else {
        return Ok(None);
    };
    let me = me.ok_or(DonSetupError::NoSigner)?;
    dc.validate(me)?;
    if shared_store {
        return Err(DonSetupError::SharedStore);
    }
    if let Some(p) = pipelines
        .iter()
        .find(|p| p.submitter.mode() != SubmitMode::Report)
    {
        return Err(DonSetupError::DirectSubmission(p.workflow.name.clone()));
    }
    Ok(Some(dc))
}

/// The DON member of a node config, checked: a key that is a member, report mode
/// everywhere, and the embedded store.
pub(super) fn member(
    cfg: &NodeConfig,
    signer: Option<PrivateKeySigner>,
    pipelines: &[Pipeline],
    shared_store: bool,
    metrics: Arc<Metrics>,
) -> Result<Option<Arc<Don>>, DonSetupError> {
    let Some(dc) = check(
        cfg,
        signer.as_ref().map(|s| s.address()),
        pipelines,
        shared_store,
    )?
    else {
        return Ok(None);
    };
    let signer = signer.ok_or(DonSetupError::NoSigner)?;
    std::fs::create_dir_all(&cfg.node.data_dir).map_err(|error| DonSetupError::DataDir {
        path: cfg.node.data_dir.clone(),
        error,
    })?;
    let path = cfg.node.data_dir.join("don.sqlite");
    let persist = cresolver_don::persist::Persist::open(&path)
        .map_err(|error| DonSetupError::Log { path, error })?;
    let don = Don::new(dc.clone(), signer, persist, metrics)?;
    tracing::info!(member = %don.address(), members = dc.members.len(), f = dc.f, don_id = dc.don_id, config_version = dc.config_version, "this node is a DON member");
    Ok(Some(Arc::new(don)))
}

/// This member's observation of a round from its outcome: every registered worker in
/// registration order, its answer reduced to position, confidence and the three scores.
pub(crate) fn observe(
    outcome: &cresolver_pipeline::round::RoundOutcome,
    binding: (u32, u32, B256, Address, MarketId),
    observer: Address,
) -> Observation {
    let workers = outcome
        .tally
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let result = outcome.resolve.results.get(i);
            let answer = w.responded.then(|| ObservedAnswer {
                position: match w.determination {
                    Some(true) => Position::Yes,
                    Some(false) => Position::No,
                    None => Position::Abstain,
                },
                confidence_ppm: result
                    .and_then(|r| r.answer())
                    .map(|a| (a.confidence.clamp(0.0, 1.0) * 1e6).round() as u32)
                    .unwrap_or(0),
                scores: [
                    w.scores.res_quality,
                    w.scores.src_quality,
                    w.scores.analysis_depth,
                ],
            });
            let failure = if w.responded {
                None
            } else {
                Some(
                    result
                        .and_then(|r| r.outcome.as_ref().err())
                        .map(|f| f.kind())
                        .unwrap_or("no_answer")
                        .chars()
                        .filter(|c| c.is_ascii_graphic())
                        .take(32)
                        .collect(),
                )
            };
            WorkerObservation {
                address: w.address,
                answer,
                failure,
            }
        })
        .collect();
    observation(binding, observer, workers)
}

/// The observation of a member whose own round missed its quorum: no answer counts
/// (it was not evaluated), each worker with its failure, or `local_quorum_not_met` for
/// those that did answer this member.
pub(crate) fn observe_failed(
    stage: &cresolver_workers::fanout::ResolveStage,
    binding: (u32, u32, B256, Address, MarketId),
    observer: Address,
) -> Observation {
    let workers = stage
        .results
        .iter()
        .map(|r| WorkerObservation {
            address: r.address,
            answer: None,
            failure: Some(
                match &r.outcome {
                    Ok(_) => "local_quorum_not_met",
                    Err(f) => f.kind(),
                }
                .into(),
            ),
        })
        .collect();
    observation(binding, observer, workers)
}

/// An observation of `workers` by `observer`, bound to the round, stamped now.
fn observation(
    binding: (u32, u32, B256, Address, MarketId),
    observer: Address,
    workers: Vec<WorkerObservation>,
) -> Observation {
    let (don_id, config_version, execution_id, market, market_id) = binding;
    Observation {
        don_id,
        config_version,
        execution_id,
        market,
        market_id,
        observer,
        timestamp: unix_now(),
        workers,
    }
}

fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs().min(u64::from(u32::MAX)) as u32)
        .unwrap_or(0)
}

/// The transcript's view of an agreement: every member's observation (or missing), the
/// set, the report, its signers.
pub(crate) fn don_record(don: &Don, own: &Observation, agreed: &Agreed) -> DonRecord {
    let members = don
        .members()
        .iter()
        .map(|m| {
            let obs = agreed
                .observations
                .iter()
                .find(|o| o.observation.observer == *m);
            DonMemberRecord {
                member: *m,
                in_set: obs.is_some(),
                observation: obs.map(|o| o.observation.clone()),
            }
        })
        .collect();
    DonRecord {
        execution_id: agreed.execution_id,
        member: don.address(),
        own_observation: own.clone(),
        members,
        set: agreed.observers(),
        attempt: agreed.attempt,
        round: Some(agreed.attempt),
        leader: agreed.leader,
        precommits: agreed.commits.iter().map(|c| c.voter).collect(),
        report: agreed.report.clone(),
        report_context: agreed.context.clone(),
        digest: agreed.digest,
        signers: agreed.signers.clone(),
        recomputed: agreed.recomputed,
        transmitter: None,
    }
}
