//! The worker HTTP client: reqwest underneath, composed with tower per stage —
//! stage timeout → retry on connect errors (inside the stage budget) → a concurrency
//! limit shared by all calls of the engine → a bounded body read. Every failure is a
//! typed [`WorkerFailure`].

use super::protocol::WorkerFailure;
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Semaphore;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::retry::Policy;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use url::Url;

/// One HTTP call: a JSON POST (or a GET when `body` is `None`).
#[derive(Debug, Clone)]
pub struct HttpCall {
    /// Where the call goes.
    pub url: Url,
    /// The JSON body to POST; `None` sends a GET.
    pub body: Option<Bytes>,
    /// Extra headers (e.g. a bearer token for protocols that need one).
    pub headers: Vec<(String, String)>,
}

/// A successful (2xx) reply with its body, read within the bound.
#[derive(Debug, Clone)]
pub struct HttpReply {
    /// The HTTP status code (2xx).
    pub status: u16,
    /// The body, at most the stage's `max_body_bytes`.
    pub body: Bytes,
}

/// Limits of one stage.
#[derive(Debug, Clone, Copy)]
pub struct StageConfig {
    /// Budget of the whole stage call, retries included.
    pub timeout: Duration,
    /// Largest body read; a larger one is cut off at the bound.
    pub max_body_bytes: usize,
    /// Extra attempts after a connect error, inside the budget.
    pub connect_retries: usize,
    /// First backoff between connect retries (doubles each time).
    pub retry_backoff: Duration,
}

/// The raw service at the bottom of the stack: reqwest plus the bounded read.
#[derive(Clone)]
struct ReqwestService {
    client: reqwest::Client,
    max_body: usize,
}

impl Service<HttpCall> for ReqwestService {
    type Response = HttpReply;
    type Error = WorkerFailure;
    type Future = BoxFuture<'static, Result<HttpReply, WorkerFailure>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: HttpCall) -> Self::Future {
        let client = self.client.clone();
        let max = self.max_body;
        Box::pin(async move {
            let mut req = match &call.body {
                Some(b) => client
                    .post(call.url.clone())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(b.clone()),
                None => client.get(call.url.clone()),
            };
            for (k, v) in &call.headers {
                req = req.header(k.as_str(), v.as_str());
            }
            let resp = req.send().await.map_err(classify)?;
            let status = resp.status().as_u16();
            let body = read_bounded(
                resp,
                if (200..300).contains(&status) {
                    max
                } else {
                    512
                },
            )
            .await;
            if !(200..300).contains(&status) {
                let excerpt = match body {
                    Ok(b) | Err((b, _)) => String::from_utf8_lossy(&b).chars().take(200).collect(),
                };
                return Err(WorkerFailure::HttpStatus { status, excerpt });
            }
            match body {
                Ok(body) => Ok(HttpReply { status, body }),
                Err((_, e)) => Err(e),
            }
        })
    }
}

/// Reads at most `max` bytes; a body announcing or streaming more is cut at the bound
/// (the connection is dropped, nothing more is buffered).
async fn read_bounded(
    mut resp: reqwest::Response,
    max: usize,
) -> Result<Bytes, (Bytes, WorkerFailure)> {
    if let Some(len) = resp.content_length()
        && len > max as u64
        && max > 512
    {
        return Err((Bytes::new(), WorkerFailure::Oversize { limit: max }));
    }
    // A body in one chunk (most answers) is kept as it came, without a copy.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    loop {
        let held = first.as_ref().map_or(buf.len(), Bytes::len);
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = max - held;
                if let Some(f) = first.take() {
                    buf.extend_from_slice(&f);
                }
                if chunk.len() > room {
                    buf.extend_from_slice(&chunk[..room]);
                    return Err((buf.freeze(), WorkerFailure::Oversize { limit: max }));
                }
                if held == 0 && buf.is_empty() {
                    first = Some(chunk);
                } else {
                    buf.extend_from_slice(&chunk);
                }
            }
            Ok(None) => return Ok(first.unwrap_or_else(|| buf.freeze())),
            Err(e) => {
                if let Some(f) = first.take() {
                    buf.extend_from_slice(&f);
                }
                return Err((buf.freeze(), classify(e)));
            }
        }
    }
}

fn classify(e: reqwest::Error) -> WorkerFailure {
    if let Some(r @ super::netguard::AddressRefused::NonPublic { .. }) =
        super::netguard::refusal_in(&e)
    {
        return WorkerFailure::Refused {
            detail: r.to_string(),
        };
    }
    let detail = error_chain(&e);
    if e.is_connect() {
        WorkerFailure::Connect { detail }
    } else {
        WorkerFailure::Request { detail }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// Retries connect errors only, a bounded number of times with doubling backoff.
/// The stage timeout sits outside, so retries never extend the budget.
#[derive(Clone)]
struct ConnectRetry {
    left: usize,
    backoff: Duration,
}

impl Policy<HttpCall, HttpReply, WorkerFailure> for ConnectRetry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _req: &mut HttpCall,
        result: &mut Result<HttpReply, WorkerFailure>,
    ) -> Option<Self::Future> {
        match result {
            Err(WorkerFailure::Connect { .. }) if self.left > 0 => {
                self.left -= 1;
                let wait = self.backoff;
                self.backoff = self.backoff.saturating_mul(2);
                Some(tokio::time::sleep(wait))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &HttpCall) -> Option<HttpCall> {
        Some(req.clone())
    }
}

/// The client of one stage (resolve or challenge): cheap to clone, shareable.
#[derive(Clone)]
pub struct StageClient {
    svc: BoxCloneSyncService<HttpCall, HttpReply, WorkerFailure>,
    limits: StageConfig,
}

impl std::fmt::Debug for StageClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageClient")
            .field("limits", &self.limits)
            .finish()
    }
}

impl StageClient {
    /// Builds the stack for one stage. `permits` is shared by every stage of an engine,
    /// so the total number of in-flight worker calls stays bounded.
    pub fn new(http: reqwest::Client, limits: StageConfig, permits: Arc<Semaphore>) -> Self {
        let timeout = limits.timeout;
        let inner = ReqwestService {
            client: http,
            max_body: limits.max_body_bytes,
        };
        let svc = ServiceBuilder::new()
            .map_err(move |e: BoxError| to_failure(e, timeout))
            .timeout(timeout)
            .retry(ConnectRetry {
                left: limits.connect_retries,
                backoff: limits.retry_backoff,
            })
            .layer(GlobalConcurrencyLimitLayer::with_semaphore(permits))
            .service(inner);
        Self {
            svc: BoxCloneSyncService::new(svc),
            limits,
        }
    }

    /// A reqwest client suitable for worker calls: no redirects (a redirect could point
    /// a worker call at an internal address), no proxy from the environment (it would
    /// resolve the worker's host past the address check), a connect timeout, an
    /// identifying agent.
    pub fn default_http() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("cresolver/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    }

    /// The limits this client applies to each call.
    pub fn limits(&self) -> StageConfig {
        self.limits
    }

    /// Sends one call through the stack.
    pub async fn call(&self, call: HttpCall) -> Result<HttpReply, WorkerFailure> {
        self.svc.clone().oneshot(call).await
    }

    /// POSTs `body` as JSON to `url` (serialized straight from its type).
    pub async fn post_json<T: serde::Serialize + ?Sized>(
        &self,
        url: Url,
        body: &T,
    ) -> Result<HttpReply, WorkerFailure> {
        self.post_json_with(url, body, vec![]).await
    }

    /// POSTs a JSON value to `url` with extra headers (see [`bearer_header`]).
    pub async fn post_json_with<T: serde::Serialize + ?Sized>(
        &self,
        url: Url,
        body: &T,
        headers: Vec<(String, String)>,
    ) -> Result<HttpReply, WorkerFailure> {
        let bytes = serde_json::to_vec(body).map_err(|e| WorkerFailure::Request {
            detail: e.to_string(),
        })?;
        self.call(HttpCall {
            url,
            body: Some(Bytes::from(bytes)),
            headers,
        })
        .await
    }
}

/// `Authorization: Bearer <secret>` when a secret is configured. The value is checked
/// here (printable ASCII) so that the HTTP layer never gets to quote a bad one in an
/// error; `what` names the setting in the error, never the secret itself.
pub fn bearer_header(
    secret: Option<&str>,
    what: &str,
) -> Result<Vec<(String, String)>, WorkerFailure> {
    let Some(secret) = secret else {
        return Ok(vec![]);
    };
    if !secret.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(WorkerFailure::Request {
            detail: format!("the configured {what} is not a valid header value"),
        });
    }
    Ok(vec![(
        "authorization".to_string(),
        format!("Bearer {secret}"),
    )])
}

fn to_failure(e: BoxError, timeout: Duration) -> WorkerFailure {
    if e.is::<tower::timeout::error::Elapsed>() {
        return WorkerFailure::Timeout {
            after_ms: timeout.as_millis() as u64,
        };
    }
    match e.downcast::<WorkerFailure>() {
        Ok(f) => *f,
        Err(e) => WorkerFailure::Request {
            detail: e.to_string(),
        },
    }
}

/// Joins a worker's base URL and a protocol path, keeping any path prefix of the base
/// (`https://host/agent1` + `a2a/resolve` → `https://host/agent1/a2a/resolve`).
pub fn join_endpoint(base: &Url, path: &str) -> Result<Url, WorkerFailure> {
    let mut s = base.as_str().trim_end_matches('/').to_string();
    s.push('/');
    s.push_str(path.trim_start_matches('/'));
    Url::parse(&s).map_err(|e| WorkerFailure::Request {
        detail: format!("bad endpoint {base}: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_keeps_prefix() {
        let b = Url::parse("https://host/agent1/").unwrap();
        assert_eq!(
            join_endpoint(&b, "a2a/resolve").unwrap().as_str(),
            "https://host/agent1/a2a/resolve"
        );
        let b = Url::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(
            join_endpoint(&b, "/a2a/challenge").unwrap().as_str(),
            "http://127.0.0.1:9000/a2a/challenge"
        );
    }
}
