//! The node's HTTP API (axum): health, Prometheus metrics, the round store read-only
//! (`/rounds`, `/rounds/{market_id}`), the operator's status page ([`super::status`]:
//! `/`, `/events`), and a bearer-token guarded manual trigger (`POST /resolve`) that
//! hands market ids to the node over a channel.
//!
//! Every error is answered as JSON `{"error": "..."}`, unknown routes included.

use super::http::{ApiState, ManualTrigger, error, parse_decimal};
use alloy::primitives::U256;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cresolver_store::Stage;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc::error::TrySendError;

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// `GET /rounds` without `limit`.
pub const DEFAULT_ROUNDS_LIMIT: usize = 100;
/// Largest `limit` honoured by `GET /rounds` (larger values are clamped).
pub const MAX_ROUNDS_LIMIT: usize = 1000;

/// prometheus-client writes OpenMetrics text (`# EOF`, `_total` samples of `counter` families).
const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TRIGGER_DISABLED: &str =
    "the HTTP trigger is disabled: set api.token_env to the name of an env var holding a token";
const BAD_MARKET_ID_PATH: &str = "market_id must be a non-negative integer";

/// The API's routes.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/rounds", get(list_rounds))
        .route("/rounds/{market_id}", get(get_round))
        .route("/resolve", post(resolve))
        .merge(super::status::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown` completes (then drains open requests).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no route for {method} {}", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not allowed on {}", uri.path()),
    )
}

async fn health(State(s): State<ApiState>) -> Response {
    let mut body = serde_json::Map::new();
    {
        let extra = s.health.read().unwrap_or_else(|p| p.into_inner());
        if let Ok(Value::Object(fields)) = serde_json::to_value(&*extra) {
            body.extend(fields);
        }
    }
    // The fixed fields win over extra fields of the same name.
    let (status, reasons) = match &s.chain {
        Some(c) => {
            let a = c.assess();
            body.insert("head".into(), json!(a.head));
            body.insert("head_age_s".into(), json!(a.head_age_s));
            body.insert("lag_blocks".into(), json!(a.lag_blocks));
            body.insert("endpoints".into(), json!(c.endpoints()));
            (a.status, a.reasons)
        }
        None => ("ok", vec![]),
    };
    body.insert("status".into(), json!(status));
    body.insert("reasons".into(), json!(reasons));
    body.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    body.insert("uptime_s".into(), json!(s.started.elapsed().as_secs()));
    axum::Json(Value::Object(body)).into_response()
}

/// The process serves HTTP.
async fn live() -> Response {
    axum::Json(json!({"status": "live"})).into_response()
}

/// The node can do its work: an endpoint answers, the head is fresh, the watcher is
/// within its lag budget, the store takes writes. 503 with the reasons when not.
async fn ready(State(s): State<ApiState>) -> Response {
    let (mut reasons, mut warnings) = (vec![], vec![]);
    if let Some(a) = s.chain.as_ref().map(|c| c.assess()) {
        // an endpoint out of service while another serves is a warning, not unreadiness
        if a.ready {
            warnings = a.reasons;
        } else {
            reasons = a.reasons;
        }
    }
    let store = s.store.clone();
    if let Err(e) = store.probe_write().await {
        reasons.push(format!("the store does not take writes: {e}"));
    }
    let ready = reasons.is_empty();
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        axum::Json(
            json!({"status": if ready { "ready" } else { "not ready" }, "reasons": reasons, "warnings": warnings}),
        ),
    )
        .into_response()
}

async fn metrics(State(s): State<ApiState>) -> Response {
    let store = s.store.clone();
    match store.count_by_state().await {
        Ok(counts) => {
            let counts: Vec<_> = counts.iter().map(|(st, n)| (st.as_str(), *n)).collect();
            s.metrics
                .set_rounds_by_state(&Stage::ALL.map(Stage::as_str), &counts)
        }
        // Still serve the rest: a scrape should not fail because one gauge is stale.
        Err(e) => tracing::warn!(error = %e, "metrics: cannot count rounds by state"),
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(METRICS_CONTENT_TYPE),
        )],
        s.metrics.encode(),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    limit: Option<usize>,
    cursor: Option<i64>,
}

/// Round summaries, newest first, without transcripts (`GET /rounds/{id}` has those);
/// `limit` (default 100, at most 1000) and `cursor` (from the `x-next-cursor` header of
/// the previous page).
async fn list_rounds(
    State(s): State<ApiState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let (limit, cursor) = match query {
        Ok(Query(q)) => (
            q.limit
                .unwrap_or(DEFAULT_ROUNDS_LIMIT)
                .min(MAX_ROUNDS_LIMIT),
            q.cursor,
        ),
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "limit and cursor must be non-negative integers",
            );
        }
    };
    let store = s.store.clone();
    match store.list_summaries(limit, cursor).await {
        Ok((rounds, next)) => {
            let mut resp = axum::Json(rounds).into_response();
            if let Some(n) = next
                && let Ok(v) = HeaderValue::from_str(&n.to_string())
            {
                resp.headers_mut().insert("x-next-cursor", v);
            }
            resp
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn get_round(State(s): State<ApiState>, Path(raw): Path<String>) -> Response {
    let Some(market_id) = parse_decimal(&raw) else {
        return error(StatusCode::BAD_REQUEST, BAD_MARKET_ID_PATH);
    };
    let (store, market) = (s.store.clone(), s.market);
    let round = async {
        let round = store.get(market, market_id).await?;
        let txs = store.tx_history(market, market_id).await?;
        let past = store.past_attempts(market, market_id).await?;
        Ok::<_, cresolver_store::StoreError>(round.map(|r| (r, txs, past)))
    }
    .await;
    match round {
        Ok(Some((round, txs, past))) => {
            let mut v = serde_json::to_value(&round).unwrap_or_default();
            v["transactions"] = serde_json::to_value(
                cresolver_pipeline::transcript::TransactionRecord::of_history(&txs),
            )
            .unwrap_or_default();
            if !past.is_empty() {
                v["previous_attempts"] = serde_json::to_value(&past).unwrap_or_default();
            }
            axum::Json(v).into_response()
        }
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("no round for market {market_id}"),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn resolve(State(s): State<ApiState>, req: Request) -> Response {
    use secrecy::ExposeSecret;
    let Some(expected) = s.token.as_ref().map(|t| t.expose_secret()) else {
        return error(StatusCode::FORBIDDEN, TRIGGER_DISABLED);
    };
    // Authenticate before reading the body.
    match bearer_token(req.headers()) {
        Some(given) if tokens_equal(given, expected) => {}
        given => {
            let message = if given.is_some() {
                "invalid bearer token"
            } else {
                "missing bearer token: send Authorization: Bearer <token>"
            };
            let mut resp = error(StatusCode::UNAUTHORIZED, message);
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return resp;
        }
    }
    let body = match Bytes::from_request(req, &s).await {
        Ok(b) => b,
        Err(rejection) => {
            return error(
                rejection.status(),
                format!("cannot read the request body: {}", rejection.body_text()),
            );
        }
    };
    let market_id = match parse_trigger_body(&body) {
        Ok(id) => id,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    match s.trigger.try_send(ManualTrigger { market_id }) {
        Ok(()) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({ "accepted": true, "market_id": market_id.to_string() })),
        )
            .into_response(),
        Err(TrySendError::Full(_)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many pending triggers: try again later",
        ),
        Err(TrySendError::Closed(_)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the node is not accepting triggers (shutting down?)",
        ),
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Compares tokens in time independent of where they differ (and of their lengths) by
/// comparing their SHA-256 digests with a branch-free fold.
fn tokens_equal(given: &str, expected: &str) -> bool {
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// `{"market_id": N}` with N a JSON integer ≥ 0 or a decimal string.
fn parse_trigger_body(body: &[u8]) -> Result<U256, String> {
    const EXPECTED: &str = r#"expected a JSON object {"market_id": N} with N a non-negative integer or a decimal string"#;
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("invalid JSON ({e}): {EXPECTED}"))?;
    let Some(obj) = value.as_object() else {
        return Err(EXPECTED.to_string());
    };
    let Some(id) = obj.get("market_id") else {
        return Err(format!("missing field market_id: {EXPECTED}"));
    };
    let bad = || format!("market_id must be a non-negative integer or a decimal string, got {id}");
    match id {
        Value::Number(n) => n.as_u64().map(U256::from).ok_or_else(bad),
        Value::String(s) => parse_decimal(s).ok_or_else(bad),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_bodies() {
        assert_eq!(
            parse_trigger_body(br#"{"market_id": 7}"#),
            Ok(U256::from(7))
        );
        assert_eq!(
            parse_trigger_body(br#"{"market_id": "42"}"#),
            Ok(U256::from(42))
        );
        let big = U256::MAX.to_string();
        assert_eq!(
            parse_trigger_body(format!(r#"{{"market_id": "{big}"}}"#).as_bytes()),
            Ok(U256::MAX)
        );
        for bad in [
            r#"{"market_id": -1}"#,
            r#"{"market_id": 1.5}"#,
            r#"{"market_id": "0x10"}"#,
            r#"{"market_id": " 1"}"#,
            r#"{"market_id": ""}"#,
            r#"{"market_id": null}"#,
            r#"{"x": 1}"#,
            r#"[1]"#,
            "not json",
        ] {
            let err = parse_trigger_body(bad.as_bytes()).unwrap_err();
            assert!(err.contains("market_id"), "{bad}: {err}");
        }
    }

    #[test]
    fn bearer_and_compare() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer abc"),
        );
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_token(&h), None);
        assert!(tokens_equal("abc", "abc"));
        assert!(!tokens_equal("abc", "abd"));
        assert!(!tokens_equal("abc", "abcd"));
    }
}
