//! The newest head the node knows of, as a wake-up for everything that waits on the
//! chain (the watcher's scan, the transaction manager's receipt checks). Fed by the pool's
//! head probe and, on a websocket endpoint, by a `newHeads` subscription that is rebuilt
//! for as long as the node runs: when the subscription or its connection ends, or it
//! stalls while the probe sees the chain move on, a new client is built (backoff capped),
//! and every (re)subscription wakes the watcher so it scans from its checkpoint and
//! nothing in the gap is missed. Polling keeps going underneath, so a dead push costs
//! latency, never events.

use alloy::providers::{Provider, ProviderBuilder};
use futures::StreamExt;
use std::time::Duration;
use tokio::sync::watch;

/// Sends the newest head; receivers wake on every new head (and on [`HeadFeed::wake`]).
#[derive(Debug, Clone)]
pub struct HeadFeed {
    tx: watch::Sender<u64>,
    /// Bumped when an endpoint is in service again after none was.
    restored: watch::Sender<u64>,
}

impl Default for HeadFeed {
    fn default() -> Self {
        Self::new()
    }
}

impl HeadFeed {
    /// A feed at head 0, with no receiver yet.
    pub fn new() -> Self {
        Self {
            tx: watch::channel(0).0,
            restored: watch::channel(0).0,
        }
    }

    /// An endpoint serves again after none did: wakes what waits on [`HeadFeed::on_restore`].
    pub fn restored(&self) {
        self.restored.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that wakes when the chain is reachable again after an outage.
    pub fn on_restore(&self) -> watch::Receiver<u64> {
        self.restored.subscribe()
    }

    /// Records a head; wakes receivers when it is newer than the last one.
    pub fn publish(&self, head: u64) {
        self.tx.send_if_modified(|h| {
            if head > *h {
                *h = head;
                true
            } else {
                false
            }
        });
    }

    /// Wakes every receiver without a new head (after a reconnect: scan from the checkpoint).
    pub fn wake(&self) {
        self.tx.send_modify(|_| {});
    }

    /// The newest head recorded (0 before the first).
    pub fn latest(&self) -> u64 {
        *self.tx.borrow()
    }

    /// A receiver that wakes on every new head and on [`HeadFeed::wake`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }
}

/// Settings of the push subscription.
#[derive(Debug, Clone)]
pub struct PushConfig {
    /// The pool's settings: the subscription uses its request timeout and websocket
    /// retries.
    pub pool: super::pool::PoolConfig,
    /// Longest pause between two attempts to rebuild the subscription.
    pub max_backoff: Duration,
    /// A subscription that sent nothing for this long while the probe saw newer heads is
    /// rebuilt.
    pub stall_after: Duration,
}

/// Keeps a `newHeads` subscription on `url` feeding `feed` until `stop` is cancelled.
pub async fn run_push(
    url: String,
    cfg: PushConfig,
    feed: HeadFeed,
    stop: tokio_util::sync::CancellationToken,
) {
    let name = super::redact_url(&url);
    let mut backoff = Duration::from_millis(250);
    loop {
        match subscribe_once(&url, &name, &cfg, &feed, &stop).await {
            Ended::Stopped => return,
            Ended::Healthy => backoff = Duration::from_millis(250),
            Ended::Failed => backoff = (backoff * 2).min(cfg.max_backoff),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => return,
        }
        if stop.is_cancelled() {
            return;
        }
    }
}

enum Ended {
    Stopped,
    /// It ran and delivered heads before it ended.
    Healthy,
    Failed,
}

async fn subscribe_once(
    url: &str,
    name: &str,
    cfg: &PushConfig,
    feed: &HeadFeed,
    stop: &tokio_util::sync::CancellationToken,
) -> Ended {
    let connect = crate::ws::NoDelayWs::new(url, cfg.pool.ws_retries, cfg.pool.ws_retry_interval);
    let provider = match tokio::time::timeout(
        cfg.pool.timeout,
        ProviderBuilder::new().connect_pubsub_with(connect),
    )
    .await
    {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            tracing::debug!(endpoint = %name, error = %super::redact_error(&e.to_string()), "cannot open the head subscription's websocket");
            return Ended::Failed;
        }
        Err(_) => {
            tracing::debug!(endpoint = %name, "the head subscription's websocket did not open in time");
            return Ended::Failed;
        }
    };
    let sub = match tokio::time::timeout(cfg.pool.timeout, provider.subscribe_blocks()).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(endpoint = %name, error = %super::redact_error(&e.to_string()), "eth_subscribe(newHeads) failed: polling only until it works");
            return Ended::Failed;
        }
        Err(_) => return Ended::Failed,
    };
    tracing::info!(endpoint = %name, "subscribed to new heads");
    // whatever happened while there was no subscription is found by a scan now
    feed.wake();
    let mut stream = sub.into_stream();
    let mut last = feed.latest();
    let mut delivered = false;
    let check = cfg.stall_after.max(Duration::from_millis(100));
    loop {
        tokio::select! {
            h = stream.next() => match h {
                Some(h) => {
                    delivered = true;
                    last = last.max(h.number);
                    feed.publish(h.number);
                }
                None => {
                    tracing::warn!(endpoint = %name, "head subscription ended: rebuilding it (polling covers the gap)");
                    return if delivered { Ended::Healthy } else { Ended::Failed };
                }
            },
            _ = tokio::time::sleep(check) => {
                if feed.latest() > last.saturating_add(1) {
                    tracing::warn!(endpoint = %name, subscription = last, probe = feed.latest(), "head subscription stalled behind the probe: rebuilding it");
                    return Ended::Failed;
                }
                last = last.max(feed.latest());
            }
            _ = stop.cancelled() => return Ended::Stopped,
        }
    }
}
