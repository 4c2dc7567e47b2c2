//! How the node drives one round it holds, as a typed state machine: each step is a
//! function of the round so far that returns the [`Next`] step, or a [`StepError`] whose
//! kind says whether the round is retried, fails, or stops because another node holds
//! it. Every step persists what it changed before its side effect; the transcript is
//! carried through the steps by value and written, never read back, to decide.
//!
//! ```text
//! resume ─► read ─► discover ─► run ─┬─► submit ───────────────┬─► follow ─► conclude ─► end
//!                                    └─► agree ─► transmit ────┘
//! ```
//!
//! A restarted round resumes at `follow` (a nonce it reserved), at `conclude` (a
//! transaction mined before it concluded) or at `read`; the engine skips the worker
//! stages its stored progress has passed.

mod don;
mod error;
mod follow;
mod read;
mod resume;
mod run;
mod submit;

pub use error::{StepError, StepKind};

use crate::{Node, Pipeline, Submission};
use alloy::primitives::Address;
use alloy::providers::DynProvider;
use alloy::rpc::types::TransactionReceipt;
use cresolver_chain::discovery::DiscoveryConfig;
use cresolver_core::Reputation;
use cresolver_don::Agreed;
use cresolver_metrics::Metrics;
use cresolver_pipeline::round::{RoundInput, RoundOutcome};
use cresolver_pipeline::transcript::{ConfirmationRecord, Transcript};
use cresolver_store::RoundStore;
use cresolver_store::{MarketId, RoundKey};
use cresolver_store::{RoundRecord, Stage};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// A span around one step of a round (target `cresolver::step`, fields `step` and
/// `market_id`): a debug log shows it, and `cargo bench --bench node` takes each step's
/// time, and when a round concluded, from it.
pub(crate) fn step(name: &'static str, market_id: MarketId) -> tracing::Span {
    tracing::debug_span!(target: "cresolver::step", "step", step = name, market_id = %market_id)
}

/// The step a round takes next, with what it needs from the step before. From
/// discovery until the round's call is handed on, the transcript travels here, by value:
/// no step of that stretch can run without one.
pub(crate) enum Next {
    /// Read the market at the request block.
    Read,
    /// Find the workers' endpoints of the market read (at `block`, judged at its time).
    Discover(Box<read::Read>),
    /// Ask the workers, challenge and evaluate them (the engine).
    Run(Box<Carried<RoundInput>>),
    /// Send the outcome on this node's key.
    Submit(Box<Carried<RoundOutcome>>),
    /// Agree on one report with the other DON members (reputations of the input).
    Agree(Box<Carried<Vec<Reputation>>>),
    /// Deliver the agreed report through the forwarder.
    Transmit(Box<Carried<Agreed>>),
    /// Follow the round's reserved nonce until it is mined deep enough.
    Follow(u64),
    /// Conclude from the receipt of the round's mined transaction.
    Conclude(Box<TransactionReceipt>),
    /// The round ends.
    End(Ending),
}

/// What a step hands the next one, with the round's transcript so far.
pub(crate) struct Carried<T> {
    /// What the next step works on.
    pub what: T,
    /// The transcript, as the steps before left it.
    pub transcript: Transcript,
}

impl<T> Carried<T> {
    /// `what`, carried with `transcript`, boxed for [`Next`].
    pub fn next(what: T, transcript: Transcript) -> Box<Self> {
        Box::new(Self { what, transcript })
    }
}

/// How a round ends.
pub(crate) enum Ending {
    /// In `stage` (skipped, failed) with its reason; the transcript stays as stored.
    At { stage: Stage, reason: String },
    /// With the chain's word on the round's transaction: the transcript gets the
    /// confirmation and every transaction attempt, written together with `stage`.
    Concluded {
        confirmation: ConfirmationRecord,
        /// The key that signed the round's call.
        from: Address,
        stage: Stage,
        reason: Option<String>,
    },
    /// Nothing to write: the round was final or gone when the drive began.
    Untouched,
}

impl Ending {
    /// Ends skipped for `reason`.
    pub(crate) fn skipped(reason: impl Into<String>) -> Next {
        Next::End(Ending::At {
            stage: Stage::Skipped,
            reason: reason.into(),
        })
    }
}

/// A round as its drive carries it from step to step.
pub(crate) struct Round<'a> {
    pub p: &'a Pipeline,
    pub market_id: MarketId,
    /// The round as stored when the drive began.
    pub rec: RoundRecord,
    /// The stage last persisted (the `stage` label of a round that stops).
    pub stage: Stage,
    /// The transcript once the round's call is handed on (the submission's or the
    /// transmission's step parks it here), or the stored one of a round that resumes
    /// after that (`None` if none parses); the ending completes and writes it. Before
    /// that, [`Next`] carries it.
    pub transcript: Option<Transcript>,
    /// How many times the round signed again at a fresh nonce in this drive.
    pub fresh_nonces: u32,
}

impl Round<'_> {
    /// The market the round is of.
    pub fn market(&self) -> Address {
        self.p.market
    }

    /// The round's identity.
    pub fn key(&self) -> RoundKey {
        RoundKey {
            market: self.p.market,
            id: self.market_id,
        }
    }
}

/// What a round's steps use of the node, and nothing else: no scheduling, leases,
/// health or API. Built by [`Node::drive`] for each drive; each step is a method of it.
pub(crate) struct Steps<'a> {
    /// The round store.
    pub store: &'a Arc<dyn RoundStore>,
    /// The node's metrics.
    pub metrics: &'a Metrics,
    /// The RPC pool's provider.
    pub provider: &'a DynProvider,
    /// The chain's id.
    pub chain_id: u64,
    /// The Multicall3 contract for batched reads (`chain.multicall_address`).
    pub multicall: Option<Address>,
    /// How workers' endpoints are found.
    pub discovery: &'a DiscoveryConfig,
    /// The client of discovery's metadata fetches.
    pub http: &'a reqwest::Client,
    /// How outcomes reach the chain.
    pub submission: &'a Submission,
    /// How long a round taken over waits for another key's transaction.
    pub foreign_wait: Duration,
}

/// How a drive ended, for the round's metrics and logs.
pub(crate) struct Driven {
    /// The last stage the round had persisted before it ended (or stopped).
    pub from: Stage,
}

impl Node {
    /// Drives a held round from its stored state to an end or a persisted stop, with
    /// the steps' share of the node.
    pub(crate) async fn drive(&self, round: RoundKey) -> Result<Driven, (Stage, StepError)> {
        let (market, market_id) = (round.market, round.id);
        let steps = Steps {
            store: &self.store,
            metrics: &self.metrics,
            provider: &self.provider,
            chain_id: self.chain_id,
            multicall: self.cfg.chain.multicall_address,
            discovery: &self.discovery,
            http: &self.http,
            submission: &self.submission,
            foreign_wait: self.foreign_wait(),
        };
        steps
            .drive(self.pipeline(market), RoundKey::new(market, market_id))
            .await
    }
}

impl Steps<'_> {
    /// Drives a held round of `p`'s market (`None`: no workflow watches it).
    async fn drive(
        &self,
        p: Option<&Pipeline>,
        round: RoundKey,
    ) -> Result<Driven, (Stage, StepError)> {
        let (market, market_id) = (round.market, round.id);
        let Some(p) = p else {
            self.fail(
                RoundKey::new(market, market_id),
                "no workflow watches this market",
            )
            .await
            .map_err(|e| (Stage::Requested, e))?;
            return Ok(Driven {
                from: Stage::Requested,
            });
        };
        let rec = match self.store.get(RoundKey::new(market, market_id)).await {
            Ok(Some(r)) if !r.state.is_final() => r,
            Ok(Some(r)) => return Ok(Driven { from: r.state }),
            Ok(None) => {
                return Ok(Driven {
                    from: Stage::Requested,
                });
            }
            Err(e) => return Err((Stage::Requested, e.into())),
        };
        let mut round = Round {
            p,
            market_id,
            stage: rec.state,
            rec,
            transcript: None,
            fresh_nonces: 0,
        };
        let mut result = self.resume(&mut round).await;
        loop {
            let next = match result {
                Ok(n) => n,
                Err(e) if e.is_fatal() => Next::End(Ending::At {
                    stage: Stage::Failed,
                    reason: e.reason(),
                }),
                Err(e) => return Err((round.stage, e)),
            };
            result = match next {
                Next::Read => self.read(&mut round).await,
                Next::Discover(read) => self.discover(&mut round, *read).await,
                Next::Run(input) => self.run_engine(&mut round, *input).await,
                Next::Submit(outcome) => self.submit(&mut round, *outcome).await,
                Next::Agree(agreeing) => match &self.submission {
                    Submission::Don { don, .. } => self.agree(&mut round, don, *agreeing).await,
                    _ => Err(StepError::fail("the round agrees without a DON membership")),
                },
                Next::Transmit(agreed) => match &self.submission {
                    Submission::Don { don, txm } => {
                        self.transmit(&mut round, don, txm, *agreed).await
                    }
                    _ => Err(StepError::fail(
                        "the round transmits without a DON membership",
                    )),
                },
                Next::Follow(nonce) => self.follow(&mut round, nonce).await,
                Next::Conclude(receipt) => {
                    self.conclude(&mut round, &receipt)
                        .instrument(step("conclude", market_id))
                        .await
                }
                Next::End(ending) => {
                    return match self.end(&mut round, ending).await {
                        Ok(()) => Ok(Driven { from: round.stage }),
                        Err(e) => Err((round.stage, e)),
                    };
                }
            };
        }
    }

    /// Writes how a round ended.
    async fn end(&self, round: &mut Round<'_>, ending: Ending) -> Result<(), StepError> {
        let (market, market_id) = (round.market(), round.market_id);
        match ending {
            Ending::Untouched => Ok(()),
            Ending::At { stage, reason } => {
                if stage == Stage::Failed {
                    tracing::warn!(market_id = %market_id, %reason, "round failed");
                }
                self.store
                    .set_state(RoundKey::new(market, market_id), stage, Some(&reason))
                    .await?;
                Ok(())
            }
            Ending::Concluded {
                confirmation,
                from,
                stage,
                reason,
            } => {
                let Some(t) = round.transcript.take() else {
                    self.store
                        .set_state(RoundKey::new(market, market_id), stage, reason.as_deref())
                        .await?;
                    return Ok(());
                };
                self.finish_transcript(round, t, confirmation, from, stage, reason.as_deref())
                    .await
            }
        }
    }

    /// Fails a round outside a drive's steps (no workflow watches its market).
    async fn fail(&self, round: RoundKey, reason: &str) -> Result<(), StepError> {
        let (market, market_id) = (round.market, round.id);
        tracing::warn!(market_id = %market_id, %reason, "round failed");
        self.store
            .set_state(
                RoundKey::new(market, market_id),
                Stage::Failed,
                Some(reason),
            )
            .await?;
        Ok(())
    }

    /// Stores the round's transcript `t` as it is now (written by serde; see
    /// `cresolver_pipeline::transcript`).
    pub(crate) async fn save_transcript(
        &self,
        round: &Round<'_>,
        t: &Transcript,
    ) -> Result<(), StepError> {
        let v = serde_json::to_value(t)
            .map_err(|e| StepError::retry_from("cannot encode the transcript", e))?;
        self.store
            .set_outcome(round.key(), &v)
            .instrument(step("save_transcript", round.market_id))
            .await?;
        Ok(())
    }
}
