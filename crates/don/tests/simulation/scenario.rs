//! One execution drawn from its seed: the DON (n ∈ {4, 7, 10}, f = (n-1)/3), which members
//! are Byzantine and how, the workers and every member's observation (honest ones close to
//! a truth, lying ones extreme), the network (delays, drops, duplicates, a partition, the
//! global stabilisation time GST and the bound Δ after it), the crash rate, and each
//! member's clock (offset and drift) and start time. Everything comes from one
//! `StdRng::seed_from_u64(seed)`: the same seed draws the same execution.

use crate::keys::{Scheme, SimKeys};
use alloy::primitives::{Address, B256, Bytes, keccak256};
use cresolver_core::don::{
    Observation, ObservedAnswer, Position, ReportSpec, WorkerObservation, build_report,
    report_context,
};
use cresolver_core::report::ReportMetadata;
use cresolver_core::{MarketId, QuorumRule, Reputation, RoundKey, TieRule};
use cresolver_don::Job;
use cresolver_don::consensus::{Keys, Mutation, Params};
use cresolver_don::wire::SignedObservation;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// The DON id every run uses.
pub const DON_ID: u32 = 7;
/// The configuration version every run uses.
pub const VERSION: u32 = 3;
/// Rounds a core runs before it stalls: far more than any run needs (a stall of an honest
/// member is a liveness failure here).
pub const MAX_ATTEMPTS: u32 = 1_000;
/// A millisecond in the simulator's time unit (microseconds).
pub const MS: u64 = 1_000;

/// How a Byzantine member misbehaves (each has its own key; see `byzantine.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Sends nothing at all.
    Silent,
    /// Runs an honest core but never sends its observation.
    Withhold,
    /// Runs an honest core with a lying observation (extreme values, flipped positions).
    Liar,
    /// Sends conflicting votes to different members.
    EquivocatingVoter,
    /// As leader, two different proposals to two halves; also proposals for its rounds
    /// ahead.
    EquivocatingProposer,
    /// As leader, a different proposal to each member.
    SplitProposer,
    /// Sends its old messages again, and others' vote bodies signed by itself for other
    /// rounds.
    Replayer,
    /// Sends `Decided` messages for made-up sets with forged or partial certificates.
    Forger,
    /// Sends many random votes, proposals and decisions.
    Flooder,
    /// Votes (and proposes) 50 to 1000 rounds ahead.
    FarAhead,
    /// Proposes in every round, leader or not.
    Usurper,
    /// Precommits nil only; as a later round's leader, proposes another set than a
    /// polka's, naming the polka's round, and votes for it.
    LockBreaker,
}

/// Every strategy.
pub const STRATEGIES: [Strategy; 12] = [
    Strategy::Silent,
    Strategy::Withhold,
    Strategy::Liar,
    Strategy::EquivocatingVoter,
    Strategy::EquivocatingProposer,
    Strategy::SplitProposer,
    Strategy::Replayer,
    Strategy::Forger,
    Strategy::Flooder,
    Strategy::FarAhead,
    Strategy::Usurper,
    Strategy::LockBreaker,
];

/// A member's clock: `global × (1 + drift) + offset`, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// What the clock reads at global time 0.
    pub offset: u64,
    /// Parts per million it runs fast (negative: slow).
    pub drift_ppm: i64,
}

impl Clock {
    /// The member's reading at global time `g`.
    pub fn local(&self, g: u64) -> u64 {
        let g = i128::from(g);
        (i128::from(self.offset) + g + g * i128::from(self.drift_ppm) / 1_000_000) as u64
    }

    /// The first global time at or after `now` when the clock reads at least `at`.
    pub fn global_at(&self, at: u64, now: u64) -> u64 {
        if self.local(now) >= at {
            return now;
        }
        let num = i128::from(at - self.offset.min(at)) * 1_000_000;
        let den = 1_000_000 + i128::from(self.drift_ppm);
        let mut g = ((num + den - 1) / den).max(i128::from(now)) as u64;
        while self.local(g) < at {
            g += 1;
        }
        while g > now && self.local(g - 1) >= at {
            g -= 1;
        }
        g
    }
}

/// The network of a run.
#[derive(Debug, Clone)]
pub struct Net {
    /// Before GST: the shortest and longest ordinary delay.
    pub delay_min: u64,
    /// Before GST: the longest ordinary delay.
    pub delay_max: u64,
    /// Before GST: the chance a message is held 3 to 10 times longer (reordering).
    pub long_p: f64,
    /// Before GST: the chance a message is lost.
    pub drop_p: f64,
    /// The chance a message is delivered twice.
    pub dup_p: f64,
    /// After GST every message arrives within Δ, none is lost.
    pub delta: u64,
    /// A split of the members (side of each) from this time to GST.
    pub partition: Option<(u64, Vec<bool>)>,
}

/// What a mutation hunt biases the draw towards (the normal draw uses the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct Bias {
    /// At least this many Byzantine members (at most f).
    pub min_byzantine: usize,
    /// Every Byzantine member follows this strategy.
    pub strategy: Option<Strategy>,
    /// A partition before GST, always.
    pub partition: bool,
    /// Crashes, always.
    pub crashes: bool,
    /// The first honest member to decide before GST is cut off from the others until GST
    /// (an adversarial schedule: its decision reaches nobody before the next rounds).
    pub isolate_decider: bool,
    /// Every other honest member (odd indices) runs the release before polka
    /// certificates: it sends no `Polka` message and its endpoint refuses them.
    pub previous_release: bool,
}

/// One execution, drawn from its seed.
pub struct Scenario {
    /// The seed.
    pub seed: u64,
    /// Members.
    pub n: usize,
    /// Faults tolerated.
    pub f: usize,
    /// The signature scheme (and the members' addresses).
    pub scheme: Arc<Scheme>,
    /// Each member's strategy, `None` for an honest member.
    pub byz: Vec<Option<Strategy>>,
    /// The execution.
    pub exec: B256,
    /// Its market contract.
    pub market: Address,
    /// Its market id.
    pub market_id: MarketId,
    /// The registered workers.
    pub workers: Vec<Address>,
    /// Each member's own signed observation.
    pub observations: Vec<SignedObservation>,
    /// What the report is built with.
    pub spec: Arc<ReportSpec>,
    /// The honest members' parameters (with the mutation under test, if any).
    pub params: Arc<Params>,
    /// The Byzantine members' inner cores' parameters (never mutated).
    pub byz_params: Arc<Params>,
    /// The network.
    pub net: Net,
    /// The global stabilisation time.
    pub gst: u64,
    /// Cut the first honest decider off until GST.
    pub isolate_decider: bool,
    /// The chance an honest member crashes at an effect batch before GST.
    pub crash_p: f64,
    /// Each member's clock.
    pub clocks: Vec<Clock>,
    /// When each member starts its execution (global time).
    pub starts: Vec<u64>,
}

impl Scenario {
    /// Draws the execution of `seed` (honest members run `mutation`).
    pub fn draw(seed: u64, mutation: Option<Mutation>, bias: Bias) -> (Self, StdRng) {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = *[4usize, 4, 4, 7, 7, 10].choose(&mut rng).unwrap_or(&4);
        let f = (n - 1) / 3;
        let scheme = Arc::new(Scheme::new(seed, n));
        let byz = draw_byzantine(&mut rng, n, f, bias);
        let exec = keccak256([&seed.to_be_bytes()[..], b"exec"].concat());
        let market = Address::repeat_byte(0xaa);
        let market_id = MarketId::from(rng.gen_range(1u64..1_000));
        let workers: Vec<Address> = (0..rng.gen_range(2..=4u8))
            .map(|w| Address::repeat_byte(0xb0 + w))
            .collect();
        let attempt_ms = *[300u64, 500, 800, 1_200].choose(&mut rng).unwrap_or(&500);
        let base = Observation {
            don_id: DON_ID,
            config_version: VERSION,
            execution_id: exec,
            market,
            market_id,
            observer: Address::ZERO,
            timestamp: 1_700_000_000 + rng.gen_range(0..1_000_000),
            workers: Vec::new(),
        };
        let truth = draw_truth(&mut rng, workers.len());
        let miss_p = if rng.gen_bool(0.5) {
            0.0
        } else {
            rng.gen_range(0.0..0.25)
        };
        let spec = Arc::new(draw_spec(&mut rng, exec, market_id, workers.len(), miss_p));
        let observations = (0..n)
            .map(|i| {
                let mut o = base.clone();
                o.observer = scheme.members[i];
                observe(&mut rng, &mut o, &workers, &truth, byz[i], miss_p);
                let signature = scheme.sign(i, &o.digest());
                SignedObservation {
                    observation: o,
                    signature,
                }
            })
            .collect();
        let (honest_params, byz_params) = (
            params(&scheme.members, f, attempt_ms, mutation),
            params(&scheme.members, f, attempt_ms, None),
        );
        let (net, gst) = draw_net(&mut rng, n, attempt_ms, bias);
        let crash_p = if bias.crashes || rng.gen_bool(0.3) {
            rng.gen_range(0.005..0.05)
        } else {
            0.0
        };
        let clocks = (0..n)
            .map(|_| Clock {
                offset: rng.gen_range(0..5_000 * MS),
                drift_ppm: rng.gen_range(-1_000..=1_000),
            })
            .collect();
        let spread = rng.gen_range(0..=150 * MS);
        let starts = (0..n).map(|_| rng.gen_range(0..=spread)).collect();
        let sc = Self {
            seed,
            n,
            f,
            scheme,
            byz,
            exec,
            market,
            market_id,
            workers,
            observations,
            spec,
            params: honest_params,
            byz_params,
            net,
            gst,
            isolate_decider: bias.isolate_decider,
            crash_p,
            clocks,
            starts,
        };
        (sc, rng)
    }

    /// Member `i`'s key.
    pub fn keys(&self, i: usize) -> Arc<dyn Keys> {
        Arc::new(SimKeys {
            scheme: self.scheme.clone(),
            index: i,
        })
    }

    /// Member `i`'s job: its observation and the production report builder.
    pub fn job(&self, i: usize) -> Job {
        let spec = self.spec.clone();
        Job {
            execution_id: self.exec,
            round: RoundKey::new(self.market, self.market_id),
            observation: self.observations[i].observation.clone(),
            workers: self.workers.clone(),
            build: Arc::new(move |agg| Ok(build_report(&spec, agg)?)),
            on_decided: None,
        }
    }

    /// Whether member `i` is honest.
    pub fn honest(&self, i: usize) -> bool {
        self.byz[i].is_none()
    }

    /// Member `i`'s index from its address.
    pub fn index(&self, a: &Address) -> Option<usize> {
        self.scheme.members.iter().position(|m| m == a)
    }

    /// One line describing the draw (for a replay's trace).
    pub fn describe(&self) -> String {
        format!(
            "seed {} n={} f={} byzantine={:?} workers={} attempt={}ms gst={}ms delta={}ms drop={:.2} dup={:.2} partition={} crash_p={:.3} mutation={:?}",
            self.seed,
            self.n,
            self.f,
            self.byz
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.map(|s| (i, s)))
                .collect::<Vec<_>>(),
            self.workers.len(),
            self.params.attempt_timeout_ms,
            self.gst / MS,
            self.net.delta / MS,
            self.net.drop_p,
            self.net.dup_p,
            self.net.partition.is_some(),
            self.crash_p,
            self.params.mutation,
        )
    }
}

/// What the report is built with: the workflow's quorum and tie rules, reputations.
fn draw_spec(
    rng: &mut StdRng,
    exec: B256,
    market_id: MarketId,
    workers: usize,
    miss_p: f64,
) -> ReportSpec {
    ReportSpec {
        market_id,
        execution_id: exec,
        don_id: DON_ID,
        config_version: VERSION,
        // a Majority rule only when honest members see every answer (else an honest
        // set might make no report: no liveness to expect)
        quorum: if miss_p == 0.0 && rng.gen_bool(0.3) {
            QuorumRule::Majority
        } else {
            QuorumRule::Fixed(1)
        },
        tie: if rng.gen_bool(0.5) {
            TieRule::Yes
        } else {
            TieRule::No
        },
        reputations: (0..workers)
            .map(|_| Reputation {
                res_quality: f64::from(rng.gen_range(0u8..=100)),
                src_quality: f64::from(rng.gen_range(0u8..=100)),
                analysis_depth: f64::from(rng.gen_range(0u8..=100)),
                count: rng.gen_range(0..3),
            })
            .collect(),
        metadata: ReportMetadata::new(
            B256::repeat_byte(1),
            "cresolver",
            Address::repeat_byte(2),
            [0, 1],
        ),
    }
}

/// A member's observation: honest (close to the truth) or lying.
fn observe(
    rng: &mut StdRng,
    o: &mut Observation,
    workers: &[Address],
    truth: &[ObservedAnswer],
    strategy: Option<Strategy>,
    miss_p: f64,
) {
    o.timestamp += rng.gen_range(0..10);
    o.workers = workers
        .iter()
        .zip(truth)
        .enumerate()
        .map(|(w, (a, t))| match strategy {
            Some(Strategy::Liar) => lie(rng, *a, t),
            _ => honest(rng, *a, t, w, miss_p),
        })
        .collect();
    if strategy == Some(Strategy::Liar) {
        o.timestamp = if rng.gen_bool(0.5) { 0 } else { u32::MAX };
    }
}

/// The parameters every core of a run shares.
fn params(
    members: &[Address],
    f: usize,
    attempt_ms: u64,
    mutation: Option<Mutation>,
) -> Arc<Params> {
    Arc::new(Params {
        don_id: DON_ID,
        config_version: VERSION,
        f,
        members: members.to_vec(),
        context: Bytes::copy_from_slice(&report_context(DON_ID, VERSION, f as u8, members)),
        attempt_timeout_ms: attempt_ms,
        observation_grace_ms: attempt_ms / 4,
        max_attempts: MAX_ATTEMPTS,
        mutation,
    })
}

fn draw_byzantine(rng: &mut StdRng, n: usize, f: usize, bias: Bias) -> Vec<Option<Strategy>> {
    let count = rng.gen_range(bias.min_byzantine.min(f)..=f);
    let mut idx: Vec<usize> = (0..n).collect();
    idx.shuffle(rng);
    let mut byz = vec![None; n];
    for i in idx.into_iter().take(count) {
        byz[i] = Some(
            bias.strategy
                .unwrap_or_else(|| *STRATEGIES.choose(rng).unwrap_or(&Strategy::Silent)),
        );
    }
    byz
}

/// The truth per worker: a position, a confidence and 3 scores.
fn draw_truth(rng: &mut StdRng, workers: usize) -> Vec<ObservedAnswer> {
    (0..workers)
        .map(|_| ObservedAnswer {
            position: *[Position::Yes, Position::No, Position::Abstain]
                .choose(rng)
                .unwrap_or(&Position::Yes),
            confidence_ppm: rng.gen_range(100_000..900_000),
            scores: [
                rng.gen_range(20..80),
                rng.gen_range(20..80),
                rng.gen_range(20..80),
            ],
        })
        .collect()
}

/// An honest member's view of one worker: the truth with a little noise; worker 0 is
/// always answered (so that honest sets always make a report), others missed at `miss_p`.
fn honest(
    rng: &mut StdRng,
    address: Address,
    t: &ObservedAnswer,
    w: usize,
    miss_p: f64,
) -> WorkerObservation {
    if w > 0 && rng.gen_bool(miss_p) {
        return WorkerObservation {
            address,
            answer: None,
            failure: Some("timeout".into()),
        };
    }
    let position = if rng.gen_bool(0.9) {
        t.position
    } else {
        *[Position::Yes, Position::No, Position::Abstain]
            .choose(rng)
            .unwrap_or(&t.position)
    };
    let jitter =
        |v: u8, rng: &mut StdRng| (i16::from(v) + rng.gen_range(-5..=5)).clamp(1, 100) as u8;
    WorkerObservation {
        address,
        answer: Some(ObservedAnswer {
            position,
            confidence_ppm: (i64::from(t.confidence_ppm) + rng.gen_range(-20_000..=20_000))
                .clamp(0, 1_000_000) as u32,
            scores: [
                jitter(t.scores[0], rng),
                jitter(t.scores[1], rng),
                jitter(t.scores[2], rng),
            ],
        }),
        failure: None,
    }
}

/// A lying member's view of one worker: extreme values, the position flipped, or no
/// answer at all.
fn lie(rng: &mut StdRng, address: Address, t: &ObservedAnswer) -> WorkerObservation {
    if rng.gen_bool(0.25) {
        return WorkerObservation {
            address,
            answer: None,
            failure: Some("withheld".into()),
        };
    }
    let high = rng.gen_bool(0.5);
    WorkerObservation {
        address,
        answer: Some(ObservedAnswer {
            position: match t.position {
                Position::Yes => Position::No,
                Position::No => Position::Yes,
                Position::Abstain => *[Position::Yes, Position::No]
                    .choose(rng)
                    .unwrap_or(&Position::Yes),
            },
            confidence_ppm: if high { 1_000_000 } else { 0 },
            scores: if high { [100; 3] } else { [0; 3] },
        }),
        failure: None,
    }
}

fn draw_net(rng: &mut StdRng, n: usize, attempt_ms: u64, bias: Bias) -> (Net, u64) {
    let gst = if !bias.partition && rng.gen_bool(0.25) {
        0
    } else {
        rng.gen_range(0..=8 * attempt_ms) * MS
    };
    let delay_min = rng.gen_range(1..=20) * MS;
    let delay_max = delay_min + rng.gen_range(0..=attempt_ms / 2) * MS;
    let partition = (bias.partition || rng.gen_bool(0.3)).then(|| {
        let mut side: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.5)).collect();
        side[rng.gen_range(0..n)] = true;
        side[rng.gen_range(0..n)] = false;
        (rng.gen_range(0..=gst), side)
    });
    let net = Net {
        delay_min,
        delay_max,
        long_p: rng.gen_range(0.0..0.1),
        drop_p: if rng.gen_bool(0.3) {
            0.0
        } else {
            rng.gen_range(0.0..0.3)
        },
        dup_p: rng.gen_range(0.0..0.1),
        delta: rng.gen_range(delay_min / MS..=(delay_min / MS).max(attempt_ms / 4)) * MS,
        partition,
    };
    (net, gst)
}
