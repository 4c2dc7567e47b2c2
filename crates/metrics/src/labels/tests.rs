//! The exported label values, pinned: every variant of every label enum is recorded and
//! the `/metrics` text must hold exactly the values of these tables (dashboards and
//! alerts read them, so a renamed value must fail here).

use super::*;
use crate::Metrics;
use std::collections::BTreeSet;

/// The values of `label` on the sample lines of `series` (its name as exported, e.g.
/// `cresolver_rounds_total`).
fn values(text: &str, series: &str, label: &str) -> BTreeSet<String> {
    let needle = format!("{label}=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(series)?.strip_prefix('{'))
        .map(|l| {
            let at = l
                .find(&needle)
                .unwrap_or_else(|| panic!("no {label} in {l}"));
            let rest = &l[at + needle.len()..];
            rest[..rest.find('"').expect("closing quote")].to_string()
        })
        .collect()
}

/// Checks that `table` names every variant of `all` once, with its `as_str`, and
/// returns its values.
fn pinned<T: Copy + Eq + std::fmt::Debug>(
    all: &[T],
    table: &[(T, &str)],
    as_str: fn(T) -> &'static str,
) -> BTreeSet<String> {
    assert_eq!(all.len(), table.len(), "the table misses a variant");
    for v in all {
        assert_eq!(
            table.iter().filter(|(t, _)| t == v).count(),
            1,
            "{v:?} not in the table once"
        );
    }
    for (v, s) in table {
        assert_eq!(as_str(*v), *s, "{v:?}");
    }
    table.iter().map(|(_, s)| s.to_string()).collect()
}

fn set(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|s| s.to_string()).collect()
}

#[test]
fn lease_and_finality_events_export_their_values() {
    let m = Metrics::new();
    for &e in LeaseEvent::ALL {
        m.lease_event(e);
    }
    for &e in FinalityEvent::ALL {
        m.finality_event(e);
    }
    let text = m.encode();
    use LeaseEvent as L;
    let want = pinned(
        L::ALL,
        &[
            (L::Claimed, "claimed"),
            (L::Takeover, "takeover"),
            (L::Lost, "lost"),
        ],
        L::as_str,
    );
    assert_eq!(values(&text, "cresolver_lease_events_total", "event"), want);
    use FinalityEvent as F;
    let want = pinned(
        F::ALL,
        &[(F::Finalized, "finalized"), (F::Reorged, "reorged")],
        F::as_str,
    );
    assert_eq!(
        values(&text, "cresolver_finality_events_total", "event"),
        want
    );
    let counts = m.lease_counts();
    assert_eq!(
        counts,
        crate::LeaseCounts {
            claimed: 1,
            takeovers: 1,
            lost: 1
        }
    );
}

#[test]
fn lease_counts_name_each_counter() {
    let m = Metrics::new();
    m.lease_event(LeaseEvent::Claimed);
    m.lease_event(LeaseEvent::Claimed);
    m.lease_event(LeaseEvent::Claimed);
    m.lease_event(LeaseEvent::Takeover);
    m.lease_event(LeaseEvent::Takeover);
    let c = m.lease_counts();
    assert_eq!((c.claimed, c.takeovers, c.lost), (3, 2, 0));
}

#[test]
fn tx_series_export_their_kinds() {
    let m = Metrics::new();
    for &k in TxAttemptKind::ALL {
        m.tx_attempt("0xsigner", k);
    }
    for &k in TxEventKind::ALL {
        m.tx_event("0xsigner", k);
    }
    let text = m.encode();
    use TxAttemptKind as A;
    let want = pinned(
        A::ALL,
        &[
            (A::First, "first"),
            (A::Replacement, "replacement"),
            (A::Rebroadcast, "rebroadcast"),
        ],
        A::as_str,
    );
    assert_eq!(values(&text, "cresolver_tx_attempts_total", "kind"), want);
    use TxEventKind as E;
    let want = pinned(
        E::ALL,
        &[
            (E::Mined, "mined"),
            (E::Lost, "lost"),
            (E::Reorged, "reorged"),
        ],
        E::as_str,
    );
    assert_eq!(values(&text, "cresolver_tx_events_total", "kind"), want);
    assert_eq!(
        values(&text, "cresolver_tx_events_total", "signer"),
        set(&["0xsigner"])
    );
}

#[test]
fn round_series_export_their_states_outcomes_and_reasons() {
    let m = Metrics::new();
    let counts: Vec<_> = RoundState::ALL.iter().map(|&s| (s, 1)).collect();
    m.set_rounds_by_state(&counts);
    for &o in RoundOutcome::ALL {
        m.round_finished(o);
    }
    for &s in RoundState::ALL {
        for &r in StopReason::ALL {
            m.round_stopped(s, r);
        }
    }
    let text = m.encode();
    use RoundState as S;
    let want = pinned(
        S::ALL,
        &[
            (S::Requested, "requested"),
            (S::Discovered, "discovered"),
            (S::Answered, "answered"),
            (S::Challenged, "challenged"),
            (S::Evaluated, "evaluated"),
            (S::Submitted, "submitted"),
            (S::Confirmed, "confirmed"),
            (S::Finalized, "finalized"),
            (S::Failed, "failed"),
            (S::Skipped, "skipped"),
        ],
        S::as_str,
    );
    assert_eq!(values(&text, "cresolver_rounds_by_state", "state"), want);
    assert_eq!(
        values(&text, "cresolver_rounds_stopped_total", "stage"),
        want
    );
    use RoundOutcome as O;
    let want = pinned(
        O::ALL,
        &[
            (O::Confirmed, "confirmed"),
            (O::Finalized, "finalized"),
            (O::Failed, "failed"),
            (O::Skipped, "skipped"),
        ],
        O::as_str,
    );
    assert_eq!(values(&text, "cresolver_rounds_total", "outcome"), want);
    use StopReason as R;
    let want = pinned(
        R::ALL,
        &[
            (R::Failed, "failed"),
            (R::Skipped, "skipped"),
            (R::Retry, "retry"),
        ],
        R::as_str,
    );
    assert_eq!(
        values(&text, "cresolver_rounds_stopped_total", "reason"),
        want
    );
}

#[test]
fn worker_and_stage_series_export_their_values() {
    let m = Metrics::new();
    for &s in WorkerStage::ALL {
        for &o in WorkerCallOutcome::ALL {
            m.worker_call(s, o);
        }
    }
    for &s in TimedStage::ALL {
        m.observe_stage(s, 1.0);
    }
    let text = m.encode();
    use WorkerStage as W;
    let want = pinned(
        W::ALL,
        &[(W::Resolve, "resolve"), (W::Challenge, "challenge")],
        W::as_str,
    );
    assert_eq!(values(&text, "cresolver_worker_calls_total", "stage"), want);
    use WorkerCallOutcome as C;
    let want = pinned(
        C::ALL,
        &[
            (C::Ok, "ok"),
            (C::Timeout, "timeout"),
            (C::Connect, "connect"),
            (C::Refused, "refused"),
            (C::HttpStatus, "http_status"),
            (C::InvalidJson, "invalid_json"),
            (C::Schema, "schema"),
            (C::Oversize, "oversize"),
            (C::Request, "request"),
            (C::CutAfterQuorum, "cut_after_quorum"),
            (C::NotDiscovered, "not_discovered"),
            (C::Rejected, "rejected"),
            (C::Envelope, "envelope"),
        ],
        C::as_str,
    );
    assert_eq!(
        values(&text, "cresolver_worker_calls_total", "outcome"),
        want
    );
    use TimedStage as T;
    let want = pinned(
        T::ALL,
        &[
            (T::Discover, "discover"),
            (T::ResolveEvaluate, "resolve+evaluate"),
            (T::DonAgreement, "don_agreement"),
            (T::Submit, "submit"),
            (T::Round, "round"),
        ],
        T::as_str,
    );
    assert_eq!(
        values(&text, "cresolver_stage_duration_seconds_count", "stage"),
        want
    );
}

#[test]
fn rpc_errors_export_their_kinds() {
    let m = Metrics::new();
    for &k in RpcErrorKind::ALL {
        m.rpc_error("primary", k);
    }
    let text = m.encode();
    use RpcErrorKind as K;
    let want = pinned(
        K::ALL,
        &[
            (K::Timeout, "timeout"),
            (K::Connect, "connect"),
            (K::RateLimited, "rate_limited"),
            (K::Other, "other"),
        ],
        K::as_str,
    );
    assert_eq!(values(&text, "cresolver_rpc_errors_total", "kind"), want);
}

/// Every DON event as exported: `(event, detail)`.
const DON_EVENTS: &[(&str, &str)] = &[
    ("observation_received", "own"),
    ("observation_received", "peer"),
    ("agreement", "reached"),
    ("leader_change", "timeout"),
    ("leader_change", "equivocation"),
    ("equivocation_seen", "proposal"),
    ("equivocation_seen", "vote"),
    ("message_refused", "source_rate"),
    ("message_refused", "member_rate"),
    ("message_refused", "book_full"),
    ("message_refused", "too_large"),
    ("message_refused", "no_signature"),
    ("message_refused", "bad_signature"),
    ("message_refused", "not_a_member"),
    ("message_refused", "wrong_sender"),
    ("message_refused", "not_a_message"),
    ("message_refused", "other_don"),
    ("message_refused", "unbound_observation"),
    ("message_refused", "invalid_observation"),
    ("message_refused", "duplicate_observer"),
    ("message_refused", "too_many"),
    ("message_refused", "sign"),
    ("message_refused", "duplicate_voter"),
    ("message_refused", "not_the_voter"),
    ("message_refused", "too_few_votes"),
    ("message_refused", "wrong_market"),
    ("message_refused", "unusable_observation"),
    ("message_refused", "not_the_leader"),
    ("message_refused", "round_too_far_ahead"),
    ("message_refused", "bad_pol_round"),
    ("message_refused", "bad_proposal_signature"),
    ("message_refused", "equivocating_leader"),
    ("message_refused", "invalid_set"),
    ("message_refused", "equivocating_voter"),
    ("message_refused", "bad_vote_signature"),
    ("message_refused", "conflicting_decision"),
    ("message_refused", "bad_commit_certificate"),
    ("message_refused", "bad_polka_certificate"),
    ("message_refused", "decided_set_unbuildable"),
    ("message_refused", "signed_another"),
    ("message_refused", "bad_report_signature"),
    ("polka_taken", "relayed"),
    ("vote_guarded", "nil"),
    ("transmission", "sent"),
    ("transmission", "invalid_receiver"),
    ("transmission", "succeeded"),
    ("transmission", "refused"),
    ("transmission", "failed"),
    ("signature_refused", "forwarder_unknown_signer"),
];

#[test]
fn don_events_export_exactly_their_event_and_detail_pairs() {
    let all = DonEvent::all();
    let labels: Vec<(&str, &str)> = all.iter().map(|e| (e.event(), e.detail())).collect();
    assert_eq!(labels, DON_EVENTS, "DonEvent::all() in table order");
    let m = Metrics::new();
    for &e in &all {
        m.don_event(e);
    }
    let text = m.encode();
    let exported: BTreeSet<(String, String)> = text
        .lines()
        .filter(|l| l.starts_with("cresolver_don_events_total{"))
        .map(|l| {
            let event = values(l, "cresolver_don_events_total", "event");
            let detail = values(l, "cresolver_don_events_total", "detail");
            (
                event.into_iter().next().expect("event"),
                detail.into_iter().next().expect("detail"),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = DON_EVENTS
        .iter()
        .map(|(e, d)| (e.to_string(), d.to_string()))
        .collect();
    assert_eq!(exported, want);
    // each recorded once (the pre-registered ones start at zero)
    for (e, d) in DON_EVENTS {
        let line = format!("cresolver_don_events_total{{event=\"{e}\",detail=\"{d}\"}} 1");
        assert!(text.lines().any(|l| l == line), "missing {line}");
    }
}
