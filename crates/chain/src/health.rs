//! What the node knows of its chain, kept current by a probe of every endpoint on every
//! poll tick (independently of the watcher's scans): which endpoints answer and are in
//! service, the newest head any of them reported and its age, and how far the watcher
//! trails it. `/health`, `/health/ready` and the chain metrics are read from here, so an
//! outage shows as an outage while it lasts, not after the next successful scan.

use crate::heads::HeadFeed;
use crate::pool::{EndpointView, RpcPool};
use cresolver_metrics::Metrics;
use parking_lot::RwLock;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Readiness thresholds.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    /// Blocks below the newest head the watcher is meant to trail (its safe head).
    pub confirmations: u64,
    /// Not ready when the newest head is older (None: not checked, e.g. a dev chain).
    pub max_head_age: Option<Duration>,
    /// Not ready when the watcher trails the safe head by more blocks.
    pub max_lag_blocks: u64,
}

/// The node's view of its chain.
pub struct ChainHealth {
    limits: HealthConfig,
    pool: Arc<RpcPool>,
    feed: HeadFeed,
    last_processed: RwLock<Option<u64>>,
    /// Whether the last probe found no endpoint in service.
    was_down: std::sync::atomic::AtomicBool,
}

/// The verdict of [`ChainHealth::assess`].
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Assessment {
    /// `ok`, `degraded` (serving, but an endpoint is out, or behind or stale) or `down`
    /// (no endpoint answers).
    pub status: &'static str,
    /// Whether the node can do its work (what `/health/ready` answers).
    pub ready: bool,
    /// Why the status is not `ok` or the node not ready, one sentence each.
    pub reasons: Vec<String>,
    /// The newest head any endpoint reported.
    pub head: Option<u64>,
    /// That head's age in seconds (now minus its timestamp).
    pub head_age_s: Option<u64>,
    /// How many blocks the watcher trails the safe head (the head less `confirmations`).
    pub lag_blocks: Option<u64>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The verdict from the endpoints' views and the watcher's position. Pure.
pub fn verdict(
    limits: &HealthConfig,
    views: &[EndpointView],
    last_processed: Option<u64>,
    now: u64,
) -> Assessment {
    let best = views
        .iter()
        .filter(|v| v.head.is_some())
        .max_by_key(|v| v.head);
    let head = best.and_then(|v| v.head);
    let head_age = best
        .and_then(|v| v.head_timestamp)
        .map(|t| now.saturating_sub(t));
    let lag = match (head, last_processed) {
        (Some(h), Some(p)) => Some(h.saturating_sub(limits.confirmations).saturating_sub(p)),
        _ => None,
    };
    let mut reasons = Vec::new();
    let mut status = "ok";
    let mut ready = true;
    let serving = views.iter().any(|v| v.in_service);
    for v in views.iter().filter(|v| !v.in_service) {
        let since = v
            .last_ok
            .map(|t| format!(" (last answer {} s ago)", t.elapsed().as_secs()))
            .unwrap_or_default();
        let why = v.reason.as_deref().unwrap_or("out of service");
        reasons.push(format!(
            "RPC endpoint {} is out of service: {why}{since}",
            v.name
        ));
    }
    if !serving {
        status = "down";
        ready = false;
    } else if views.iter().any(|v| !v.in_service) {
        status = "degraded";
    }
    if let (Some(max), Some(age)) = (limits.max_head_age, head_age)
        && age > max.as_secs()
    {
        if status == "ok" {
            status = "degraded";
        }
        ready = false;
        reasons.push(format!(
            "the newest head is {age} s old (limit {} s)",
            max.as_secs()
        ));
    }
    if let Some(l) = lag
        && l > limits.max_lag_blocks
    {
        if status == "ok" {
            status = "degraded";
        }
        ready = false;
        reasons.push(format!(
            "the watcher is {l} blocks behind the safe head (limit {})",
            limits.max_lag_blocks
        ));
    }
    Assessment {
        status,
        ready,
        reasons,
        head,
        head_age_s: head_age,
        lag_blocks: lag,
    }
}

impl ChainHealth {
    /// The view of `pool`'s endpoints, publishing heads to `feed`; the pool reports its
    /// calls to `metrics` from now on.
    pub fn new(
        limits: HealthConfig,
        pool: Arc<RpcPool>,
        feed: HeadFeed,
        metrics: Arc<Metrics>,
    ) -> Self {
        pool.set_metrics(metrics);
        Self {
            limits,
            pool,
            feed,
            last_processed: RwLock::new(None),
            was_down: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The watcher finished a scan up to `block`.
    pub fn processed(&self, block: u64) {
        let mut p = self.last_processed.write();
        *p = Some(p.map_or(block, |b| b.max(block)));
    }

    fn last_processed(&self) -> Option<u64> {
        *self.last_processed.read()
    }

    /// The endpoints as they stand.
    pub fn endpoints(&self) -> Vec<EndpointView> {
        self.pool.views()
    }

    /// Probes every endpoint (waiting at most `wait` for them) and updates the head feed
    /// and the chain metrics.
    pub async fn probe(&self, metrics: &Arc<Metrics>, wait: Duration) {
        self.pool.probe(metrics, wait).await;
        let a = self.assess();
        let down = a.status == "down";
        if self
            .was_down
            .swap(down, std::sync::atomic::Ordering::Relaxed)
            && !down
        {
            // rounds waiting out a backoff after the outage go now
            self.feed.restored();
        }
        if let Some(h) = a.head {
            metrics.set_chain_head(h);
            self.feed.publish(h);
        }
        if let Some(age) = a.head_age_s {
            metrics.set_head_age(age);
        }
        if let Some(lag) = a.lag_blocks {
            metrics.set_head_lag(lag);
        }
    }

    /// Whether the node can do its work now, and why not.
    pub fn assess(&self) -> Assessment {
        verdict(
            &self.limits,
            &self.pool.views(),
            self.last_processed(),
            unix_now(),
        )
    }

    /// Probes every `every` until `stop` turns true.
    pub async fn run(
        self: Arc<Self>,
        metrics: Arc<Metrics>,
        every: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) {
        loop {
            self.probe(&metrics, every).await;
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.cancelled() => return,
            }
            if stop.is_cancelled() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn limits() -> HealthConfig {
        HealthConfig {
            confirmations: 2,
            max_head_age: Some(Duration::from_secs(60)),
            max_lag_blocks: 10,
        }
    }

    fn view(name: &str, head: Option<u64>, ts: u64, error: Option<&str>) -> EndpointView {
        let mut v = EndpointView {
            name: name.into(),
            head,
            head_timestamp: Some(ts),
            reason: error.map(String::from),
            last_ok: Some(Instant::now()),
            ..Default::default()
        };
        let mut one = [v.clone()];
        crate::pool::judge(&mut one, 5);
        v.in_service = one[0].in_service;
        v.reason = one[0].reason.clone();
        v
    }

    #[test]
    fn verdicts() {
        let now = 1_000_000;
        let never = EndpointView {
            name: "http://rpc.example:8545".into(),
            ..Default::default()
        };
        let a = verdict(&limits(), &[never], None, now);
        assert_eq!((a.status, a.ready), ("down", false), "never answered");

        let ok = view("http://a:1", Some(100), now, None);
        let a = verdict(&limits(), std::slice::from_ref(&ok), Some(98), now);
        assert_eq!((a.status, a.ready, a.lag_blocks), ("ok", true, Some(0)));

        let a = verdict(&limits(), std::slice::from_ref(&ok), Some(50), now);
        assert_eq!((a.status, a.ready), ("degraded", false));
        assert!(a.reasons[0].contains("48 blocks behind"), "{a:?}");

        let stale = view("http://a:1", Some(100), now - 120, None);
        let a = verdict(&limits(), &[stale], Some(98), now);
        assert_eq!((a.status, a.ready), ("degraded", false));
        assert!(a.reasons[0].contains("s old"), "{a:?}");

        let down = view(
            "http://rpc.example:8545",
            Some(100),
            now,
            Some("connection refused"),
        );
        let a = verdict(&limits(), std::slice::from_ref(&down), Some(98), now);
        assert_eq!((a.status, a.ready), ("down", false));
        assert!(
            a.reasons[0].contains("rpc.example") && a.reasons[0].contains("refused"),
            "{a:?}"
        );

        // one of two endpoints out: degraded, still ready, and it says which
        let a = verdict(&limits(), &[down, ok], Some(98), now);
        assert_eq!((a.status, a.ready), ("degraded", true));
        assert!(a.reasons[0].contains("rpc.example"), "{a:?}");
    }
}
