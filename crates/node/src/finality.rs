//! The finality watch: follows every `confirmed` round until the block that holds its
//! transaction is final (the endpoint's `finalized` block, else `chain.finality_depth`
//! below the head), then marks it `finalized`. A round whose block left the canonical
//! chain before that is reopened at the submission stage: its mined nonce is pending
//! again and the round's drive re-sends the same signed bytes (or, when the chain used
//! the nonce otherwise, re-reads the market and signs anew only if it is unresolved).
//! Every transition is a conditional update of the store (`confirmed` → …), so the
//! nodes of a cluster may all watch and exactly one makes each change; the change is
//! persisted before anything is re-sent. Restarted, the watch resumes from the store.

use alloy::primitives::{Address, B256, U256};
use alloy::providers::DynProvider;
use cresolver_chain::finality::{Finalized, canonical_hash, finalized};
use cresolver_chain::reader::resolved_at;
use cresolver_metrics::Metrics;
use cresolver_pipeline::transcript::{FinalityRecord, ReorgRecord, Transcript};
use cresolver_store::{FinalityStore, Watched};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Why a pass of the finality watch could not look at a round (or at any).
#[derive(Debug, thiserror::Error)]
pub enum FinalityError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] cresolver_store::StoreError),
    /// A call to the chain failed.
    #[error(transparent)]
    Chain(#[from] cresolver_chain::RpcFailure),
    /// The market could not be read.
    #[error(transparent)]
    Read(#[from] cresolver_chain::reader::ReadError),
}

/// Rounds looked at per pass (the least recently updated first).
const BATCH: usize = 1_000;

/// What one pass decided of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Still canonical, not final yet (or not knowable this pass).
    Watching,
    Final,
    /// Left the canonical chain: why.
    Reorged(String),
}

/// What one pass did.
#[derive(Debug, Clone, Default)]
pub struct Pass {
    /// `confirmed` rounds looked at.
    pub watched: usize,
    /// Rounds marked `finalized` this pass.
    pub finalized: Vec<(Address, U256)>,
    /// Rounds reopened at the submission stage (their drive must run again).
    pub reopened: Vec<(Address, U256)>,
    /// The final block the pass judged by (`None`: not known this pass).
    pub at: Option<Finalized>,
}

/// The finality watch of a node: see the module doc.
pub struct FinalityWatch {
    provider: DynProvider,
    store: Arc<dyn FinalityStore>,
    metrics: Arc<Metrics>,
    /// Used where the endpoint does not serve the `finalized` tag.
    depth: u64,
}

impl FinalityWatch {
    /// A watch over `store`'s confirmed rounds; `depth` stands in for the `finalized`
    /// tag where the endpoint does not serve it.
    pub fn new(
        provider: DynProvider,
        store: Arc<dyn FinalityStore>,
        metrics: Arc<Metrics>,
        depth: u64,
    ) -> Self {
        Self {
            provider,
            store,
            metrics,
            depth,
        }
    }

    /// One look at every `confirmed` round.
    pub async fn check_once(&self) -> Result<Pass, FinalityError> {
        let rounds = self.store.awaiting_finality(BATCH).await?;
        let mut pass = Pass {
            watched: rounds.len(),
            ..Default::default()
        };
        if rounds.is_empty() {
            return Ok(pass);
        }
        let fin = finalized(&self.provider, self.depth).await?;
        pass.at = Some(fin);
        // rounds mined in one block share one look at it
        let mut hashes: HashMap<u64, Option<B256>> = HashMap::new();
        for w in rounds {
            let verdict = match self.verdict(&w, &fin, &mut hashes).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(market_id = %w.market_id, error = %e, "finality of the round not known this pass");
                    Verdict::Watching
                }
            };
            match verdict {
                Verdict::Watching => {}
                Verdict::Final => {
                    if self.finalize(&w, &fin).await? {
                        pass.finalized.push((w.market, w.market_id));
                    }
                }
                Verdict::Reorged(why) => {
                    if self.reopen(&w, &fin, why).await? {
                        pass.reopened.push((w.market, w.market_id));
                    }
                }
            }
        }
        Ok(pass)
    }

    async fn verdict(
        &self,
        w: &Watched,
        fin: &Finalized,
        hashes: &mut HashMap<u64, Option<B256>>,
    ) -> Result<Verdict, FinalityError> {
        let Some((_, _, at)) = w.mined else {
            // a record without the block's hash (written before it was kept): the
            // chain's word on the market itself
            let m = (w.market, w.market_id);
            if resolved_at(&self.provider, m.0, m.1, Some(fin.number)).await? {
                return Ok(Verdict::Final);
            }
            if resolved_at(&self.provider, m.0, m.1, None).await? {
                return Ok(Verdict::Watching);
            }
            return Ok(Verdict::Reorged(format!(
                "the market is unresolved on chain at head {}: our resolution{} left the canonical chain",
                fin.head,
                w.mined_block
                    .map_or(String::new(), |b| format!(" (mined in block {b})"))
            )));
        };
        let canonical = match hashes.get(&at.block) {
            Some(h) => *h,
            None => {
                let h = canonical_hash(&self.provider, at.block).await?;
                hashes.insert(at.block, h);
                h
            }
        };
        Ok(match canonical {
            Some(h) if h == at.block_hash => {
                if at.block <= fin.number {
                    Verdict::Final
                } else {
                    Verdict::Watching
                }
            }
            Some(h) => Verdict::Reorged(format!(
                "block {} that held our transaction {} is no longer canonical (it was {}, is {h} at head {})",
                at.block, at.tx, at.block_hash, fin.head
            )),
            // the endpoint does not have the block (a lagging backend, or a chain that
            // got shorter): look again at the next pass
            None => Verdict::Watching,
        })
    }

    /// The round's transcript with `edit` applied to its finality record (`None`: no
    /// transcript, or one that does not parse: the state changes without it).
    async fn edited_transcript(
        &self,
        w: &Watched,
        edit: impl FnOnce(&mut FinalityRecord),
    ) -> Result<Option<serde_json::Value>, FinalityError> {
        let stored = self
            .store
            .get(w.market, w.market_id)
            .await?
            .and_then(|r| r.outcome);
        let Some(mut t) = stored.and_then(|v| serde_json::from_value::<Transcript>(v).ok()) else {
            return Ok(None);
        };
        let mut rec = t.finality.take().unwrap_or(FinalityRecord {
            status: String::new(),
            tx_hash: None,
            block_number: None,
            block_hash: None,
            finalized_block: None,
            source: None,
            reorgs: Vec::new(),
        });
        edit(&mut rec);
        t.finality = Some(rec);
        Ok(serde_json::to_value(&t).ok())
    }

    async fn finalize(&self, w: &Watched, fin: &Finalized) -> Result<bool, FinalityError> {
        let at = w.mined.map(|(_, _, at)| at);
        let transcript = self
            .edited_transcript(w, |r| {
                r.status = "final".into();
                r.tx_hash = at.map(|a| a.tx);
                r.block_number = at.map(|a| a.block).or(w.mined_block);
                r.block_hash = at.map(|a| a.block_hash);
                r.finalized_block = Some(fin.number);
                r.source = Some(
                    serde_json::to_value(fin.source)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                );
            })
            .await?;
        let moved = self
            .store
            .set_finalized(w.market, w.market_id, transcript.as_ref())
            .await?;
        if moved {
            self.metrics.finality_event("finalized");
            tracing::info!(market_id = %w.market_id, block = ?at.map(|a| a.block), finalized_block = fin.number, source = ?fin.source, "resolution final");
        }
        Ok(moved)
    }

    async fn reopen(
        &self,
        w: &Watched,
        fin: &Finalized,
        why: String,
    ) -> Result<bool, FinalityError> {
        let at = w.mined.map(|(_, _, at)| at);
        let reason = format!("reorged before final: {why}; re-sending the resolution");
        let transcript = self
            .edited_transcript(w, |r| {
                r.status = "reorged".into();
                r.reorgs.push(ReorgRecord {
                    tx_hash: at.map(|a| a.tx),
                    block_number: at.map(|a| a.block).or(w.mined_block),
                    block_hash: at.map(|a| a.block_hash),
                    seen_at_head: fin.head,
                    detail: why.clone(),
                });
            })
            .await?;
        let moved = self
            .store
            .reopen_submission(w.market, w.market_id, &reason, transcript.as_ref())
            .await?;
        if moved {
            self.metrics.finality_event("reorged");
            tracing::warn!(market_id = %w.market_id, head = fin.head, %why, "our resolution left the canonical chain before it was final: the round is reopened at the submission stage");
        }
        Ok(moved)
    }

    /// Passes at every new head (`wake`), at least every `every`, until `stop`; the
    /// rounds it reopens are sent on `reopened` to be driven again.
    pub async fn run(
        self,
        reopened: tokio::sync::mpsc::Sender<(Address, U256)>,
        stop: tokio_util::sync::CancellationToken,
        mut wake: watch::Receiver<u64>,
        every: Duration,
    ) {
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                changed = wake.changed() => if changed.is_err() { return },
                _ = stop.cancelled() => return,
            }
            if stop.is_cancelled() {
                return;
            }
            match self.check_once().await {
                Ok(pass) => {
                    if failing {
                        tracing::info!("the finality watch works again");
                        failing = false;
                    }
                    for r in pass.reopened {
                        if reopened.send(r).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "the finality watch cannot look at confirmed rounds; retrying");
                        failing = true;
                    }
                }
            }
            // heads that came during the pass are covered by it
            wake.borrow_and_update();
        }
    }
}
