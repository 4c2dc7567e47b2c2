//! The round store as the chain watcher's sink: a seen request becomes a durable round
//! request (or is de-duplicated), and the scan's acknowledged block is the store's
//! checkpoint. The chain crate knows only [`WatchSink`]; this is where it meets the store.

use alloy::primitives::B256;
use cresolver_chain::watcher::{Recorded, SeenRequest, SinkError, WatchSink};
use cresolver_core::LogRef;
use cresolver_store::RoundKey;
use cresolver_store::{RequestDecision, RoundStore, StoreError};
use std::sync::Arc;

/// [`WatchSink`] over a [`RoundStore`].
pub struct StoreSink(pub Arc<dyn RoundStore>);

impl StoreSink {
    /// The sink over `store`, shared as the watcher takes it.
    pub fn shared(store: Arc<dyn RoundStore>) -> Arc<dyn WatchSink> {
        Arc::new(Self(store))
    }
}

fn sink_err(e: StoreError) -> SinkError {
    SinkError(e.to_string())
}

#[async_trait::async_trait]
impl WatchSink for StoreSink {
    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, SinkError> {
        self.0.checkpoint(key).await.map_err(sink_err)
    }

    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), SinkError> {
        self.0
            .set_checkpoint(key, block, hash)
            .await
            .map_err(sink_err)
    }

    async fn log_seen(&self, log: &LogRef) -> Result<bool, SinkError> {
        self.0.log_seen(log).await.map_err(sink_err)
    }

    async fn round_done(&self, round: RoundKey) -> Result<bool, SinkError> {
        let round = self.0.get(round).await.map_err(sink_err)?;
        Ok(round.is_some_and(|r| r.state.is_resolved()))
    }

    async fn record_request(&self, req: SeenRequest<'_>) -> Result<Recorded, SinkError> {
        let d = self
            .0
            .record_request_judged(req.round, req.workflow, req.log, req.unresolved_on_chain)
            .await
            .map_err(sink_err)?;
        Ok(Recorded {
            starts_round: d.starts_round(),
            already_handled: match d {
                RequestDecision::AlreadyHandled(state) => Some(state.as_str()),
                _ => None,
            },
            decision: format!("{d:?}"),
        })
    }
}
