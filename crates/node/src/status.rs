//! The operator's status page, served by the node's HTTP API without a token (read-only):
//! `GET /` (the page; `/?round=<id>` shows one round with its whole transcript), its
//! assets embedded in the binary (no build step, no CDN, works offline), the views it
//! reads (`/status/rounds`, `/status/rounds/{market_id}`) and `GET /events`, a stream of
//! server-sent events carrying the newest page whenever it changes.
//!
//! The page puts every text into the DOM with `textContent` only, and is served with a
//! Content-Security-Policy that allows no inline script: a worker's evidence that holds
//! HTML or script is shown as text and never runs. The views are pure functions of the
//! stored round, its transcript and its transactions ([`round_view`]).

use super::http::{ApiState, ErrorBody};
use alloy::primitives::U256;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cresolver_pipeline::transcript::Transcript;
use cresolver_store::MarketId;
use cresolver_store::RoundKey;
use cresolver_store::{AttemptRecord, NonceRecord, RoundRecord};
use serde::Deserialize;
use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

mod views;
pub use views::{
    ConfirmationView, DonRoundView, DonStatus, FinalityView, OutcomeView, QuorumView, RoundView,
    RoundsPage, TxView, WorkerView,
};

const INDEX_HTML: &str = include_str!("status/index.html");
const STATUS_JS: &str = include_str!("status/status.js");
const STATUS_CSS: &str = include_str!("status/status.css");

/// Rounds per page of the status page.
pub const PAGE_SIZE: usize = 20;
/// How often the event stream looks for changes.
const EVENT_POLL: Duration = Duration::from_millis(500);
/// Longest evidence text a round's view carries per worker.
const EVIDENCE_BYTES: usize = 16 * 1024;

/// No inline script or style, nothing from elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The status page's routes, each described in the OpenAPI description.
pub fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(index))
        .routes(routes!(js))
        .routes(routes!(css))
        .routes(routes!(list))
        .routes(routes!(one))
        .routes(routes!(don_status))
        .routes(routes!(events))
}

/// This DON member's consensus now: for each execution in agreement its round (epoch)
/// and leader, its step, the set it is locked on, the decided set with the precommits
/// that certify it, and its leader changes; the 32 executions decided last, with their
/// set, certificate, signers and transmitter; and what peers' messages hold in its
/// books. `null` on a node that is not a DON member.
#[utoipa::path(get, path = "/status/don", tag = "status page",
    responses((status = OK, description = "This member's consensus, or `null` on a node that is not a DON member", body = Option<DonStatus>)))]
async fn don_status(State(s): State<ApiState>) -> Response {
    let Some(don) = &s.don else {
        return axum::Json(serde_json::Value::Null).into_response();
    };
    let (books, book_bytes) = don.books();
    axum::Json(DonStatus {
        member: don.address(),
        members: don.members().to_vec(),
        f: don.config().f,
        quorum: don.quorum(),
        executions: don.status(),
        decided: don.decided(),
        books,
        book_bytes,
    })
    .into_response()
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

/// The status page.
#[utoipa::path(get, path = "/", tag = "status page",
    responses((status = OK, description = "The status page (`/?round=<id>` shows one round)", content_type = "text/html", body = String)))]
async fn index() -> Response {
    asset(INDEX_HTML, "text/html; charset=utf-8")
}

/// The status page's script.
#[utoipa::path(get, path = "/assets/status.js", tag = "status page",
    responses((status = OK, description = "The status page's script", content_type = "text/javascript", body = String)))]
async fn js() -> Response {
    asset(STATUS_JS, "text/javascript; charset=utf-8")
}

/// The status page's style.
#[utoipa::path(get, path = "/assets/status.css", tag = "status page",
    responses((status = OK, description = "The status page's style", content_type = "text/css", body = String)))]
async fn css() -> Response {
    asset(STATUS_CSS, "text/css; charset=utf-8")
}

fn short(s: String, max: usize) -> String {
    cresolver_store::truncate(s, max)
}

/// What `resolveMarket` pays each worker of `tally`, from the market read at the
/// request block (empty without a tally).
fn payouts(
    tally: Option<&cresolver_core::TallyOutcome>,
    transcript: Option<&Transcript>,
) -> Vec<(alloy::primitives::Address, U256)> {
    match (tally, transcript) {
        (Some(t), Some(tr)) => {
            let stakes: Vec<U256> = t
                .workers
                .iter()
                .map(|w| {
                    tr.market
                        .workers
                        .iter()
                        .find(|m| m.address == w.address)
                        .map_or(U256::ZERO, |m| m.stake)
                })
                .collect();
            t.payouts(tr.market.reward_pool, &stakes)
                .map(|p| t.workers.iter().map(|w| w.address).zip(p).collect())
                .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// Each worker of the resolve stage as the status page shows it: its answer or
/// failure, its scores, weight and payout (its evidence and sources when `detail`).
fn workers_view(
    st: &cresolver_workers::fanout::ResolveStage,
    tally: Option<&cresolver_core::TallyOutcome>,
    payouts: &[(alloy::primitives::Address, U256)],
    detail: bool,
) -> Vec<WorkerView> {
    st.results
        .iter()
        .map(|res| {
            let tallied = tally.and_then(|t| t.workers.iter().find(|w| w.address == res.address));
            let payout = payouts
                .iter()
                .find(|(a, _)| *a == res.address)
                .map(|(_, p)| *p);
            let mut w = WorkerView {
                address: res.address,
                answer: None,
                confidence: None,
                scores: tallied.map(|t| {
                    [
                        t.scores.res_quality,
                        t.scores.src_quality,
                        t.scores.analysis_depth,
                    ]
                }),
                weight: tallied.map(|t| t.weight),
                payout_wei: payout.map(|p| p.to_string()),
                payout_eth: payout.map(alloy::primitives::utils::format_ether),
                failure: None,
                evidence: None,
                sources: None,
            };
            match &res.outcome {
                Ok(a) => {
                    w.answer = Some(if a.abstain {
                        "abstain"
                    } else if a.determination {
                        "YES"
                    } else {
                        "NO"
                    });
                    w.confidence = Some(a.confidence);
                    if detail {
                        w.evidence = Some(short(a.evidence.clone(), EVIDENCE_BYTES));
                        w.sources = Some(a.sources.iter().take(50).cloned().collect());
                    }
                }
                Err(f) => w.failure = Some(short(f.to_string(), 300)),
            }
            w
        })
        .collect()
}

/// A round as the status page shows it: its state and reason, the quorum, each worker's
/// answer, confidence, three scores, weight or failure (with its evidence when
/// `detail`), the resolution, the transactions and the confirmation.
pub fn round_view(
    r: &RoundRecord,
    txs: &[(NonceRecord, Vec<AttemptRecord>)],
    detail: bool,
) -> RoundView {
    let transcript = r
        .outcome
        .as_ref()
        .and_then(|o| Transcript::deserialize(o).ok());
    let stage = transcript.as_ref().and_then(|t| {
        t.outcome
            .as_ref()
            .map(|o| &o.resolve)
            .or(t.resolve.as_ref())
    });
    let tally = transcript
        .as_ref()
        .and_then(|t| t.outcome.as_ref())
        .map(|o| &o.tally);
    let payouts = payouts(tally, transcript.as_ref());
    let workers = stage
        .map(|st| workers_view(st, tally, &payouts, detail))
        .unwrap_or_default();
    let transactions = txs
        .iter()
        .map(|(n, attempts)| TxView {
            nonce: n.nonce,
            state: n.state,
            attempts: attempts.len(),
            hashes: attempts.iter().map(|a| a.tx_hash).collect(),
            mined_tx: n.mined_tx,
            mined_block: n.mined_block,
        })
        .collect();
    RoundView {
        market: r.market,
        market_id: r.market_id.to_string(),
        state: r.state,
        attempt: r.attempt,
        reason: r
            .reason
            .clone()
            .map(|s| short(s, cresolver_store::SUMMARY_REASON_BYTES)),
        request_tx: r.request_tx,
        request_block: r.request_block,
        holder: r.holder.clone(),
        updated_at: r.updated_at,
        quorum: stage.map(|s| QuorumView {
            met: s.quorum_met,
            valid: s.valid,
            required: s.required,
            registered: s.registered,
        }),
        workers,
        resolution: tally.map(|t| t.resolution),
        outcome: outcome_view(r, stage.map(|s| s.quorum_met), tally),
        transactions,
        confirmation: transcript
            .as_ref()
            .and_then(|t| t.confirmation.as_ref())
            .map(|c| ConfirmationView {
                status: c.status,
                tx_hash: c.tx_hash,
                block_number: c.block_number,
            }),
        don: transcript
            .as_ref()
            .and_then(|t| t.don.as_ref())
            .map(don_view),
        finality: transcript
            .as_ref()
            .and_then(|t| t.finality.as_ref())
            .map(|f| FinalityView {
                status: f.status.clone(),
                finalized_block: f.finalized_block,
                source: f.source.clone(),
                reorgs: f.reorgs.len(),
            }),
        driven_by: None,
        question: detail
            .then(|| transcript.as_ref().map(|t| t.question.clone()))
            .flatten(),
        transcript: if detail { r.outcome.clone() } else { None },
    }
}

/// A DON round at a glance: which members' observations made the set (and which were
/// missing), the consensus round and leader that proposed it, the members whose
/// precommits decided it (its commit certificate), the signers and the transmitter.
fn don_view(d: &cresolver_pipeline::transcript::DonRecord) -> DonRoundView {
    DonRoundView {
        members: d.members.len(),
        set: d.set.clone(),
        missing: d
            .members
            .iter()
            .filter(|m| !m.in_set)
            .map(|m| m.member)
            .collect(),
        leader: d.leader,
        attempt: d.attempt,
        round: d.round.unwrap_or(d.attempt),
        precommits: d.precommits.clone(),
        signers: d.signers.clone(),
        transmitter: d.transmitter,
    }
}

/// What the market was resolved to by this round and the vote weight behind it
/// (`pending` while the transaction is not confirmed), or why there is none.
fn outcome_view(
    r: &RoundRecord,
    quorum_met: Option<bool>,
    tally: Option<&cresolver_core::TallyOutcome>,
) -> OutcomeView {
    use cresolver_store::Stage as S;
    let done = matches!(r.state, S::Confirmed | S::Finalized);
    let on_its_way = matches!(r.state, S::Evaluated | S::Submitted);
    match tally {
        Some(t) if done || on_its_way => OutcomeView {
            resolution: Some(if t.resolution { "YES" } else { "NO" }),
            pending: Some(on_its_way),
            weight: Some(t.winning_weight()),
            yes_weight: Some(t.yes_weight),
            no_weight: Some(t.no_weight),
            tie: Some(t.tie),
            none: None,
        },
        _ => {
            let why = match (quorum_met, r.state.is_final()) {
                (Some(false), _) => "quorum not met".to_string(),
                (_, true) => r
                    .reason
                    .clone()
                    .map_or_else(|| r.state.as_str().to_string(), |x| short(x, 200)),
                (_, false) => format!("not yet ({})", r.state.as_str()),
            };
            OutcomeView {
                resolution: None,
                pending: None,
                weight: None,
                yes_weight: None,
                no_weight: None,
                tie: None,
                none: Some(why),
            }
        }
    }
}

/// `GET /status/rounds`' query.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct PageQuery {
    /// The `next` of the previous page.
    cursor: Option<i64>,
}

/// Views of the rounds already built, by (market id, updated_at, holder): a round that
/// did not change is not read and parsed again.
type ViewCache = HashMap<(MarketId, u64, Option<String>), RoundView>;

/// A page of round views (newest first) with the chain's head and the watcher's lag.
async fn page(
    s: &ApiState,
    cursor: Option<i64>,
    cache: &mut ViewCache,
) -> Result<RoundsPage, cresolver_store::StoreError> {
    let (summaries, next) = s.store.list_summaries(PAGE_SIZE, cursor).await?;
    let mut rounds = Vec::with_capacity(summaries.len());
    let mut fresh = ViewCache::new();
    for sum in summaries {
        let key = (sum.market_id, sum.updated_at, sum.holder.clone());
        let mut view = match cache.remove(&key) {
            Some(v) => v,
            None => {
                let Some(rec) = s.store.get(sum.key()).await? else {
                    continue;
                };
                let txs = s.store.tx_history(sum.key()).await?;
                round_view(&rec, &txs, false)
            }
        };
        fresh.insert(key, view.clone());
        view.driven_by = sum.driven_by;
        rounds.push(view);
    }
    *cache = fresh;
    let chain_id = s.health.read().chain_id;
    let (head, lag_blocks, status) = match &s.chain {
        Some(c) => {
            let a = c.assess();
            (a.head, a.lag_blocks, Some(a.status))
        }
        None => (None, None, None),
    };
    Ok(RoundsPage {
        rounds,
        next,
        chain_id,
        head,
        lag_blocks,
        status,
    })
}

/// A page of the status page's round views, newest first.
#[utoipa::path(get, path = "/status/rounds", tag = "status page", params(PageQuery),
    responses(
        (status = OK, description = "A page of round views", body = RoundsPage),
        (status = BAD_REQUEST, description = "`cursor` is not an integer", body = ErrorBody),
        (status = INTERNAL_SERVER_ERROR, description = "The store cannot be read", body = ErrorBody),
    ))]
async fn list(
    State(s): State<ApiState>,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(PageQuery { cursor })) = q else {
        return super::http::error(StatusCode::BAD_REQUEST, "cursor must be an integer");
    };
    match page(&s, cursor, &mut ViewCache::new()).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => super::http::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// One round of the node's market as the status page shows it, with its evidence and
/// its whole transcript.
#[utoipa::path(get, path = "/status/rounds/{market_id}", tag = "status page",
    params(("market_id" = String, Path, description = "The market id, in decimal", pattern = "^[0-9]+$")),
    responses(
        (status = OK, description = "The round's view", body = RoundView),
        (status = BAD_REQUEST, description = "`market_id` is not a non-negative integer", body = ErrorBody),
        (status = NOT_FOUND, description = "No round for this market", body = ErrorBody),
        (status = INTERNAL_SERVER_ERROR, description = "The store cannot be read", body = ErrorBody),
    ))]
async fn one(State(s): State<ApiState>, Path(raw): Path<String>) -> Response {
    let Some(market_id) = super::http::parse_decimal(&raw) else {
        return super::http::error(
            StatusCode::BAD_REQUEST,
            "market_id must be a non-negative integer",
        );
    };
    let found = async {
        let Some(rec) = s.store.get(RoundKey::new(s.market, market_id)).await? else {
            return Ok(None);
        };
        let txs = s
            .store
            .tx_history(RoundKey::new(s.market, market_id))
            .await?;
        Ok::<_, cresolver_store::StoreError>(Some(round_view(&rec, &txs, true)))
    }
    .await;
    match found {
        Ok(Some(v)) => axum::Json(v).into_response(),
        Ok(None) => super::http::error(
            StatusCode::NOT_FOUND,
            format!("no round for market {market_id}"),
        ),
        Err(e) => super::http::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// Server-sent events: `rounds` with the newest page, at once and then whenever it
/// changes (looked at every 500 ms); ends when the node stops.
#[utoipa::path(get, path = "/events", tag = "status page",
    responses((status = OK, description = "A stream of server-sent events named `rounds`, each carrying the newest page of round views (a `RoundsPage` as JSON) whenever it changes, with keep-alive comments; it ends when the node stops", content_type = "text/event-stream", body = String)))]
async fn events(
    State(s): State<ApiState>,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let stream = futures::stream::unfold(
        (s, None::<String>, ViewCache::new(), true),
        |(s, last, mut cache, first)| async move {
            let mut first = first;
            loop {
                if !first {
                    tokio::select! {
                        _ = tokio::time::sleep(EVENT_POLL) => {}
                        _ = s.stop.cancelled() => return None,
                    }
                }
                first = false;
                let Ok(v) = page(&s, None, &mut cache).await else {
                    continue;
                };
                let Ok(text) = serde_json::to_string(&v) else {
                    continue;
                };
                if last.as_deref() != Some(text.as_str()) {
                    let ev = Event::default().event("rounds").data(text.clone());
                    return Some((Ok(ev), (s, Some(text), cache, false)));
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}
