//! The finality watch: follows every `confirmed` round until the block that holds its
//! transaction is final (the endpoint's `finalized` block, else `chain.finality_depth`
//! below the head), then marks it `finalized`. A round whose block left the canonical
//! chain before that is reopened at the submission stage: its mined nonce is pending
//! again and the round's drive re-sends the same signed bytes (or, when the chain used
//! the nonce otherwise, re-reads the market and signs anew only if it is unresolved).
//! Every transition is a conditional update of the store (`confirmed` → …), so the
//! nodes of a cluster may all watch and exactly one makes each change; the change is
//! persisted before anything is re-sent. Restarted, the watch resumes from the store.

use alloy::primitives::{Address, B256};
use alloy::providers::DynProvider;
use cresolver_chain::finality::{Finalized, canonical_hash, finalized};
use cresolver_chain::reader::{ReadError, resolved_many};
use cresolver_metrics::{FinalityEvent, Metrics};
use cresolver_pipeline::transcript::{FinalityRecord, ReorgRecord, Transcript};
use cresolver_store::RoundKey;
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
    pub finalized: Vec<RoundKey>,
    /// Rounds reopened at the submission stage (their drive must run again).
    pub reopened: Vec<RoundKey>,
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
    /// Batches the reads of the rounds without their block (`chain.multicall_address`).
    multicall: Option<Address>,
    /// Rounds without their block known unresolved at a final block (its number): not
    /// asked there again. Only rounds still watched are kept.
    unresolved_at_final: tokio::sync::Mutex<HashMap<RoundKey, u64>>,
}

impl FinalityWatch {
    /// A watch over `store`'s confirmed rounds; `depth` stands in for the `finalized`
    /// tag where the endpoint does not serve it; `multicall` batches its market reads.
    pub fn new(
        provider: DynProvider,
        store: Arc<dyn FinalityStore>,
        metrics: Arc<Metrics>,
        depth: u64,
        multicall: Option<Address>,
    ) -> Self {
        Self {
            provider,
            store,
            metrics,
            depth,
            multicall,
            unresolved_at_final: tokio::sync::Mutex::new(HashMap::new()),
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
        // rounds without their block (delivered by another DON member, or legacy) are
        // judged by the market itself, all in one batch
        let unmined: Vec<&Watched> = rounds.iter().filter(|w| w.mined.is_none()).collect();
        let mut by_market = self.unmined_verdicts(&unmined, &fin).await;
        // rounds mined in one block share one look at it
        let mut hashes: HashMap<u64, Option<B256>> = HashMap::new();
        for w in rounds {
            let verdict = match by_market.remove(&w.key()) {
                Some(v) => v,
                None => self.verdict(&w, &fin, &mut hashes).await,
            };
            let verdict = match verdict {
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
                        pass.finalized.push(w.key());
                    }
                }
                Verdict::Reorged(why) => {
                    if self.reopen(&w, &fin, why).await? {
                        pass.reopened.push(w.key());
                    }
                }
            }
        }
        Ok(pass)
    }

    /// The verdicts of rounds without the block of their transaction (delivered by
    /// another DON member, or a record written before the block's hash was kept): the
    /// chain's word on the market itself. Resolved at the final block: final. Else
    /// resolved at the head: watching; unresolved there: reorged. Both looks are one
    /// batch each, and a round known unresolved at this final block is not asked again
    /// there (a final block's state does not change). A batch that fails leaves its
    /// rounds out: they are watched on (the next pass looks again).
    async fn unmined_verdicts(
        &self,
        rounds: &[&Watched],
        fin: &Finalized,
    ) -> HashMap<RoundKey, Result<Verdict, FinalityError>> {
        let mut out = HashMap::new();
        if rounds.is_empty() {
            self.unresolved_at_final.lock().await.clear();
            return out;
        }
        let mined_block: HashMap<RoundKey, Option<u64>> =
            rounds.iter().map(|w| (w.key(), w.mined_block)).collect();
        let mut known = self.unresolved_at_final.lock().await;
        known.retain(|k, _| mined_block.contains_key(k));
        let ask: Vec<RoundKey> = rounds
            .iter()
            .map(|w| w.key())
            .filter(|k| known.get(k) != Some(&fin.number))
            .collect();
        let at_final = match resolved_many(&self.provider, self.multicall, &ask, Some(fin.number))
            .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(rounds = ask.len(), error = %e, "the markets of rounds without their block not read at the final block this pass");
                return out;
            }
        };
        let mut at_head_asked = Vec::new();
        let mut answers: HashMap<_, _> = ask.into_iter().zip(at_final).collect();
        for w in rounds {
            let key = w.key();
            match answers.remove(&key) {
                Some(Ok(true)) => {
                    out.insert(key, Ok(Verdict::Final));
                    continue;
                }
                // not resolved at the final block (a market created after it does not
                // exist there): the head says whether it still is
                Some(Ok(false) | Err(ReadError::MarketDoesNotExist(_))) => {
                    known.insert(key, fin.number);
                }
                Some(Err(e)) => {
                    out.insert(key, Err(FinalityError::Read(e)));
                    continue;
                }
                None => {}
            }
            at_head_asked.push(key);
        }
        drop(known);
        let at_head = match resolved_many(&self.provider, self.multicall, &at_head_asked, None)
            .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(rounds = at_head_asked.len(), error = %e, "the markets of rounds without their block not read at the head this pass");
                return out;
            }
        };
        for (key, r) in at_head_asked.into_iter().zip(at_head) {
            let block = mined_block.get(&key).copied().flatten();
            let verdict = match r {
                Ok(true) => Ok(Verdict::Watching),
                Ok(false) => Ok(Verdict::Reorged(format!(
                    "the market is unresolved on chain at head {}: our resolution{} left the canonical chain",
                    fin.head,
                    block.map_or(String::new(), |b| format!(" (mined in block {b})"))
                ))),
                Err(e) => Err(FinalityError::Read(e)),
            };
            out.insert(key, verdict);
        }
        out
    }

    async fn verdict(
        &self,
        w: &Watched,
        fin: &Finalized,
        hashes: &mut HashMap<u64, Option<B256>>,
    ) -> Result<Verdict, FinalityError> {
        let Some((_, _, at)) = w.mined else {
            // judged by `unmined_verdicts`; here only when its batch failed this pass
            return Ok(Verdict::Watching);
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
        let stored = self.store.get(w.key()).await?.and_then(|r| r.outcome);
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
            .set_finalized(w.key(), transcript.as_ref())
            .await?;
        if moved {
            self.metrics.finality_event(FinalityEvent::Finalized);
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
            .reopen_submission(w.key(), &reason, transcript.as_ref())
            .await?;
        if moved {
            self.metrics.finality_event(FinalityEvent::Reorged);
            tracing::warn!(market_id = %w.market_id, head = fin.head, %why, "our resolution left the canonical chain before it was final: the round is reopened at the submission stage");
        }
        Ok(moved)
    }

    /// Passes at a new head (`wake`), at least every `every` and at most once per
    /// `every`, until `stop`; the rounds it reopens are sent on `reopened` to be driven
    /// again. Heads that come faster than `every` (an L2's, or a devnet's one block per
    /// transaction) are looked at together: a pass reads every confirmed round's block,
    /// and once per head it was a large share of a node's JSON-RPC calls, made just when
    /// a request's block arrived.
    pub async fn run(
        self,
        reopened: tokio::sync::mpsc::Sender<RoundKey>,
        stop: tokio_util::sync::CancellationToken,
        mut wake: watch::Receiver<u64>,
        every: Duration,
    ) {
        let mut failing = false;
        let mut last: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                changed = wake.changed() => if changed.is_err() { return },
                _ = stop.cancelled() => return,
            }
            if let Some(at) = last {
                tokio::select! {
                    _ = tokio::time::sleep_until(at + every) => {}
                    _ = stop.cancelled() => return,
                }
            }
            if stop.is_cancelled() {
                return;
            }
            last = Some(tokio::time::Instant::now());
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

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::U256;
    use alloy::providers::{Provider, ProviderBuilder};
    use cresolver_store::{Requests, Rounds, SqliteStore, Stage, Store};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A JSON-RPC endpoint on 127.0.0.1 that counts `eth_blockNumber` (one per pass:
    /// `finalized` asks it first) and serves no block and no call (the rounds stay
    /// watched).
    async fn endpoint(passes: Arc<AtomicUsize>) -> String {
        let app = axum::Router::new().route(
            "/",
            axum::routing::post(move |body: axum::Json<serde_json::Value>| {
                let passes = passes.clone();
                async move {
                    let id = body.get("id").cloned().unwrap_or_default();
                    let result = match body.get("method").and_then(|m| m.as_str()) {
                        Some("eth_blockNumber") => {
                            passes.fetch_add(1, Ordering::SeqCst);
                            serde_json::json!("0x10")
                        }
                        _ => serde_json::Value::Null,
                    };
                    axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let url = format!("http://{}/", listener.local_addr().expect("has an address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn heads_faster_than_the_interval_share_a_pass() {
        let passes = Arc::new(AtomicUsize::new(0));
        let url = endpoint(passes.clone()).await;
        let provider = ProviderBuilder::new()
            .connect_http(url.parse().expect("a URL"))
            .erased();
        let store = SqliteStore::new(Store::in_memory().expect("opens"));
        let key = RoundKey::new(Address::repeat_byte(1), U256::from(7));
        store.manual_request(key, "wf").await.expect("recorded");
        store
            .set_state(key, Stage::Confirmed, None)
            .await
            .expect("confirmed");
        let watch =
            FinalityWatch::new(provider, Arc::new(store), Arc::new(Metrics::new()), 2, None);
        let (heads, wake) = watch::channel(0u64);
        let stop = tokio_util::sync::CancellationToken::new();
        let (reopen, _reopened) = tokio::sync::mpsc::channel(8);
        let every = Duration::from_millis(500);
        let task = tokio::spawn(watch.run(reopen, stop.clone(), wake, every));
        // 30 heads in 1.2 s (a devnet's block per transaction, an L2's quick heads)
        for n in 1..=30u64 {
            heads.send_replace(n);
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        stop.cancel();
        task.await.expect("the watch ends");
        let n = passes.load(Ordering::SeqCst);
        // a pass at the first head, then at most one per interval: 3 in 1.2 s (one
        // more of slack for a slow machine); one per head would be about 30
        assert!((1..=4).contains(&n), "{n} passes for 30 heads");
    }
}
