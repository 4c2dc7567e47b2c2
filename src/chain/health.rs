//! What the node knows of its chain, kept current by a probe that reads the head on every
//! poll tick (independently of the watcher's scans): whether the endpoint answers, the
//! newest head and its age, and how far the watcher trails it. `/health`,
//! `/health/ready` and the chain metrics are read from here, so an outage shows as an
//! outage while it lasts, not after the next successful scan.

use crate::metrics::Metrics;
use alloy::eips::BlockNumberOrTag;
use alloy::providers::{DynProvider, Provider};
use serde::Serialize;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Readiness thresholds.
#[derive(Debug, Clone)]
pub struct HealthLimits {
    /// The endpoint as logs may show it (no key, no path).
    pub endpoint: String,
    pub confirmations: u64,
    /// Not ready when the newest head is older (None: not checked, e.g. a dev chain).
    pub max_head_age: Option<Duration>,
    /// Not ready when the watcher trails the safe head by more blocks.
    pub max_lag_blocks: u64,
}

#[derive(Debug, Default)]
struct State {
    head: Option<u64>,
    head_timestamp: Option<u64>,
    last_ok: Option<Instant>,
    last_error: Option<String>,
    last_processed: Option<u64>,
}

/// The node's view of its chain.
pub struct ChainHealth {
    limits: HealthLimits,
    state: RwLock<State>,
}

/// The verdict of [`ChainHealth::assess`].
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Assessment {
    /// `ok`, `degraded` (serving, but behind or stale) or `down` (no endpoint answers).
    pub status: &'static str,
    pub reasons: Vec<String>,
    pub head: Option<u64>,
    pub head_age_s: Option<u64>,
    pub lag_blocks: Option<u64>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl ChainHealth {
    pub fn new(limits: HealthLimits) -> Self {
        Self {
            limits,
            state: RwLock::new(State::default()),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The watcher finished a scan up to `block`.
    pub fn processed(&self, block: u64) {
        let mut s = self.write();
        s.last_processed = Some(s.last_processed.map_or(block, |b| b.max(block)));
    }

    /// Blocks between the safe head (head − confirmations) and the watcher's last block.
    pub fn lag(&self) -> Option<u64> {
        let s = self.read();
        let safe = s.head?.saturating_sub(self.limits.confirmations);
        Some(safe.saturating_sub(s.last_processed?))
    }

    pub fn head_age(&self) -> Option<u64> {
        self.read()
            .head_timestamp
            .map(|t| unix_now().saturating_sub(t))
    }

    /// Reads the head once and records the result (and the endpoint's metrics).
    pub async fn probe(&self, provider: &DynProvider, metrics: &Metrics) {
        let started = Instant::now();
        let r = provider.get_block_by_number(BlockNumberOrTag::Latest).await;
        let endpoint = &self.limits.endpoint;
        metrics.rpc_latency(endpoint, started.elapsed().as_secs_f64());
        match r {
            Ok(Some(b)) => {
                let mut s = self.write();
                if s.head.is_none_or(|h| b.header.number >= h) {
                    s.head = Some(b.header.number);
                    s.head_timestamp = Some(b.header.timestamp);
                }
                s.last_ok = Some(Instant::now());
                if s.last_error.take().is_some() {
                    tracing::info!(endpoint = %endpoint, head = b.header.number, "RPC endpoint answers again");
                }
                metrics.rpc_up(endpoint, true);
                metrics.set_chain_head(b.header.number);
            }
            Ok(None) => self.failed(metrics, "the endpoint has no latest block".into()),
            Err(e) => self.failed(metrics, crate::chain::redact_error(&e.to_string())),
        }
        if let Some(age) = self.head_age() {
            metrics.set_head_age(age);
        }
        if let Some(lag) = self.lag() {
            metrics.set_head_lag(lag);
        }
    }

    fn failed(&self, metrics: &Metrics, error: String) {
        let endpoint = &self.limits.endpoint;
        metrics.rpc_up(endpoint, false);
        metrics.rpc_error(endpoint, error_kind(&error));
        let mut s = self.write();
        if s.last_error.is_none() {
            tracing::warn!(endpoint = %endpoint, %error, "RPC endpoint does not answer");
        }
        s.last_error = Some(error);
    }

    /// Whether the node can do its work now, and why not.
    pub fn assess(&self) -> Assessment {
        let mut reasons = Vec::new();
        let mut status = "ok";
        let head_age = self.head_age();
        let lag = self.lag();
        let s = self.read();
        if let Some(e) = &s.last_error {
            status = "down";
            let since = s
                .last_ok
                .map(|t| format!(" (last answer {} s ago)", t.elapsed().as_secs()))
                .unwrap_or_default();
            reasons.push(format!(
                "RPC endpoint {} does not answer: {e}{since}",
                self.limits.endpoint
            ));
        } else if s.last_ok.is_none() {
            status = "down";
            reasons.push(format!(
                "RPC endpoint {} has not answered yet",
                self.limits.endpoint
            ));
        }
        if let (Some(max), Some(age)) = (self.limits.max_head_age, head_age)
            && age > max.as_secs()
        {
            if status == "ok" {
                status = "degraded";
            }
            reasons.push(format!(
                "the newest head is {age} s old (limit {} s)",
                max.as_secs()
            ));
        }
        if let Some(l) = lag
            && l > self.limits.max_lag_blocks
        {
            if status == "ok" {
                status = "degraded";
            }
            reasons.push(format!(
                "the watcher is {l} blocks behind the safe head (limit {})",
                self.limits.max_lag_blocks
            ));
        }
        Assessment {
            status,
            reasons,
            head: s.head,
            head_age_s: head_age,
            lag_blocks: lag,
        }
    }

    /// Probes every `every` until `stop` turns true.
    pub async fn run(
        self: Arc<Self>,
        provider: DynProvider,
        metrics: Arc<Metrics>,
        every: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            self.probe(&provider, &metrics).await;
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}

/// A low-cardinality label for an RPC error.
pub fn error_kind(e: &str) -> &'static str {
    let m = e.to_lowercase();
    if m.contains(
        crate::chain::deadline::DEADLINE_TEXT
            .to_lowercase()
            .as_str(),
    ) {
        "timeout"
    } else if m.contains("connect") || m.contains("refused") || m.contains("reset") {
        "connect"
    } else if m.contains("429") || m.contains("rate") {
        "rate_limited"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(max_age: Option<u64>) -> ChainHealth {
        ChainHealth::new(HealthLimits {
            endpoint: "http://rpc.example:8545".into(),
            confirmations: 2,
            max_head_age: max_age.map(Duration::from_secs),
            max_lag_blocks: 10,
        })
    }

    #[test]
    fn verdicts() {
        let h = health(Some(60));
        assert_eq!(h.assess().status, "down", "never answered");
        {
            let mut s = h.write();
            s.head = Some(100);
            s.head_timestamp = Some(unix_now());
            s.last_ok = Some(Instant::now());
        }
        h.processed(98);
        assert_eq!(h.assess().status, "ok");
        assert_eq!(h.lag(), Some(0));
        h.write().head = Some(200);
        let a = h.assess();
        assert_eq!(a.status, "degraded");
        assert!(a.reasons[0].contains("100 blocks behind"), "{a:?}");
        h.processed(198);
        h.write().head_timestamp = Some(unix_now() - 120);
        let a = h.assess();
        assert_eq!(a.status, "degraded");
        assert!(a.reasons[0].contains("s old"), "{a:?}");
        h.write().last_error = Some("connection refused".into());
        let a = h.assess();
        assert_eq!(a.status, "down");
        assert!(a.reasons[0].contains("rpc.example"), "{a:?}");
    }

    #[test]
    fn error_kinds() {
        assert_eq!(error_kind("RPC request timed out after 10 ms"), "timeout");
        assert_eq!(
            error_kind("error sending request: Connection refused"),
            "connect"
        );
        assert_eq!(error_kind("HTTP error 429"), "rate_limited");
    }
}
