//! The newest head the node knows of, as a wake-up for everything that waits on the
//! chain (the watcher's scan, the transaction manager's receipt checks). Fed by the pool's
//! head probe and, on a websocket endpoint, by a `newHeads` subscription that is rebuilt
//! for as long as the node runs: when the subscription or its connection ends, or it
//! stalls while the probe sees the chain move on, a new client is built (backoff capped),
//! and every (re)subscription wakes the watcher so it scans from its checkpoint and
//! nothing in the gap is missed. Polling keeps going underneath, so a dead push costs
//! latency, never events.
//!
//! The pushed headers are also kept, as a chain linked by parent hash ([`PushedChain`]):
//! the watcher scans a new head by its hash alone when that chain links the head to its
//! checkpoint (see `watcher`), instead of asking for the head, the checkpoint's block and
//! the scanned block again.

use alloy::primitives::B256;
use alloy::providers::{Provider, ProviderBuilder};
use futures::StreamExt;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Sends the newest head; receivers wake on every new head (and on [`HeadFeed::wake`]).
#[derive(Debug, Clone)]
pub struct HeadFeed {
    tx: watch::Sender<u64>,
    /// Bumped when an endpoint is in service again after none was.
    restored: watch::Sender<u64>,
    /// The subscription's newest headers.
    pushed: Arc<parking_lot::Mutex<PushedChain>>,
}

/// A header as the `newHeads` subscription pushed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushedHead {
    /// The block's number.
    pub number: u64,
    /// The block's hash.
    pub hash: B256,
    /// Its parent's hash.
    pub parent: B256,
}

/// The newest pushed headers, oldest first, each the parent of the next: a header that
/// does not extend the newest one replaces the headers at and above its number when it
/// links to the one below (a reorg the endpoint pushed), and the whole chain otherwise
/// (a gap). At most [`PushedChain::CAPACITY`] headers are kept.
#[derive(Debug, Clone, Default)]
pub struct PushedChain {
    heads: VecDeque<PushedHead>,
}

impl PushedChain {
    /// Headers kept: a watcher whose confirmation depth is deeper never scans by hash.
    pub const CAPACITY: usize = 256;

    /// Adds a pushed header (see the type's documentation).
    pub fn push(&mut self, h: PushedHead) {
        if self.heads.iter().any(|k| *k == h) {
            // the same header again (a resubscription's first push): nothing changes
            return;
        }
        while self.heads.back().is_some_and(|b| b.number >= h.number) {
            self.heads.pop_back();
        }
        if let Some(b) = self.heads.back()
            && (b.number.checked_add(1) != Some(h.number) || b.hash != h.parent)
        {
            self.heads.clear();
        }
        self.heads.push_back(h);
        while self.heads.len() > Self::CAPACITY {
            self.heads.pop_front();
        }
    }

    /// Forgets every header (the subscription was rebuilt: what it pushes next may not
    /// follow what it pushed before).
    pub fn clear(&mut self) {
        self.heads.clear();
    }

    /// The newest header.
    pub fn tip(&self) -> Option<PushedHead> {
        self.heads.back().copied()
    }

    /// The headers above block `number`, oldest first, when the chain holds the block
    /// after it and that block's parent is `hash` (so block `number` with that hash is
    /// an ancestor of the newest pushed head). Empty when `number` with `hash` is the
    /// newest head itself; `None` when the chain cannot say.
    pub fn after(&self, number: u64, hash: B256) -> Option<Vec<PushedHead>> {
        if let Some(t) = self.tip()
            && t.number == number
        {
            return (t.hash == hash).then(Vec::new);
        }
        let first = self.heads.front()?;
        let next = number.checked_add(1)?;
        let skip = usize::try_from(next.checked_sub(first.number)?).ok()?;
        let above: Vec<PushedHead> = self.heads.iter().skip(skip).copied().collect();
        (above.first()?.parent == hash).then_some(above)
    }
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
            pushed: Arc::default(),
        }
    }

    /// Records a header the subscription pushed, and publishes its number.
    pub fn push_header(&self, h: PushedHead) {
        self.pushed.lock().push(h);
        self.publish(h.number);
    }

    /// The pushed headers above block `number` with `hash` (see [`PushedChain::after`]),
    /// only when the pushed chain is as new as the newest head known by any means: a
    /// subscription that lags the probe cannot say what lies between.
    pub fn pushed_after(&self, number: u64, hash: B256) -> Option<Vec<PushedHead>> {
        let chain = self.pushed.lock();
        if !self.is_current(&chain) {
            return None;
        }
        chain.after(number, hash)
    }

    /// Whether the subscription pushed a header as new as the newest head known by any
    /// means (without it, [`HeadFeed::pushed_after`] answers nothing): a cheap look
    /// before the checkpoint is read.
    pub fn pushed_is_current(&self) -> bool {
        self.is_current(&self.pushed.lock())
    }

    fn is_current(&self, chain: &PushedChain) -> bool {
        chain.tip().is_some_and(|t| t.number >= self.latest())
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
    // whatever happened while there was no subscription is found by a scan now (a full
    // one: the headers pushed before need not link to what comes next)
    feed.pushed.lock().clear();
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
                    feed.push_header(PushedHead {
                        number: h.number,
                        hash: h.hash,
                        parent: h.parent_hash,
                    });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn head(number: u64, hash: u8, parent: u8) -> PushedHead {
        PushedHead {
            number,
            hash: B256::repeat_byte(hash),
            parent: B256::repeat_byte(parent),
        }
    }

    #[test]
    fn a_linked_chain_answers_what_lies_above_a_block() {
        let mut c = PushedChain::default();
        for (n, h, p) in [(10, 10, 9), (11, 11, 10), (12, 12, 11)] {
            c.push(head(n, h, p));
        }
        let above = c.after(10, B256::repeat_byte(10)).expect("linked");
        assert_eq!(above, vec![head(11, 11, 10), head(12, 12, 11)]);
        // the block before the first header: its hash is the first header's parent
        assert_eq!(c.after(9, B256::repeat_byte(9)).expect("linked").len(), 3);
        // the tip itself: nothing above it
        assert_eq!(c.after(12, B256::repeat_byte(12)), Some(vec![]));
        // another hash at the same height: not an ancestor
        assert_eq!(c.after(10, B256::repeat_byte(0xee)), None);
        assert_eq!(c.after(12, B256::repeat_byte(0xee)), None);
        // below what the chain holds, or above its tip: it cannot say
        assert_eq!(c.after(8, B256::repeat_byte(8)), None);
        assert_eq!(c.after(13, B256::repeat_byte(13)), None);
        assert_eq!(c.after(u64::MAX, B256::repeat_byte(1)), None);
    }

    #[test]
    fn a_reorg_replaces_the_chain_from_its_height_and_a_gap_clears_it() {
        let mut c = PushedChain::default();
        for (n, h, p) in [(10, 10, 9), (11, 11, 10), (12, 12, 11)] {
            c.push(head(n, h, p));
        }
        // a new block 11 on block 10: blocks 11 and 12 are replaced
        c.push(head(11, 0xb1, 10));
        assert_eq!(c.tip(), Some(head(11, 0xb1, 10)));
        assert_eq!(c.after(11, B256::repeat_byte(11)), None);
        assert_eq!(c.after(10, B256::repeat_byte(10)).expect("linked").len(), 1);
        // the same header again changes nothing
        c.push(head(10, 10, 9));
        assert_eq!(c.tip(), Some(head(11, 0xb1, 10)));
        // a header that does not link to the tip: the chain starts again from it
        c.push(head(13, 13, 0xcc));
        assert_eq!(c.tip(), Some(head(13, 13, 0xcc)));
        assert_eq!(c.after(10, B256::repeat_byte(10)), None);
        assert_eq!(
            c.after(12, B256::repeat_byte(0xcc)),
            Some(vec![head(13, 13, 0xcc)])
        );
        // a lower header that does not link to what is left below it: likewise
        c.push(head(14, 14, 13));
        c.push(head(14, 0xa4, 0xa3));
        assert_eq!(c.tip(), Some(head(14, 0xa4, 0xa3)));
        assert_eq!(c.after(13, B256::repeat_byte(13)), None);
    }

    #[test]
    fn the_chain_is_bounded() {
        let mut c = PushedChain::default();
        let hash = |n: u64| B256::left_padding_from(&n.to_be_bytes());
        for n in 1..=1000u64 {
            c.push(PushedHead {
                number: n,
                hash: hash(n),
                parent: hash(n - 1),
            });
        }
        assert_eq!(c.heads.len(), PushedChain::CAPACITY);
        assert_eq!(c.after(999, hash(999)).expect("linked").len(), 1);
        assert_eq!(c.after(100, hash(100)), None);
    }

    #[test]
    fn the_feed_answers_only_when_the_push_is_as_new_as_the_probe() {
        let feed = HeadFeed::new();
        // nothing pushed yet (an http-only node's feed): nothing to say
        assert!(!feed.pushed_is_current());
        feed.push_header(head(10, 10, 9));
        feed.push_header(head(11, 11, 10));
        assert_eq!(feed.latest(), 11);
        assert_eq!(
            feed.pushed_after(10, B256::repeat_byte(10))
                .map(|v| v.len()),
            Some(1)
        );
        assert!(feed.pushed_is_current());
        // the probe saw block 12 before the subscription pushed it
        feed.publish(12);
        assert!(!feed.pushed_is_current());
        assert_eq!(feed.pushed_after(10, B256::repeat_byte(10)), None);
        feed.push_header(head(12, 12, 11));
        assert_eq!(
            feed.pushed_after(10, B256::repeat_byte(10))
                .map(|v| v.len()),
            Some(2)
        );
    }
}
