//! Several RPC endpoints behind one transport, as the Chainlink node's multi-node client
//! does it: each endpoint has a health state kept by its own head probe (head, its age,
//! errors, latency); reads go to the first endpoint in the configured order that is *in
//! service* (answered its last probe and call, and trails the best head by at most
//! `max_lag_blocks`), and fail over within the same call to the next one when it errors
//! or misses its deadline; a signed transaction is broadcast to every endpoint in
//! service at once. An endpoint taken out is probed until it is back; a websocket
//! endpoint whose connection task has stopped is rebuilt (without a limit on attempts).
//!
//! Reads are sticky to one endpoint (priority order, not per-request racing like alloy's
//! `FallbackLayer`): a scan that asks one endpoint for the head and another for the logs
//! up to it could silently miss logs the second one does not have yet.

use crate::deadline::DeadlineLayer;
use crate::redact_error;
use crate::rpc_error::{Redacted, RpcErrorKind, classify};
use alloy::eips::BlockNumberOrTag;
use alloy::providers::{Provider, ProviderBuilder};
use alloy::rpc::client::RpcClient;
use alloy::rpc::json_rpc::{RequestPacket, ResponsePacket};
use alloy::transports::{BoxTransport, TransportError, TransportErrorKind, TransportFut};
use cresolver_metrics::Metrics;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tower::{Layer, Service};

/// Methods that send a signed transaction: broadcast to every endpoint in service.
const BROADCAST_METHODS: [&str; 2] = ["eth_sendRawTransaction", "eth_sendRawTransactionSync"];

/// How endpoints are judged.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Deadline of one call on one endpoint.
    pub timeout: Duration,
    /// An endpoint trailing the best head by more blocks is not used for reads.
    pub max_lag_blocks: u64,
    /// Reconnection attempts alloy's websocket client makes before its connection task
    /// stops (the pool rebuilds the client after that).
    pub ws_retries: u32,
    /// Pause between those attempts.
    pub ws_retry_interval: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            timeout: crate::DEFAULT_RPC_TIMEOUT,
            max_lag_blocks: 5,
            ws_retries: 10,
            ws_retry_interval: Duration::from_secs(3),
        }
    }
}

/// What is known of one endpoint.
#[derive(Debug, Clone, Default, serde::Serialize, utoipa::ToSchema)]
pub struct EndpointView {
    /// The endpoint as logs may show it (scheme, host, port).
    pub name: String,
    /// Used for reads and broadcasts now.
    pub in_service: bool,
    /// Reads go to this endpoint now (the first one in service).
    pub reads: bool,
    /// The newest head it reported to its probe.
    #[schema(required = true)]
    pub head: Option<u64>,
    /// Timestamp of that head's block.
    #[serde(skip)]
    pub head_timestamp: Option<u64>,
    /// Blocks behind the best head of all endpoints.
    #[schema(required = true)]
    pub behind: Option<u64>,
    /// Why it is out of service (None when in service).
    #[schema(required = true)]
    pub reason: Option<String>,
    /// Last call or probe latency.
    #[schema(required = true)]
    pub latency_ms: Option<u64>,
    /// When it last answered a call or probe.
    #[serde(skip)]
    pub last_ok: Option<Instant>,
}

#[derive(Debug, Default)]
struct EndpointState {
    head: Option<u64>,
    head_timestamp: Option<u64>,
    last_ok: Option<Instant>,
    /// The error since the last success (None: the last call or probe succeeded).
    error: Option<String>,
    /// Consecutive failed probes.
    failed_probes: u32,
    latency: Option<Duration>,
    /// Its chain id was read and matches the pool's.
    chain_checked: bool,
}

struct Endpoint {
    name: String,
    /// The URL as configured: it may hold an API key, so it is never logged.
    url: String,
    ws: bool,
    transport: RwLock<BoxTransport>,
    state: Mutex<EndpointState>,
    /// A probe of this endpoint is running (a slow one is not started twice).
    probing: std::sync::atomic::AtomicBool,
}

impl Endpoint {
    fn transport(&self) -> BoxTransport {
        self.transport.read().clone()
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, EndpointState> {
        self.state.lock()
    }

    fn succeeded(&self, latency: Duration) {
        let mut s = self.state();
        s.last_ok = Some(Instant::now());
        s.latency = Some(latency);
        s.failed_probes = 0;
        if s.error.take().is_some() {
            tracing::info!(endpoint = %self.name, "RPC endpoint answers again");
        }
    }

    fn failed(&self, error: &str) {
        let mut s = self.state();
        if s.error.is_none() {
            tracing::warn!(endpoint = %self.name, error, "RPC endpoint failed: taken out of service until it answers a probe");
        }
        s.error = Some(error.to_string());
    }
}

/// An error's text with its causes (reqwest says only "error sending request"; the
/// cause says "connection refused"), every URL in it redacted.
fn text(e: &dyn std::error::Error) -> String {
    redact_error(&crate::causes(e))
}

/// A failed call as callers see it: a connection-level error (whose text may hold the
/// endpoint's URL, and the key in it) becomes a redacted text with its causes; typed
/// errors (HTTP status, JSON-RPC error, decoding) keep their type for the retry policy.
fn redacted(e: TransportError) -> TransportError {
    match e {
        TransportError::Transport(TransportErrorKind::Custom(_)) => {
            TransportErrorKind::custom(Redacted {
                text: text(&e),
                kind: classify(&e),
            })
        }
        other => other,
    }
}

/// Which endpoints to use for a read, best first: those in service in configured order,
/// then the others by how recently they answered (one of them may be back before its
/// probe says so). Pure, so the policy is tested without a network.
pub fn read_order(views: &[EndpointView]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..views.len()).filter(|&i| views[i].in_service).collect();
    let mut rest: Vec<usize> = (0..views.len()).filter(|&i| !views[i].in_service).collect();
    rest.sort_by_key(|&i| std::cmp::Reverse(views[i].last_ok));
    order.extend(rest);
    order
}

/// Marks each view in or out of service: it must have answered since its last error and
/// trail the best head by at most `max_lag` blocks.
pub fn judge(views: &mut [EndpointView], max_lag: u64) {
    let best = views.iter().filter_map(|v| v.head).max();
    for v in views.iter_mut() {
        v.behind = match (best, v.head) {
            (Some(b), Some(h)) => Some(b.saturating_sub(h)),
            _ => None,
        };
        if v.reason.is_some() {
            v.in_service = false;
        } else if v.head.is_none() {
            v.in_service = false;
            v.reason = Some("has not reported a head yet".into());
        } else if let Some(behind) = v.behind.filter(|&b| b > max_lag) {
            v.in_service = false;
            v.reason = Some(format!(
                "trails the best head by {behind} blocks (limit {max_lag})"
            ));
        } else {
            v.in_service = true;
        }
    }
}

/// The endpoints of one chain.
pub struct RpcPool {
    endpoints: Vec<Endpoint>,
    cfg: PoolConfig,
    /// Index of the endpoint the last read used (to log a switch once).
    current: Mutex<Option<usize>>,
    /// The chain every endpoint must serve (set once the first endpoint answered).
    chain_id: std::sync::OnceLock<u64>,
    /// Where failed calls are counted (the probe counts its own).
    metrics: std::sync::OnceLock<Arc<Metrics>>,
}

impl std::fmt::Debug for RpcPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcPool")
            .field(
                "endpoints",
                &self.endpoints.iter().map(|e| &e.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// An endpoint that could not be opened: why (for the operator), and what kind of
/// failure that was (for the metrics).
struct OpenFailed {
    error: crate::ConnectError,
    kind: RpcErrorKind,
}

impl OpenFailed {
    fn other(why: String) -> Self {
        Self {
            error: crate::ConnectError(why),
            kind: RpcErrorKind::Other,
        }
    }
}

async fn build_transport(url: &str, cfg: &PoolConfig) -> Result<(BoxTransport, bool), OpenFailed> {
    use crate::redact_url;
    let parsed = url::Url::parse(url)
        .map_err(|e| OpenFailed::other(format!("{} is not a URL: {e}", redact_url(url))))?;
    let deadline = DeadlineLayer::new(cfg.timeout);
    match parsed.scheme() {
        "http" | "https" => {
            let local = parsed
                .host_str()
                .is_some_and(|h| h == "localhost" || h == "127.0.0.1" || h == "::1");
            // no redirect followed and no Referer: a URL that carries the provider's
            // key (in its path or query) is not handed to wherever a redirect points
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .referer(false)
                .tcp_nodelay(true)
                .build()
                .map_err(|e| OpenFailed::other(format!("cannot build the RPC client: {e}")))?;
            let http = alloy::transports::http::Http::with_client(client, parsed);
            Ok((BoxTransport::new(deadline.layer(http)), local))
        }
        "ws" | "wss" => {
            use alloy::pubsub::PubSubConnect;
            let connect = crate::ws::NoDelayWs::new(url, cfg.ws_retries, cfg.ws_retry_interval);
            let local = connect.is_local();
            let frontend = tokio::time::timeout(cfg.timeout, connect.into_service())
                .await
                .map_err(|_| OpenFailed {
                    error: crate::ConnectError(format!(
                        "cannot open websocket {}: no answer in {} ms",
                        redact_url(url),
                        cfg.timeout.as_millis()
                    )),
                    kind: RpcErrorKind::Timeout,
                })?
                .map_err(|e| OpenFailed {
                    error: crate::ConnectError(format!(
                        "cannot open websocket {}: {}",
                        redact_url(url),
                        text(&e)
                    )),
                    kind: classify(&e),
                })?;
            Ok((BoxTransport::new(deadline.layer(frontend)), local))
        }
        other => Err(OpenFailed::other(format!(
            "unsupported RPC scheme {other}: use http(s):// or ws(s)://"
        ))),
    }
}

/// A transport that stands for an endpoint that could not be opened yet: every call fails
/// until the prober has built the real one.
#[derive(Clone)]
struct Unopened(Arc<str>);

impl Service<RequestPacket> for Unopened {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: RequestPacket) -> Self::Future {
        let text = self.0.to_string();
        Box::pin(async move {
            Err(TransportErrorKind::custom(Redacted {
                text,
                kind: RpcErrorKind::Connect,
            }))
        })
    }
}

impl RpcPool {
    /// Opens every endpoint. Fails only when none can be opened; an endpoint that cannot
    /// be opened now is kept out of service and retried by [`RpcPool::probe`].
    pub async fn open(
        urls: &[String],
        cfg: PoolConfig,
    ) -> Result<(Arc<Self>, bool), crate::ConnectError> {
        if urls.is_empty() {
            return Err(crate::ConnectError("no RPC endpoint configured".into()));
        }
        let mut endpoints = Vec::with_capacity(urls.len());
        let mut errors = vec![];
        let mut all_local = true;
        for (i, url) in urls.iter().enumerate() {
            let mut name = crate::redact_url(url);
            if urls[..i].iter().any(|u| crate::redact_url(u) == name) {
                name = format!("{name}#{}", i + 1);
            }
            let ws = url.starts_with("ws");
            let (transport, error) = match build_transport(url, &cfg).await {
                Ok((t, local)) => {
                    all_local &= local;
                    (t, None)
                }
                Err(e) if ws => (
                    BoxTransport::new(Unopened(Arc::from(e.error.0.as_str()))),
                    Some(e.error.0),
                ),
                Err(e) => return Err(e.error),
            };
            if let Some(e) = &error {
                errors.push(e.clone());
            }
            endpoints.push(Endpoint {
                name,
                url: url.clone(),
                ws,
                transport: RwLock::new(transport),
                probing: std::sync::atomic::AtomicBool::new(false),
                state: Mutex::new(EndpointState {
                    error,
                    ..Default::default()
                }),
            });
        }
        if errors.len() == endpoints.len() {
            return Err(crate::ConnectError(errors.join("; ")));
        }
        Ok((
            Arc::new(Self {
                endpoints,
                cfg,
                current: Mutex::new(None),
                chain_id: std::sync::OnceLock::new(),
                metrics: std::sync::OnceLock::new(),
            }),
            all_local,
        ))
    }

    /// The pool as an alloy transport (see [`crate::connect_pool`]).
    pub fn transport(self: &Arc<Self>) -> PoolTransport {
        PoolTransport { pool: self.clone() }
    }

    /// The endpoints as health and metrics show them.
    pub fn views(&self) -> Vec<EndpointView> {
        let mut views: Vec<EndpointView> = self
            .endpoints
            .iter()
            .map(|e| {
                let s = e.state();
                EndpointView {
                    name: e.name.clone(),
                    in_service: false,
                    reads: false,
                    head: s.head,
                    head_timestamp: s.head_timestamp,
                    behind: None,
                    reason: s.error.clone(),
                    latency_ms: s.latency.map(|l| l.as_millis() as u64),
                    last_ok: s.last_ok,
                }
            })
            .collect();
        judge(&mut views, self.cfg.max_lag_blocks);
        if let Some(&first) = read_order(&views).first()
            && views[first].in_service
        {
            views[first].reads = true;
        }
        views
    }

    /// The newest head any endpoint reported, with its block timestamp.
    pub fn best_head(&self) -> Option<(u64, Option<u64>)> {
        self.endpoints
            .iter()
            .filter_map(|e| {
                let s = e.state();
                s.head.map(|h| (h, s.head_timestamp))
            })
            .max_by_key(|(h, _)| *h)
    }

    /// Probes every endpoint once, concurrently: reads its head (with the deadline), and
    /// rebuilds a websocket endpoint that failed three probes in a row.
    ///
    /// Each endpoint's probe runs in a task of its own, and this call waits for them at
    /// most `wait`: an endpoint that stalls (or a websocket being rebuilt) holds back
    /// neither the others' probes nor the next round of them; its probe is not started
    /// again while it runs.
    pub async fn probe(self: &Arc<Self>, metrics: &Arc<Metrics>, wait: Duration) {
        use std::sync::atomic::Ordering;
        let mut started = Vec::new();
        for i in 0..self.endpoints.len() {
            if self.endpoints[i].probing.swap(true, Ordering::AcqRel) {
                continue;
            }
            let (pool, metrics) = (self.clone(), metrics.clone());
            started.push(tokio::spawn(async move {
                let e = &pool.endpoints[i];
                pool.probe_one(e, &metrics).await;
                e.probing.store(false, Ordering::Release);
            }));
        }
        let _ = tokio::time::timeout(wait, futures::future::join_all(started)).await;
        let views = self.views();
        for v in &views {
            metrics.rpc_in_service(&v.name, v.in_service);
        }
    }

    async fn probe_one(&self, e: &Endpoint, metrics: &Metrics) {
        if e.ws && e.state().failed_probes >= 3 {
            match build_transport(&e.url, &self.cfg).await {
                Ok((t, _)) => {
                    *e.transport.write() = t;
                    tracing::info!(endpoint = %e.name, "websocket endpoint reconnected with a new client");
                }
                Err(err) => {
                    let mut s = e.state();
                    s.failed_probes = s.failed_probes.saturating_add(1);
                    s.error = Some(err.error.0);
                    metrics.rpc_up(&e.name, false);
                    metrics.rpc_error(&e.name, err.kind);
                    return;
                }
            }
        }
        let provider = ProviderBuilder::new()
            .connect_client(RpcClient::new(e.transport(), false))
            .erased();
        if let Some(&expected) = self.chain_id.get()
            && !e.state().chain_checked
        {
            match provider.get_chain_id().await {
                Ok(id) if id == expected => e.state().chain_checked = true,
                Ok(id) => {
                    let why = format!("serves chain {id}, not {expected}: check the URL");
                    return self.probe_failed(e, metrics, why, RpcErrorKind::Other);
                }
                Err(err) => return self.probe_failed(e, metrics, text(&err), classify(&err)),
            }
        }
        let started = Instant::now();
        let r = provider.get_block_by_number(BlockNumberOrTag::Latest).await;
        let latency = started.elapsed();
        metrics.rpc_latency(&e.name, latency.as_secs_f64());
        match r {
            Ok(Some(b)) => {
                {
                    let mut s = e.state();
                    s.head = Some(b.header.number);
                    s.head_timestamp = Some(b.header.timestamp);
                }
                e.succeeded(latency);
                metrics.rpc_up(&e.name, true);
                metrics.rpc_head(&e.name, b.header.number);
            }
            Ok(None) => self.probe_failed(
                e,
                metrics,
                "the endpoint has no latest block".into(),
                RpcErrorKind::Other,
            ),
            Err(err) => self.probe_failed(e, metrics, text(&err), classify(&err)),
        }
    }

    fn probe_failed(&self, e: &Endpoint, metrics: &Metrics, error: String, kind: RpcErrorKind) {
        metrics.rpc_up(&e.name, false);
        metrics.rpc_error(&e.name, kind);
        e.failed(&error);
        let mut s = e.state();
        s.failed_probes = s.failed_probes.saturating_add(1);
    }

    /// Reads every endpoint's chain id: the first that answers sets the chain, every other
    /// that answers must serve it; from then on the probe keeps an endpoint that serves
    /// another chain (or that could not be asked yet) out. Returns the chain id.
    pub async fn check_chain(self: &Arc<Self>) -> Result<u64, crate::ConnectError> {
        let mut chain: Option<u64> = None;
        let mut last_error = None;
        for e in &self.endpoints {
            let provider = ProviderBuilder::new()
                .connect_client(RpcClient::new(e.transport(), false))
                .erased();
            match provider.get_chain_id().await {
                Ok(id) if chain.is_none_or(|c| c == id) => {
                    chain = Some(id);
                    e.state().chain_checked = true;
                }
                Ok(id) => {
                    return Err(crate::ConnectError(format!(
                        "RPC endpoint {} serves chain {id}, the others chain {}: every endpoint in rpc_urls must serve the same chain",
                        e.name,
                        chain.unwrap_or_default()
                    )));
                }
                Err(err) => last_error = Some(text(&err)),
            }
        }
        let Some(chain_id) = chain else {
            let names: Vec<&str> = self.endpoints.iter().map(|e| e.name.as_str()).collect();
            return Err(crate::ConnectError(format!(
                "no RPC endpoint ({}) answers eth_chainId: {}; is the node running and the URL right?",
                names.join(", "),
                last_error.unwrap_or_default()
            )));
        };
        let _ = self.chain_id.set(chain_id);
        // know every endpoint's head before the first read picks one
        self.probe(&Arc::new(Metrics::new()), self.cfg.timeout)
            .await;
        Ok(chain_id)
    }

    /// Counts failed calls in `metrics` from now on.
    pub fn set_metrics(&self, metrics: Arc<Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// A call to endpoint `i` failed: out of service until its next good probe.
    fn call_failed(&self, i: usize, err: &TransportError) {
        let e = &self.endpoints[i];
        let why = text(err);
        if let Some(m) = self.metrics.get() {
            m.rpc_error(&e.name, classify(err));
        }
        e.failed(&why);
    }

    fn note_current(&self, i: usize) {
        let mut cur = self.current.lock();
        if *cur != Some(i) {
            if let Some(prev) = *cur {
                tracing::warn!(from = %self.endpoints[prev].name, to = %self.endpoints[i].name, "reads switched to another RPC endpoint");
            }
            *cur = Some(i);
        }
    }

    async fn read(self: Arc<Self>, req: RequestPacket) -> Result<ResponsePacket, TransportError> {
        let order = read_order(&self.views());
        let mut last = None;
        for i in order {
            let e = &self.endpoints[i];
            let started = Instant::now();
            match e.transport().call(req.clone()).await {
                Ok(resp) => {
                    e.succeeded(started.elapsed());
                    self.note_current(i);
                    return Ok(resp);
                }
                Err(err) => {
                    self.call_failed(i, &err);
                    last = Some(redacted(err));
                }
            }
        }
        Err(last.unwrap_or_else(|| TransportErrorKind::custom_str("no RPC endpoint configured")))
    }

    /// Sends to every endpoint in service (all, when none is) and answers with the first
    /// acceptance; the other sends run to their end in the background. When none
    /// accepts, the answer of the most preferred endpoint that answered is returned (it
    /// says why: nonce too low, underpriced, insufficient funds).
    async fn broadcast(
        self: Arc<Self>,
        req: RequestPacket,
    ) -> Result<ResponsePacket, TransportError> {
        let views = self.views();
        let mut targets: Vec<usize> = (0..views.len()).filter(|&i| views[i].in_service).collect();
        if targets.is_empty() {
            targets = read_order(&views);
        }
        let mut sends: FuturesUnordered<_> = targets
            .into_iter()
            .map(|i| {
                let pool = self.clone();
                let req = req.clone();
                async move {
                    let e = &pool.endpoints[i];
                    let started = Instant::now();
                    let r = e.transport().call(req).await;
                    match &r {
                        Ok(_) => e.succeeded(started.elapsed()),
                        Err(err) => pool.call_failed(i, err),
                    }
                    (i, r)
                }
            })
            .collect();
        let mut refused: Option<(usize, ResponsePacket)> = None;
        let mut last_err = None;
        while let Some((i, r)) = sends.next().await {
            match r {
                Ok(resp) if resp.is_success() => {
                    if !sends.is_empty() {
                        tokio::spawn(async move { while sends.next().await.is_some() {} });
                    }
                    return Ok(resp);
                }
                Ok(resp) => {
                    if refused.as_ref().is_none_or(|(j, _)| i < *j) {
                        refused = Some((i, resp));
                    }
                }
                Err(err) => last_err = Some(redacted(err)),
            }
        }
        match (refused, last_err) {
            (Some((_, resp)), _) => Ok(resp),
            (None, Some(err)) => Err(err),
            (None, None) => Err(TransportErrorKind::custom_str("no RPC endpoint configured")),
        }
    }
}

/// The pool as an alloy transport.
#[derive(Clone)]
pub struct PoolTransport {
    pool: Arc<RpcPool>,
}

impl Service<RequestPacket> for PoolTransport {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: RequestPacket) -> Self::Future {
        let pool = self.pool.clone();
        if req.method_names().any(|m| BROADCAST_METHODS.contains(&m)) {
            Box::pin(pool.broadcast(req))
        } else {
            Box::pin(pool.read(req))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, head: Option<u64>, error: Option<&str>) -> EndpointView {
        EndpointView {
            name: name.into(),
            head,
            reason: error.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn lagging_and_failing_endpoints_are_out() {
        let mut v = vec![
            view("a", Some(100), Some("connection refused")),
            view("b", Some(94), None),
            view("c", Some(99), None),
            view("d", None, None),
        ];
        judge(&mut v, 5);
        assert!(!v[0].in_service, "failed");
        assert!(!v[1].in_service, "6 behind");
        assert!(v[1].reason.as_deref().unwrap().contains("6 blocks"));
        assert!(v[2].in_service, "1 behind is within 5");
        assert!(!v[3].in_service, "no head yet");
        assert_eq!(read_order(&v)[0], 2);
    }

    #[test]
    fn the_first_endpoint_in_service_is_preferred() {
        let mut v = vec![view("a", Some(100), None), view("b", Some(101), None)];
        judge(&mut v, 5);
        assert_eq!(read_order(&v), vec![0, 1]);
        v[0].reason = Some("timed out".into());
        judge(&mut v, 5);
        assert_eq!(read_order(&v), vec![1, 0], "failed endpoint last");
    }
}
