//! A deterministic, seeded simulator of the DON consensus: the pure core
//! (`cresolver_don::consensus::Core`) of every member, driven over an in-memory network
//! and a virtual clock (no tokio, no sockets), with Byzantine members, crashes with torn
//! writes, clock skew, partitions and a global stabilisation time; the invariants are
//! checked after every event (`check.rs`) and liveness at the end (`bound.rs`).
//!
//! Everything a run does comes from its seed (`StdRng::seed_from_u64`), ordered maps and
//! an event queue ordered by (time, sequence number): the same seed is the same run. A
//! failing seed prints one line that replays it with a step trace:
//! `CRESOLVER_SIM_SEED=<seed> cargo test -p cresolver-don --test simulation replay_one_seed -- --nocapture`.
//! `CRESOLVER_SIM_FIRST_SEED=<seed>` starts the seeds elsewhere than 0;
//! `CRESOLVER_SIM_SEEDS=<count>` sets the number of executions of
//! `seeds_hold_the_invariants` (and of the ignored million-seed test);
//! `CRESOLVER_SIM_STRATEGY=<strategy>` draws every Byzantine member with one strategy
//! (with partitions, crashes, and the first honest decider cut off until GST); `CRESOLVER_SIM_ALL_FAILURES=1` prints every failing
//! seed instead of stopping at the first (exploration); `CRESOLVER_SIM_MIXED_SEEDS=<count>`
//! sets the seeds of `a_don_mixed_with_the_previous_release_stays_safe`.
//!
//! Speed: the cost is the observation digests (ABI encoding and keccak, which the core
//! recomputes for every proposal and decision it takes) in the unoptimised build. On 2
//! shared cores, 10,000 executions took 282 s in the plain debug build (35 per second),
//! and 41-71 s (141-242 per second) with `opt-level = 3` for the packages `keccak`,
//! `cresolver-core` and `cresolver-don` (`[profile.dev.package.<name>]` in the root
//! `Cargo.toml`; `keccak` alone: 84 per second, the two crates alone: 82 per second).
//!
//! Modules: `keys.rs` (the cheap signature scheme), `scenario.rs` (the draw of a run),
//! `sim.rs` (clock, queue, network), `honest.rs` (honest members as the host runs them,
//! crashes), `byzantine.rs` (the strategies), `check.rs` (the invariants), `bound.rs` (the
//! liveness bound), `mutations.rs` (the simulator finds each rule the core breaks on
//! purpose).

mod bound;
mod byzantine;
mod check;
mod honest;
mod keys;
mod mutations;
mod scenario;
mod sim;

use cresolver_don::consensus::Mutation;
use parking_lot::Mutex;
use scenario::Bias;
use sim::{Outcome, Sim};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Executions of the test that runs in every `cargo test`.
const DEFAULT_SEEDS: u64 = 10_000;
/// The seed `replay_one_seed` runs without `CRESOLVER_SIM_SEED`.
const FIXED_SEED: u64 = 42;

/// Runs one seed; a panic inside is a violation too.
pub fn run_seed(
    seed: u64,
    mutation: Option<Mutation>,
    bias: Bias,
    trace: bool,
) -> Result<Outcome, String> {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sim = Sim::new(seed, mutation, bias);
        sim.trace = trace;
        sim.run()
    }));
    match run {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(v)) => Err(v.0),
        Err(p) => Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// What many runs measured.
#[derive(Debug, Default)]
pub struct Summary {
    /// Executions run.
    pub runs: u64,
    /// The first failure: seed and violation.
    pub failure: Option<(u64, String)>,
    /// The most rounds past the highest round at GST an honest member decided in.
    pub max_rounds_after_gst: u32,
    /// The most of those rounds beyond f.
    pub max_rounds_over_f: i64,
    /// The longest time after GST to an honest decision, ms.
    pub max_ms_after_gst: u64,
    /// The longest time after GST over the time bound, percent.
    pub max_of_bound_pct: u64,
    /// Events and deliveries, in total.
    pub events: u64,
    /// Honest crashes, in total.
    pub crashes: u64,
}

/// Runs seeds `start..start + count` on `threads` threads; stops at the first failure.
pub fn run_many(
    start: u64,
    count: u64,
    threads: u64,
    mutation: Option<Mutation>,
    bias: Bias,
) -> Summary {
    // exploring: every failing seed printed, none stops the run
    let keep_going = std::env::var("CRESOLVER_SIM_ALL_FAILURES").is_ok();
    let stop = AtomicBool::new(false);
    let next = AtomicU64::new(start);
    let summary = Mutex::new(Summary::default());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= start + count {
                        break;
                    }
                    let r = run_seed(seed, mutation, bias, false);
                    let mut sum = summary.lock();
                    sum.runs += 1;
                    match r {
                        Ok(out) => {
                            let bound = out.time_bound.max(1);
                            sum.max_rounds_after_gst =
                                sum.max_rounds_after_gst.max(out.rounds_after_gst);
                            sum.max_rounds_over_f = sum
                                .max_rounds_over_f
                                .max(i64::from(out.rounds_after_gst) - i64::from(out.f));
                            sum.max_ms_after_gst =
                                sum.max_ms_after_gst.max(out.time_after_gst / 1_000);
                            sum.max_of_bound_pct =
                                sum.max_of_bound_pct.max(out.time_after_gst * 100 / bound);
                            sum.events += out.events;
                            sum.crashes += u64::from(out.crashes);
                        }
                        Err(v) if keep_going => println!("seed {seed}: {v}"),
                        Err(v) => {
                            if sum.failure.as_ref().is_none_or(|(s, _)| seed < *s) {
                                sum.failure = Some((seed, v));
                            }
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    summary.into_inner()
}

/// The draw `CRESOLVER_SIM_STRATEGY=<strategy>` asks for: every Byzantine member (at
/// least one) follows it, with a partition and crashes before GST (for exploring one
/// attack; the default draw otherwise).
fn env_bias() -> Bias {
    let Ok(name) = std::env::var("CRESOLVER_SIM_STRATEGY") else {
        return Bias::default();
    };
    let strategy = scenario::STRATEGIES
        .iter()
        .find(|s| format!("{s:?}") == name)
        .copied();
    assert!(
        strategy.is_some(),
        "CRESOLVER_SIM_STRATEGY: no strategy {name}"
    );
    Bias {
        min_byzantine: 1,
        strategy,
        partition: true,
        crashes: true,
        isolate_decider: true,
        previous_release: false,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs `count` seeds on 2 threads, prints the rate and the measurements, and fails with
/// the one line that replays the first failing seed.
fn run_and_report(count: u64) {
    let started = Instant::now();
    let first = env_u64("CRESOLVER_SIM_FIRST_SEED").unwrap_or(0);
    let sum = run_many(first, count, 2, None, env_bias());
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} executions in {secs:.1} s: {:.0} executions/s; {} events; {} crashes; at most {} rounds (f + {}) and {} ms after GST to a decision ({}% of the time bound)",
        sum.runs,
        sum.runs as f64 / secs,
        sum.events,
        sum.crashes,
        sum.max_rounds_after_gst,
        sum.max_rounds_over_f,
        sum.max_ms_after_gst,
        sum.max_of_bound_pct,
    );
    if let Some((seed, v)) = sum.failure {
        println!("seed {seed}: {v}");
        let strategy = std::env::var("CRESOLVER_SIM_STRATEGY")
            .map(|s| format!("CRESOLVER_SIM_STRATEGY={s} "))
            .unwrap_or_default();
        println!(
            "replay with: {strategy}CRESOLVER_SIM_SEED={seed} cargo test -p cresolver-don --test simulation replay_one_seed -- --nocapture"
        );
        panic!("seed {seed} breaks an invariant: {v}");
    }
}

#[test]
fn seeds_hold_the_invariants() {
    run_and_report(env_u64("CRESOLVER_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS));
}

#[test]
#[ignore = "a million executions: run it on its own (prints executions per second)"]
fn a_million_seeds_hold_the_invariants() {
    run_and_report(env_u64("CRESOLVER_SIM_SEEDS").unwrap_or(1_000_000));
}

/// Seeds beyond the suite's 10,000 that once broke the liveness bound (10 of 60,000
/// explored from 10,000; none broke a safety, validity or bounds invariant): a member
/// locked on a polka that counted an equivocating member's vote, which the other honest
/// members held in its other form and could not verify, because no member relayed the
/// votes it held of others. Polka certificates (`Polka` messages, `consensus/polka.rs`)
/// fixed it; these seeds keep it fixed. Checked when it was built: with the polka sends
/// disabled (and the forger's polkas, which change seed 30291's run) all 10 fail again;
/// with the sends and without the forger's polkas all 10 pass.
const ONCE_MISSED_LIVENESS: [u64; 10] = [
    15722, 24022, 30291, 31301, 37148, 50719, 52382, 57176, 67142, 69547,
];

#[test]
fn seeds_that_once_missed_liveness_now_decide() {
    let failing: Vec<String> = ONCE_MISSED_LIVENESS
        .iter()
        .filter_map(|seed| {
            run_seed(*seed, None, Bias::default(), false)
                .err()
                .map(|v| format!("seed {seed}: {v}"))
        })
        .collect();
    assert!(failing.is_empty(), "{}", failing.join("\n"));
}

/// A DON mid-upgrade: every other honest member runs the release before polka
/// certificates (it sends none and refuses them). Safety, validity and the bounds hold;
/// the liveness bound may be missed as before polka certificates (the fix is complete
/// once every member runs the new release), and the misses are printed.
/// `CRESOLVER_SIM_MIXED_SEEDS` sets the number of seeds (400 by default), from
/// `CRESOLVER_SIM_FIRST_SEED`.
#[test]
fn a_don_mixed_with_the_previous_release_stays_safe() {
    let count = env_u64("CRESOLVER_SIM_MIXED_SEEDS").unwrap_or(400);
    let first = env_u64("CRESOLVER_SIM_FIRST_SEED").unwrap_or(0);
    let bias = Bias {
        previous_release: true,
        ..Bias::default()
    };
    let mut missed = Vec::new();
    for seed in first..first + count {
        match run_seed(seed, None, bias, false) {
            Ok(_) => {}
            Err(v) if v.starts_with("liveness") => missed.push(seed),
            Err(v) => panic!("seed {seed} of a mixed DON: {v}"),
        }
    }
    println!(
        "mixed DONs: {count} seeds, {} missed the liveness bound: {missed:?}",
        missed.len()
    );
}

/// The mutation `CRESOLVER_SIM_MUTATION` names (`replay_one_seed` of a mutation hunt).
fn env_mutation() -> Option<Mutation> {
    let name = std::env::var("CRESOLVER_SIM_MUTATION").ok()?;
    mutations::ALL
        .iter()
        .find(|(m, _)| format!("{m:?}") == name)
        .map(|(m, _)| *m)
}

#[test]
fn replay_one_seed() {
    let seed = env_u64("CRESOLVER_SIM_SEED");
    let trace = seed.is_some();
    let seed = seed.unwrap_or(FIXED_SEED);
    let mutation = env_mutation();
    let bias = mutation.map_or_else(env_bias, mutations::bias);
    match run_seed(seed, mutation, bias, trace) {
        Err(v) if mutation.is_none() => panic!("seed {seed}: {v}"),
        Err(v) => println!("seed {seed} with {mutation:?}: {v}"),
        Ok(out) => println!("seed {seed}: {out:?}"),
    }
}

#[test]
fn one_seed_is_one_run() {
    for seed in [1, 7, 1_004, 12_345] {
        let a = run_seed(seed, None, Bias::default(), false);
        let b = run_seed(seed, None, Bias::default(), false);
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "seed {seed}");
    }
}

#[test]
fn the_cached_set_id_is_the_core_s() {
    let mut sim = Sim::new(3, None, Bias::default());
    let set = sim.sc.observations.clone();
    let id = sim.check.set_id(&set);
    assert_eq!(id, cresolver_don::context::set_id(&set));
    assert_eq!(
        sim.check.set_id(&set[1..]),
        cresolver_don::context::set_id(&set[1..])
    );
}
