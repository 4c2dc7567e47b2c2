//! The node's HTTP API (axum): health, Prometheus metrics, the round store read-only
//! (`/rounds`, `/rounds/{market_id}`), the operator's status page ([`super::status`]:
//! `/`, `/events`), and a bearer-token guarded manual trigger (`POST /resolve`) that
//! hands market ids to the node over a channel.
//!
//! Every error is answered as JSON `{"error": "..."}`, unknown routes included.
//!
//! Every route is registered with its OpenAPI description (`utoipa`'s `routes!`): the
//! router and the description served at `GET /openapi.json` ([`openapi`]) are built
//! from the same handlers.

use super::http::{ApiState, ErrorBody, ManualTrigger, error, parse_decimal};
use alloy::primitives::U256;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use cresolver_store::MarketId;
use cresolver_store::RoundKey;
use cresolver_store::{PastAttempt, RoundRecord, RoundSummary};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc::error::TrySendError;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

mod description;
pub use description::{ApiDescription, openapi};

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

/// The API's routes, as an axum router and its OpenAPI description.
fn described() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(health))
        .routes(routes!(live))
        .routes(routes!(ready))
        .routes(routes!(metrics))
        .routes(routes!(list_rounds))
        .routes(routes!(get_round))
        .routes(routes!(resolve))
        .routes(routes!(description::openapi_json))
        .merge(super::status::routes())
}

/// The API's routes.
pub fn router(state: ApiState) -> Router {
    let (router, _) = described().split_for_parts();
    router
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

/// `GET /health`: the chain as the node sees it, the build and the node's own state.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, `degraded` (serving, but an endpoint is out of service, the head is stale
    /// or the watcher is behind) or `down` (no endpoint in service).
    #[schema(value_type = String, pattern = "^(ok|degraded|down)$")]
    pub status: &'static str,
    /// Why the status is not `ok`, one sentence each.
    pub reasons: Vec<String>,
    /// The newest head any endpoint reported (with a chain attached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<u64>,
    /// That head's age, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_age_s: Option<u64>,
    /// How many blocks the watcher trails the safe head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_blocks: Option<u64>,
    /// Every RPC endpoint as the last probe saw it (with a chain attached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<cresolver_chain::pool::EndpointView>>,
    /// The binary's version.
    #[schema(value_type = String)]
    pub version: &'static str,
    /// The git commit the binary was built from (12 hex digits, or `unknown`).
    #[schema(value_type = String)]
    pub commit: &'static str,
    /// Seconds since the API started.
    pub uptime_s: u64,
    /// The chain id the node serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<u64>,
    /// The market contracts the node's workflows watch.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub markets: Vec<String>,
    /// The last block the watcher has fully processed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_processed_block: Option<u64>,
    /// A cluster node's lease counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<super::http::ClusterHealth>,
}

/// The chain's health, the build, and the node's state. Always 200.
#[utoipa::path(get, path = "/health", tag = "health",
    responses((status = OK, description = "The node's health (always 200: `status` says how it is)", body = Health)))]
async fn health(State(s): State<ApiState>) -> Response {
    let node = s.health.read().clone();
    let mut h = Health {
        status: "ok",
        reasons: vec![],
        head: None,
        head_age_s: None,
        lag_blocks: None,
        endpoints: None,
        version: crate::build_info::VERSION,
        commit: crate::build_info::COMMIT,
        uptime_s: s.started.elapsed().as_secs(),
        chain_id: node.chain_id,
        markets: node.markets,
        last_processed_block: node.last_processed_block,
        cluster: node.cluster,
    };
    if let Some(c) = &s.chain {
        let a = c.assess();
        h.status = a.status;
        h.reasons = a.reasons;
        h.head = a.head;
        h.head_age_s = a.head_age_s;
        h.lag_blocks = a.lag_blocks;
        h.endpoints = Some(c.endpoints());
    }
    axum::Json(h).into_response()
}

/// `GET /health/live`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Live {
    /// Always `live`.
    #[schema(value_type = String, pattern = "^live$")]
    pub status: &'static str,
}

/// The process serves HTTP.
#[utoipa::path(get, path = "/health/live", tag = "health",
    responses((status = OK, description = "The process serves HTTP", body = Live)))]
async fn live() -> Response {
    axum::Json(Live { status: "live" }).into_response()
}

/// `GET /health/ready`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Ready {
    /// `ready` or `not ready`.
    #[schema(value_type = String, pattern = "^(ready|not ready)$")]
    pub status: &'static str,
    /// Why the node is not ready (empty when it is).
    pub reasons: Vec<String>,
    /// What is wrong without making the node unready (an endpoint out while another
    /// serves).
    pub warnings: Vec<String>,
}

/// The node can do its work: an endpoint answers, the head is fresh, the watcher is
/// within its lag budget, the store takes writes. 503 with the reasons when not.
#[utoipa::path(get, path = "/health/ready", tag = "health",
    responses(
        (status = OK, description = "The node can do its work", body = Ready),
        (status = SERVICE_UNAVAILABLE, description = "The node cannot do its work: `reasons` says why", body = Ready),
    ))]
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
    let body = Ready {
        status: if ready { "ready" } else { "not ready" },
        reasons,
        warnings,
    };
    (code, axum::Json(body)).into_response()
}

/// The node's metrics, in the OpenMetrics text format.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = OK, description = "Every metric family (see the metrics reference)", content_type = "application/openmetrics-text", body = String)))]
async fn metrics(State(s): State<ApiState>) -> Response {
    let store = s.store.clone();
    match store.count_by_state().await {
        Ok(counts) => {
            let counts: Vec<_> = counts
                .iter()
                .map(|(st, n)| (crate::labels::round_state(*st), *n))
                .collect();
            s.metrics.set_rounds_by_state(&counts)
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

/// `GET /rounds`' query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Rounds per page (default 100, at most 1000: larger values are clamped).
    #[param(minimum = 0)]
    limit: Option<usize>,
    /// Where the page starts: the `x-next-cursor` header of the previous page.
    cursor: Option<i64>,
}

/// Round summaries, newest first, without transcripts (`GET /rounds/{id}` has those);
/// `limit` (default 100, at most 1000) and `cursor` (from the `x-next-cursor` header of
/// the previous page).
#[utoipa::path(get, path = "/rounds", tag = "rounds", params(ListQuery),
    responses(
        (status = OK, description = "Round summaries, newest first (reasons cut to 512 bytes)", body = Vec<RoundSummary>,
            headers(("x-next-cursor" = String, description = "The `cursor` of the next page; absent on the last page"))),
        (status = BAD_REQUEST, description = "`limit` or `cursor` is not a non-negative integer", body = ErrorBody),
        (status = INTERNAL_SERVER_ERROR, description = "The store cannot be read", body = ErrorBody),
    ))]
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

/// `GET /rounds/{market_id}`: the stored round with its transactions.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RoundDetail {
    /// The round as stored (its `outcome` is the transcript).
    #[serde(flatten)]
    pub round: RoundRecord,
    /// Every nonce reserved for the round's transaction, with every signed attempt.
    pub transactions: Vec<cresolver_pipeline::transcript::TransactionRecord>,
    /// The market's earlier attempts, when a new request started another one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub previous_attempts: Vec<PastAttempt>,
}

/// One round of the node's market: its state, reason, transcript and every transaction
/// attempt.
#[utoipa::path(get, path = "/rounds/{market_id}", tag = "rounds",
    params(("market_id" = String, Path, description = "The market id, in decimal", pattern = "^[0-9]+$")),
    responses(
        (status = OK, description = "The round", body = RoundDetail),
        (status = BAD_REQUEST, description = "`market_id` is not a non-negative integer", body = ErrorBody),
        (status = NOT_FOUND, description = "No round for this market of the node's market contract", body = ErrorBody),
        (status = INTERNAL_SERVER_ERROR, description = "The store cannot be read", body = ErrorBody),
    ))]
async fn get_round(State(s): State<ApiState>, Path(raw): Path<String>) -> Response {
    let Some(market_id) = parse_decimal(&raw) else {
        return error(StatusCode::BAD_REQUEST, BAD_MARKET_ID_PATH);
    };
    let (store, market) = (s.store.clone(), s.market);
    let round = async {
        let round = store.get(RoundKey::new(market, market_id)).await?;
        let txs = store.tx_history(RoundKey::new(market, market_id)).await?;
        let past = store
            .past_attempts(RoundKey::new(market, market_id))
            .await?;
        Ok::<_, cresolver_store::StoreError>(round.map(|r| (r, txs, past)))
    }
    .await;
    match round {
        Ok(Some((round, txs, past))) => axum::Json(RoundDetail {
            round,
            transactions: cresolver_pipeline::transcript::TransactionRecord::of_history(&txs),
            previous_attempts: past,
        })
        .into_response(),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("no round for market {market_id}"),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `POST /resolve`'s body: `{"market_id": N}`.
#[derive(Debug, Clone, ToSchema)]
pub struct TriggerRequest {
    /// The market to resolve: a non-negative JSON integer, or a decimal string (for ids
    /// beyond 2^64).
    #[schema(schema_with = market_id_schema)]
    pub market_id: serde_json::Value,
}

/// A non-negative integer, or a string of decimal digits.
fn market_id_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
    let int = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(0));
    let dec = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some("^[0-9]+$"));
    utoipa::openapi::RefOr::T(Schema::OneOf(
        OneOfBuilder::new()
            .item(int)
            .item(dec)
            .description(Some(
                "The market to resolve: a non-negative JSON integer, or a decimal string (for ids beyond 2^64)",
            ))
            .build(),
    ))
}

/// `POST /resolve`'s answer: the request was handed to the node.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TriggerAccepted {
    /// Always `true`.
    pub accepted: bool,
    /// The market id, in decimal.
    #[schema(pattern = "^[0-9]+$")]
    pub market_id: String,
}

/// Asks the node to resolve a market of its market contract (the HTTP trigger; it also
/// resumes a round that waits for a retry, or reopens a failed one). Disabled when no
/// token is set.
#[utoipa::path(post, path = "/resolve", tag = "rounds",
    request_body(content = TriggerRequest, content_type = "application/json"),
    security(("bearer" = [])),
    responses(
        (status = ACCEPTED, description = "Handed to the node, which judges it like a request log", body = TriggerAccepted),
        (status = BAD_REQUEST, description = "The body is not `{\"market_id\": N}`", body = ErrorBody),
        (status = UNAUTHORIZED, description = "No bearer token, or the wrong one", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = FORBIDDEN, description = "The HTTP trigger is disabled (no token configured: `api.token_env` names an unset variable)", body = ErrorBody),
        (status = PAYLOAD_TOO_LARGE, description = "The body is over 16 KiB", body = ErrorBody),
        (status = SERVICE_UNAVAILABLE, description = "Too many pending triggers, or the node is shutting down", body = ErrorBody),
    ))]
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
        Ok(id) => MarketId::from(id),
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    match s.trigger.try_send(ManualTrigger { market_id }) {
        Ok(()) => (
            StatusCode::ACCEPTED,
            axum::Json(TriggerAccepted {
                accepted: true,
                market_id: market_id.to_string(),
            }),
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
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("invalid JSON ({e}): {EXPECTED}"))?;
    let Some(obj) = value.as_object() else {
        return Err(EXPECTED.to_string());
    };
    let Some(id) = obj.get("market_id") else {
        return Err(format!("missing field market_id: {EXPECTED}"));
    };
    let bad = || format!("market_id must be a non-negative integer or a decimal string, got {id}");
    match id {
        serde_json::Value::Number(n) => n.as_u64().map(U256::from).ok_or_else(bad),
        serde_json::Value::String(s) => parse_decimal(s).ok_or_else(bad),
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
