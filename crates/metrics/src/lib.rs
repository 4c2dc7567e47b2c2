//! cresolver-metrics: the node's Prometheus metrics — one registry holding round,
//! worker-call, stage-latency, chain-progress, RPC and transaction series, taking plain
//! labels (it knows no round or store type), so the chain and the transaction manager
//! report without knowing the node — encoded in the text exposition format for `GET /metrics`.
//! Every method takes `&self`, so one [`Metrics`] is shared across tasks in an `Arc`.

pub mod labels;

pub use labels::{
    DonEvent, EquivocationKind, FinalityEvent, LeaderChangeCause, LeaseEvent, ObservationSource,
    RefuseReason, RoundOutcome, RoundState, RpcErrorKind, StopReason, TimedStage,
    TransmissionEvent, TxAttemptKind, TxEventKind, WorkerCallOutcome, WorkerStage,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets_range};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

/// Smallest and largest finite bucket bound of the stage-duration histogram, in seconds.
const BUCKET_MIN_S: f64 = 0.005;
const BUCKET_MAX_S: f64 = 120.0;
const BUCKET_COUNT: u16 = 16;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: RoundOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerCallLabels {
    stage: WorkerStage,
    outcome: WorkerCallOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: TimedStage,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: RoundState,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TxAttemptLabels {
    signer: String,
    kind: TxAttemptKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TxEventLabels {
    signer: String,
    kind: TxEventKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DonLabels {
    event: &'static str,
    detail: &'static str,
}

impl DonLabels {
    fn of(event: DonEvent) -> Self {
        Self {
            event: event.event(),
            detail: event.detail(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignerLabels {
    signer: String,
}

type U64Gauge = Gauge<u64, AtomicU64>;

/// Exponential buckets from 5 ms to 120 s, rounded to three significant digits so the
/// exposition shows readable bounds (`0.0098` rather than `0.009797958971132712`).
fn stage_buckets() -> Vec<f64> {
    exponential_buckets_range(BUCKET_MIN_S, BUCKET_MAX_S, BUCKET_COUNT)
        .map(|b| format!("{b:.2e}").parse().unwrap_or(b))
        .collect()
}

fn new_stage_histogram() -> Histogram {
    Histogram::new(stage_buckets())
}

/// The lease counters of this node (`/health`), read from `cresolver_lease_events_total`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Leases claimed.
    pub claimed: u64,
    /// Claims that took over a lease another node let expire.
    pub takeovers: u64,
    /// Leases lost.
    pub lost: u64,
}

/// The registry and its metric families.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    round: RoundSeries,
    watch: WatchSeries,
    tx: TxSeries,
    rpc: RpcSeries,
    lifecycle: LifecycleSeries,
    don: DonSeries,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    event: LeaseEvent,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FinalityLabels {
    event: FinalityEvent,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointKindLabels {
    endpoint: String,
    kind: RpcErrorKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    stage: RoundState,
    reason: StopReason,
}

/// The series of finished rounds: their outcomes, their worker calls and how long their
/// stages took.
#[derive(Debug)]
struct RoundSeries {
    rounds: Family<OutcomeLabels, Counter>,
    worker_calls: Family<WorkerCallLabels, Counter>,
    stage_duration: Family<StageLabels, Histogram, fn() -> Histogram>,
}

impl RoundSeries {
    /// Registers the round series, with every final outcome at zero.
    fn register(registry: &mut Registry) -> Self {
        let rounds = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "cresolver_rounds",
            "Rounds finished, by final outcome",
            rounds.clone(),
        );
        let worker_calls = Family::<WorkerCallLabels, Counter>::default();
        registry.register(
            "cresolver_worker_calls",
            "Worker calls, by stage and outcome (ok or the failure kind)",
            worker_calls.clone(),
        );
        let stage_duration: Family<StageLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(new_stage_histogram);
        registry.register_with_unit(
            "cresolver_stage_duration",
            "Duration of a round's stages and of whole rounds",
            Unit::Seconds,
            stage_duration.clone(),
        );
        // Expose the common series from the start, so rates and dashboards see zeros
        // rather than missing data.
        for outcome in [
            RoundOutcome::Confirmed,
            RoundOutcome::Failed,
            RoundOutcome::Skipped,
        ] {
            let _ = rounds.get_or_create(&OutcomeLabels { outcome });
        }
        Self {
            rounds,
            worker_calls,
            stage_duration,
        }
    }
}

/// The watcher's progress through the chain and the store's rounds by state.
#[derive(Debug)]
struct WatchSeries {
    last_processed_block: U64Gauge,
    head_lag: U64Gauge,
    rounds_by_state: Family<StateLabels, U64Gauge>,
}

impl WatchSeries {
    /// Registers the watcher's and the store's gauges.
    fn register(registry: &mut Registry) -> Self {
        let last_processed_block = U64Gauge::default();
        registry.register(
            "cresolver_last_processed_block",
            "The last block the watcher has fully processed",
            last_processed_block.clone(),
        );
        let head_lag = U64Gauge::default();
        registry.register(
            "cresolver_head_lag_blocks",
            "How many blocks the watcher is behind the chain head",
            head_lag.clone(),
        );
        let rounds_by_state = Family::<StateLabels, U64Gauge>::default();
        registry.register(
            "cresolver_rounds_by_state",
            "Rounds in the store, by state",
            rounds_by_state.clone(),
        );
        Self {
            last_processed_block,
            head_lag,
            rounds_by_state,
        }
    }
}

/// The transaction manager's series, per signing key.
#[derive(Debug)]
struct TxSeries {
    attempts: Family<TxAttemptLabels, Counter>,
    events: Family<TxEventLabels, Counter>,
    oldest_pending: Family<SignerLabels, U64Gauge>,
    nonce_gap: Family<SignerLabels, U64Gauge>,
}

impl TxSeries {
    /// Registers the transaction series.
    fn register(registry: &mut Registry) -> Self {
        let attempts = Family::<TxAttemptLabels, Counter>::default();
        registry.register(
            "cresolver_tx_attempts",
            "Transactions signed and broadcast, by signing key and kind (first, replacement, rebroadcast)",
            attempts.clone(),
        );
        let events = Family::<TxEventLabels, Counter>::default();
        registry.register(
            "cresolver_tx_events",
            "Transaction outcomes, by signing key and kind (mined, lost: the nonce was used by another transaction, reorged)",
            events.clone(),
        );
        let oldest_pending = Family::<SignerLabels, U64Gauge>::default();
        registry.register_with_unit(
            "cresolver_tx_oldest_pending",
            "Age of the oldest reserved nonce of a signing key that is not yet mined and deep enough",
            Unit::Seconds,
            oldest_pending.clone(),
        );
        let nonce_gap = Family::<SignerLabels, U64Gauge>::default();
        registry.register(
            "cresolver_tx_nonce_gap",
            "Nonces a signing key has reserved beyond the chain's mined transaction count",
            nonce_gap.clone(),
        );
        Self {
            attempts,
            events,
            oldest_pending,
            nonce_gap,
        }
    }
}

/// The chain's series: each RPC endpoint's health and the newest head any of them reported.
#[derive(Debug)]
struct RpcSeries {
    up: Family<EndpointLabels, U64Gauge>,
    head: Family<EndpointLabels, U64Gauge>,
    in_service: Family<EndpointLabels, U64Gauge>,
    errors: Family<EndpointKindLabels, Counter>,
    latency: Family<EndpointLabels, Histogram, fn() -> Histogram>,
    chain_head: U64Gauge,
    head_age: U64Gauge,
}

impl RpcSeries {
    /// Registers the per-endpoint series, then the chain head's.
    fn register(registry: &mut Registry) -> Self {
        let up = Family::<EndpointLabels, U64Gauge>::default();
        registry.register(
            "cresolver_rpc_up",
            "Whether the RPC endpoint answered the last head probe (1) or not (0)",
            up.clone(),
        );
        let head = Family::<EndpointLabels, U64Gauge>::default();
        registry.register(
            "cresolver_rpc_head",
            "The newest head an RPC endpoint reported to its probe",
            head.clone(),
        );
        let in_service = Family::<EndpointLabels, U64Gauge>::default();
        registry.register(
            "cresolver_rpc_in_service",
            "Whether reads and broadcasts use the RPC endpoint now (answers, and within the lag limit of the best head)",
            in_service.clone(),
        );
        let errors = Family::<EndpointKindLabels, Counter>::default();
        registry.register(
            "cresolver_rpc_errors",
            "Failed calls and head probes of an RPC endpoint, by kind (timeout, connect, rate_limited, other)",
            errors.clone(),
        );
        let latency: Family<EndpointLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(new_stage_histogram);
        registry.register_with_unit(
            "cresolver_rpc_latency",
            "Latency of the head probe of an RPC endpoint",
            Unit::Seconds,
            latency.clone(),
        );
        let chain_head = U64Gauge::default();
        registry.register(
            "cresolver_chain_head",
            "The newest head any endpoint reported",
            chain_head.clone(),
        );
        let head_age = U64Gauge::default();
        registry.register_with_unit(
            "cresolver_chain_head_age",
            "Age of the newest head (now minus its timestamp)",
            Unit::Seconds,
            head_age.clone(),
        );
        Self {
            up,
            head,
            in_service,
            errors,
            latency,
            chain_head,
            head_age,
        }
    }
}

/// What happened to rounds on their way to a final resolution: where they stopped, the
/// leases this node holds on them, and the finality watch of confirmed ones.
#[derive(Debug)]
struct LifecycleSeries {
    rounds_stopped: Family<ReasonLabels, Counter>,
    leases_held: U64Gauge,
    lease_events: Family<LeaseLabels, Counter>,
    finality_events: Family<FinalityLabels, Counter>,
}

impl LifecycleSeries {
    /// Registers the lifecycle series, with every lease and finality event at zero.
    fn register(registry: &mut Registry) -> Self {
        let rounds_stopped = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "cresolver_rounds_stopped",
            "Rounds that stopped short of confirmed, by the stage they stopped in and why (failed, skipped, retry)",
            rounds_stopped.clone(),
        );
        let leases_held = U64Gauge::default();
        registry.register(
            "cresolver_leases_held",
            "Rounds this node holds the lease of (drives) now",
            leases_held.clone(),
        );
        let lease_events = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "cresolver_lease_events",
            "Lease events of this node: claimed, takeover (claimed after another node's lease expired), lost (another node took it, or it could not be renewed in time)",
            lease_events.clone(),
        );
        for &event in LeaseEvent::ALL {
            let _ = lease_events.get_or_create(&LeaseLabels { event });
        }
        let finality_events = Family::<FinalityLabels, Counter>::default();
        registry.register(
            "cresolver_finality_events",
            "What the finality watch saw of confirmed resolutions: finalized (their block is final), reorged (their block left the canonical chain before it was final; the round was reopened and its transaction re-sent)",
            finality_events.clone(),
        );
        for &event in FinalityEvent::ALL {
            let _ = finality_events.get_or_create(&FinalityLabels { event });
        }
        Self {
            rounds_stopped,
            leases_held,
            lease_events,
            finality_events,
        }
    }
}

/// A DON member's consensus events.
#[derive(Debug)]
struct DonSeries {
    events: Family<DonLabels, Counter>,
}

impl DonSeries {
    /// Registers the DON's event counter, with its common events at zero.
    fn register(registry: &mut Registry) -> Self {
        let events = Family::<DonLabels, Counter>::default();
        registry.register(
            "cresolver_don_events",
            "A DON member's consensus: observation_received (a member's signed observation, detail own/peer), agreement (a decided set and f+1 signatures on its report), leader_change (a round ended undecided and the next member leads; detail timeout, or equivocation when this member saw the round's leader propose two sets), equivocation_seen (detail proposal/vote: a member sent two different ones for one round; the second is dropped), message_refused (detail: why a peer's message was dropped, e.g. source_rate, member_rate, bad_signature, not_the_leader, invalid_set, bad_commit_certificate, bad_polka_certificate, book_full), polka_taken (detail relayed: a polka another member relayed gave this member 2f+1 prevotes it could not count itself, e.g. it held an equivocating voter's other prevote), transmission (detail: the forwarder's transmission state this member saw or caused)",
            events.clone(),
        );
        for event in [
            DonEvent::ObservationReceived(ObservationSource::Own),
            DonEvent::ObservationReceived(ObservationSource::Peer),
            DonEvent::Agreement,
            DonEvent::LeaderChange(LeaderChangeCause::Timeout),
            DonEvent::LeaderChange(LeaderChangeCause::Equivocation),
            DonEvent::EquivocationSeen(EquivocationKind::Proposal),
            DonEvent::EquivocationSeen(EquivocationKind::Vote),
        ] {
            let _ = events.get_or_create(&DonLabels::of(event));
        }
        Self { events }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every series registered, the common label sets at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let round = RoundSeries::register(&mut registry);
        let watch = WatchSeries::register(&mut registry);
        let tx = TxSeries::register(&mut registry);
        let rpc = RpcSeries::register(&mut registry);
        let lifecycle = LifecycleSeries::register(&mut registry);
        let don = DonSeries::register(&mut registry);
        Self {
            registry,
            round,
            watch,
            tx,
            rpc,
            lifecycle,
            don,
        }
    }

    /// Counts a DON event (see `cresolver_don_events`).
    pub fn don_event(&self, event: DonEvent) {
        self.don.events.get_or_create(&DonLabels::of(event)).inc();
    }

    /// Counts a finality event of a confirmed round.
    pub fn finality_event(&self, event: FinalityEvent) {
        self.lifecycle
            .finality_events
            .get_or_create(&FinalityLabels { event })
            .inc();
    }

    /// Counts a lease event.
    pub fn lease_event(&self, event: LeaseEvent) {
        self.lifecycle
            .lease_events
            .get_or_create(&LeaseLabels { event })
            .inc();
    }

    /// How many rounds this node holds now.
    pub fn set_leases_held(&self, n: u64) {
        self.lifecycle.leases_held.set(n);
    }

    /// The lease counters (`/health`).
    pub fn lease_counts(&self) -> LeaseCounts {
        let count = |event| {
            self.lifecycle
                .lease_events
                .get_or_create(&LeaseLabels { event })
                .get()
        };
        LeaseCounts {
            claimed: count(LeaseEvent::Claimed),
            takeovers: count(LeaseEvent::Takeover),
            lost: count(LeaseEvent::Lost),
        }
    }

    /// Records whether `endpoint` answered its last head probe.
    pub fn rpc_up(&self, endpoint: &str, up: bool) {
        self.rpc
            .up
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.to_string(),
            })
            .set(u64::from(up));
    }

    /// Records the newest head `endpoint` reported to its probe.
    pub fn rpc_head(&self, endpoint: &str, head: u64) {
        self.rpc
            .head
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.to_string(),
            })
            .set(head);
    }

    /// Records whether reads and broadcasts use `endpoint` now.
    pub fn rpc_in_service(&self, endpoint: &str, in_service: bool) {
        self.rpc
            .in_service
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.to_string(),
            })
            .set(u64::from(in_service));
    }

    /// Counts a failed call or head probe of `endpoint`, by its kind.
    pub fn rpc_error(&self, endpoint: &str, kind: RpcErrorKind) {
        self.rpc
            .errors
            .get_or_create(&EndpointKindLabels {
                endpoint: endpoint.to_string(),
                kind,
            })
            .inc();
    }

    /// Records how long a head probe of `endpoint` took, in seconds.
    pub fn rpc_latency(&self, endpoint: &str, secs: f64) {
        self.rpc
            .latency
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.to_string(),
            })
            .observe(secs);
    }

    /// The newest head any endpoint reported (a block number).
    pub fn set_chain_head(&self, n: u64) {
        self.rpc.chain_head.set(n);
    }

    /// The age of the newest head, in seconds: now minus its timestamp.
    pub fn set_head_age(&self, secs: u64) {
        self.rpc.head_age.set(secs);
    }

    /// Counts a round that stopped short of `confirmed`: the `stage` it was in and why.
    pub fn round_stopped(&self, stage: RoundState, reason: StopReason) {
        self.lifecycle
            .rounds_stopped
            .get_or_create(&ReasonLabels { stage, reason })
            .inc();
    }

    /// Counts a signed transaction of `signer`.
    pub fn tx_attempt(&self, signer: &str, kind: TxAttemptKind) {
        self.tx
            .attempts
            .get_or_create(&TxAttemptLabels {
                signer: signer.to_string(),
                kind,
            })
            .inc();
    }

    /// Counts a transaction outcome of `signer`.
    pub fn tx_event(&self, signer: &str, kind: TxEventKind) {
        self.tx
            .events
            .get_or_create(&TxEventLabels {
                signer: signer.to_string(),
                kind,
            })
            .inc();
    }

    /// The signing key's oldest pending nonce age and its nonce gap.
    pub fn set_tx_backlog(&self, signer: &str, oldest_pending_secs: u64, nonce_gap: u64) {
        let l = SignerLabels {
            signer: signer.to_string(),
        };
        self.tx
            .oldest_pending
            .get_or_create(&l)
            .set(oldest_pending_secs);
        self.tx.nonce_gap.get_or_create(&l).set(nonce_gap);
    }

    /// Counts a finished round.
    pub fn round_finished(&self, outcome: RoundOutcome) {
        self.round
            .rounds
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts one worker call of `stage` that ended in `outcome`.
    pub fn worker_call(&self, stage: WorkerStage, outcome: WorkerCallOutcome) {
        self.round
            .worker_calls
            .get_or_create(&WorkerCallLabels { stage, outcome })
            .inc();
    }

    /// Records how long a part of a round (or the whole round) took.
    pub fn observe_stage(&self, stage: TimedStage, seconds: f64) {
        self.round
            .stage_duration
            .get_or_create(&StageLabels { stage })
            .observe(seconds);
    }

    /// The last block the watcher has fully processed.
    pub fn set_last_processed_block(&self, n: u64) {
        self.watch.last_processed_block.set(n);
    }

    /// How many blocks the watcher is behind the chain head.
    pub fn set_head_lag(&self, blocks: u64) {
        self.watch.head_lag.set(blocks);
    }

    /// Sets the rounds-by-state gauge from the store's counts: every state is set, so a
    /// state no round is in any more shows 0.
    pub fn set_rounds_by_state(&self, counts: &[(RoundState, u64)]) {
        for &state in RoundState::ALL {
            let n = counts
                .iter()
                .filter(|(s, _)| *s == state)
                .map(|(_, n)| *n)
                .sum();
            self.watch
                .rounds_by_state
                .get_or_create(&StateLabels { state })
                .set(n);
        }
    }

    /// All metrics in the text exposition format (ending with `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; the encoder only fails on writer errors.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_line(text: &str, line: &str) {
        assert!(
            text.lines().any(|l| l == line),
            "missing line {line:?} in:\n{text}"
        );
    }

    #[test]
    fn encodes_recorded_values() {
        let m = Metrics::new();
        m.round_finished(RoundOutcome::Confirmed);
        m.round_finished(RoundOutcome::Confirmed);
        m.round_finished(RoundOutcome::Failed);
        m.worker_call(WorkerStage::Resolve, WorkerCallOutcome::Schema);
        m.observe_stage(TimedStage::Submit, 0.2);
        m.observe_stage(TimedStage::Submit, 3.0);
        m.set_last_processed_block(12_345);
        m.set_head_lag(3);
        m.set_rounds_by_state(&[(RoundState::Confirmed, 4), (RoundState::Failed, 1)]);
        for outcome in [
            WorkerCallOutcome::Ok,
            WorkerCallOutcome::Ok,
            WorkerCallOutcome::Timeout,
        ] {
            m.worker_call(WorkerStage::Resolve, outcome);
        }
        m.worker_call(WorkerStage::Challenge, WorkerCallOutcome::Ok);
        m.worker_call(WorkerStage::Challenge, WorkerCallOutcome::InvalidJson);

        let text = m.encode();
        has_line(&text, "# TYPE cresolver_rounds counter");
        has_line(&text, r#"cresolver_rounds_total{outcome="confirmed"} 2"#);
        has_line(&text, r#"cresolver_rounds_total{outcome="failed"} 1"#);
        has_line(&text, r#"cresolver_rounds_total{outcome="skipped"} 0"#);
        has_line(
            &text,
            r#"cresolver_worker_calls_total{stage="resolve",outcome="ok"} 2"#,
        );
        has_line(
            &text,
            r#"cresolver_worker_calls_total{stage="resolve",outcome="timeout"} 1"#,
        );
        has_line(
            &text,
            r#"cresolver_worker_calls_total{stage="resolve",outcome="schema"} 1"#,
        );
        has_line(
            &text,
            r#"cresolver_worker_calls_total{stage="challenge",outcome="ok"} 1"#,
        );
        has_line(
            &text,
            r#"cresolver_worker_calls_total{stage="challenge",outcome="invalid_json"} 1"#,
        );
        has_line(&text, "# TYPE cresolver_stage_duration_seconds histogram");
        has_line(
            &text,
            r#"cresolver_stage_duration_seconds_sum{stage="submit"} 3.2"#,
        );
        has_line(
            &text,
            r#"cresolver_stage_duration_seconds_count{stage="submit"} 2"#,
        );
        has_line(
            &text,
            r#"cresolver_stage_duration_seconds_bucket{le="0.005",stage="submit"} 0"#,
        );
        has_line(
            &text,
            r#"cresolver_stage_duration_seconds_bucket{le="120.0",stage="submit"} 2"#,
        );
        has_line(
            &text,
            r#"cresolver_stage_duration_seconds_bucket{le="+Inf",stage="submit"} 2"#,
        );
        has_line(&text, "cresolver_last_processed_block 12345");
        has_line(&text, "cresolver_head_lag_blocks 3");
        has_line(&text, r#"cresolver_rounds_by_state{state="confirmed"} 4"#);
        has_line(&text, r#"cresolver_rounds_by_state{state="failed"} 1"#);
        has_line(&text, r#"cresolver_rounds_by_state{state="requested"} 0"#);
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches(r#"stage="challenge""#).count(), 2);
    }

    #[test]
    fn buckets_span_5ms_to_120s() {
        let b = stage_buckets();
        assert_eq!(b.len(), BUCKET_COUNT as usize);
        assert_eq!(b[0], 0.005);
        assert_eq!(*b.last().unwrap(), 120.0);
        assert!(b.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn rounds_by_state_resets_missing_states() {
        let m = Metrics::new();
        m.set_rounds_by_state(&[(RoundState::Requested, 2)]);
        m.set_rounds_by_state(&[(RoundState::Confirmed, 1)]);
        let text = m.encode();
        has_line(&text, r#"cresolver_rounds_by_state{state="requested"} 0"#);
        has_line(&text, r#"cresolver_rounds_by_state{state="confirmed"} 1"#);
    }
}
