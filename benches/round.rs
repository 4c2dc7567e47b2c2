//! Round benchmark (`cargo bench --bench round`): concurrent fan-out versus the
//! reference workflow's one-worker-at-a-time calls, the engine's per-round overhead, and
//! 1,000 concurrent rounds. Every worker is a real reference agent (axum) on 127.0.0.1,
//! reached over HTTP through the same tower stack the node uses. Prints a Markdown table
//! and writes it to `target/bench-round.md`.

/// The binary's allocator, so the figures are the binary's; it counts allocations only
/// while a count is taken ([`count_allocations`]), so the timed passes pay one relaxed
/// load per allocation.
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// mimalloc, counting allocations (calls and bytes) while [`COUNTING`] is set.
struct CountingAlloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to mimalloc; the counters are side effects.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            ALLOC_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            ALLOC_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            ALLOC_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// Allocations (calls, bytes) per run of `f`, averaged over `runs` runs, in the whole
/// process (the node's side and the agents' alike).
async fn count_allocations<F, Fut>(runs: usize, mut f: F) -> (f64, f64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    ALLOCS.store(0, Ordering::Relaxed);
    ALLOC_BYTES.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    for _ in 0..runs {
        f().await;
    }
    COUNTING.store(false, Ordering::Relaxed);
    let n = runs.max(1) as f64;
    (
        ALLOCS.load(Ordering::Relaxed) as f64 / n,
        ALLOC_BYTES.load(Ordering::Relaxed) as f64 / n,
    )
}

use alloy::primitives::Address;
use cresolver_core::MarketId;
use cresolver_core::tally::Vote;
use cresolver_core::{Reputation, TallyWorker};
use cresolver_devnet::agent::{AgentBehaviour, DeterminationMode};
use cresolver_evaluate::{EvalInput, EvalWorker, Evaluator, RubricEvaluator};
use cresolver_pipeline::round::{Engine, RoundInput, Stage};
use cresolver_pipeline::workflow::Workflow;
use cresolver_workers::challenge::challenges_for;
use cresolver_workers::fanout::{WorkerSlot, WorkerTarget, resolve_stage};
use cresolver_workers::{
    A2aProtocol, ChallengeRequest, ResolveRequest, StageClient, StageConfig, WorkerProtocol,
};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

mod round_report;

const WORKERS: usize = 10;
const SLOW_LATENCY: Duration = Duration::from_millis(200);
const LATENCY_RUNS: usize = 5;
const OVERHEAD_WARMUP: usize = 200;
const OVERHEAD_ROUNDS: usize = 2_000;
const ALLOC_RUNS: usize = 200;
const CONCURRENT_ROUNDS: usize = 1_000;
const CONCURRENCY: usize = 512;
const CONCURRENT_RUNS: usize = 3;
const QUESTION: &str = "Will the reference feed report YES for market 7 by 2026-06-30?";
const REFERENCE_TIME: u64 = 1_780_272_000;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let table = rt.block_on(run());
    print!("{table}");
    let dir = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target").to_string());
    let path = std::path::Path::new(&dir).join("bench-round.md");
    match std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, &table)) {
        Ok(()) => eprintln!("wrote {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}

/// Starts `WORKERS` reference agents answering after `latency`; returns their slots.
async fn start_workers(latency: Duration) -> Vec<WorkerSlot> {
    let mut slots = Vec::with_capacity(WORKERS);
    for i in 0..WORKERS {
        let behaviour = AgentBehaviour {
            name: format!("bench-worker-{i}"),
            // a 7/3 split, so both challenge variants (unanimity/disagreement) are rendered
            determination: if i % 3 == 2 {
                DeterminationMode::No
            } else {
                DeterminationMode::Yes
            },
            confidence: None,
            latency,
            failure: None,
        };
        let (url, _handle) = cresolver_devnet::agent::spawn("127.0.0.1:0", behaviour)
            .await
            .expect("bind reference agent");
        slots.push(WorkerSlot {
            address: Address::repeat_byte(i as u8 + 1),
            target: Ok(WorkerTarget {
                endpoint: url.parse().expect("agent url"),
                protocol: Arc::new(A2aProtocol),
            }),
        });
    }
    slots
}

fn round_input(market_id: u64, workers: &[WorkerSlot]) -> RoundInput {
    RoundInput {
        market_id: MarketId::from(market_id),
        question: QUESTION.into(),
        deadline: None,
        reference_time: REFERENCE_TIME,
        workers: workers.to_vec(),
        reputations: vec![Reputation::default(); workers.len()],
    }
}

fn engine(wf: Workflow) -> Engine {
    Engine::with_evaluator(wf, StageClient::default_http(), Arc::new(RubricEvaluator))
}

/// One `Engine::run`, checked: every worker answered and the report was produced.
async fn engine_round(engine: &Engine, input: &RoundInput) -> Duration {
    engine_round_staged(engine, input).await.0
}

/// The wall time of a round's stages: resolve, challenge, evaluate, then the rest (the
/// decision and the report), from the engine's own stage observer.
type Stages = [Duration; 4];

/// One `Engine::run` as [`engine_round`], also timing its stages.
async fn engine_round_staged(engine: &Engine, input: &RoundInput) -> (Duration, Stages) {
    let marks = std::sync::Mutex::new([None::<Instant>; 3]);
    let observe = |stage: Stage| {
        let i = match stage {
            Stage::Answered => 0,
            Stage::Challenged => 1,
            Stage::Evaluated => 2,
            _ => return,
        };
        if let Ok(mut m) = marks.lock() {
            m[i] = Some(Instant::now());
        }
    };
    let t = Instant::now();
    let out = engine.run_observed(input, &observe).await.expect("round");
    let end = Instant::now();
    let took = end - t;
    let m = marks.into_inner().expect("marks");
    let [a, c, e] = m.map(|x| x.expect("every stage observed"));
    let stages = [a - t, c - a, e - c, end - e];
    assert_eq!(out.resolve.valid, WORKERS, "every worker must answer");
    assert!(
        out.challenges
            .iter()
            .all(|c| c.as_ref().is_some_and(|c| c.failure.is_none()))
    );
    assert!(!out.report.is_empty());
    (took, stages)
}

/// The two stage clients of a sequential round, with the engine's limits.
struct SequentialClients {
    resolve: StageClient,
    challenge: StageClient,
}

impl SequentialClients {
    fn new(wf: &Workflow) -> Self {
        let http = StageClient::default_http();
        let permits = Arc::new(Semaphore::new(wf.resolve.concurrency));
        let retry_backoff = Duration::from_millis(wf.resolve.retry_backoff_ms);
        let resolve = StageClient::new(
            http.clone(),
            StageConfig {
                timeout: wf.resolve_timeout(),
                max_body_bytes: wf.resolve.max_body_bytes,
                connect_retries: wf.resolve.connect_retries,
                retry_backoff,
            },
            permits.clone(),
        );
        let challenge = StageClient::new(
            http,
            StageConfig {
                timeout: Duration::from_millis(wf.challenge.timeout_ms),
                max_body_bytes: wf.challenge.max_body_bytes,
                connect_retries: wf.resolve.connect_retries,
                retry_backoff,
            },
            permits,
        );
        Self { resolve, challenge }
    }
}

/// The reference workflow's shape: resolve each worker in turn, then challenge each
/// responder in turn, then evaluate (rubric) and tally. Same protocol, client stack,
/// templates, evaluator and tally as the engine; only the calls are not concurrent.
async fn sequential_round(
    wf: &Workflow,
    clients: &SequentialClients,
    market_id: u64,
    workers: &[WorkerSlot],
) -> Duration {
    let t = Instant::now();
    let request = ResolveRequest {
        market_id,
        question: QUESTION.into(),
        deadline: None,
        context: None,
    };
    let mut answers = Vec::with_capacity(workers.len());
    for slot in workers {
        let target = slot.target.as_ref().expect("discovered");
        let answer = A2aProtocol
            .resolve(&clients.resolve, &target.endpoint, &request)
            .await;
        answers.push(answer.ok());
    }
    let valid = answers.iter().filter(|a| a.is_some()).count();
    assert_eq!(valid, WORKERS, "every worker must answer");
    assert!(wf.quorum.rule.is_met(valid, workers.len()));
    let templates = wf.challenge.templates();
    let determinations: Vec<bool> = answers.iter().flatten().map(|a| a.determination).collect();
    let mut eval_workers = Vec::new();
    let mut slot_of = Vec::new();
    for (i, (slot, answer)) in workers.iter().zip(&answers).enumerate() {
        let Some(answer) = answer else { continue };
        let target = slot.target.as_ref().expect("discovered");
        let challenges = challenges_for(&templates, QUESTION, answer, &determinations);
        let defence = A2aProtocol
            .challenge(
                &clients.challenge,
                &target.endpoint,
                ChallengeRequest {
                    request: &request,
                    label: "W",
                    own: answer,
                    challenges: &challenges,
                    peers: &[],
                },
            )
            .await;
        assert!(defence.failure.is_none());
        eval_workers.push(EvalWorker {
            label: format!("W{}", eval_workers.len() + 1),
            address: slot.address,
            answer: answer.clone(),
            challenges: defence.challenges,
            responses: defence.responses,
        });
        slot_of.push(i);
    }
    let eval_input = EvalInput {
        market_id: MarketId::from(market_id),
        question: QUESTION.into(),
        workers: eval_workers,
        reference_time: REFERENCE_TIME,
    };
    let evaluation = RubricEvaluator.evaluate(&eval_input).await.expect("rubric");
    let mut scores = vec![None; workers.len()];
    for (k, &i) in slot_of.iter().enumerate() {
        scores[i] = evaluation.scores.get(k).copied();
    }
    let tally_workers: Vec<TallyWorker> = workers
        .iter()
        .zip(&answers)
        .zip(&scores)
        .map(|((slot, answer), s)| TallyWorker {
            address: slot.address,
            vote: answer.as_ref().map(|a| Vote {
                position: a.position(),
                confidence: a.confidence,
            }),
            scores: s.unwrap_or_default(),
            reputation: Reputation::default(),
        })
        .collect();
    let outcome = cresolver_core::tally(MarketId::from(market_id), &tally_workers, wf.tally.tie)
        .expect("tally");
    assert!(!outcome.report().is_empty());
    t.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    // nearest-rank
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The process's CPU time so far (user + system, all threads), from /proc/self/stat.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // fields after the parenthesised command name; utime and stime are fields 14 and 15
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux target
    Some(Duration::from_millis(ticks * 10))
}

/// The engine's evaluator input for a finished round (what `Engine::run` builds).
fn eval_input_of(out: &cresolver_pipeline::round::RoundOutcome, market_id: u64) -> EvalInput {
    let workers = out
        .resolve
        .results
        .iter()
        .zip(&out.challenges)
        .filter_map(|(r, c)| {
            let answer = r.answer()?.clone();
            let c = c.as_ref()?;
            Some((r.address, answer, c.challenges.clone(), c.responses.clone()))
        })
        .enumerate()
        .map(|(k, (address, answer, challenges, responses))| EvalWorker {
            label: format!("W{}", k + 1),
            address,
            answer,
            challenges,
            responses,
        })
        .collect();
    EvalInput {
        market_id: MarketId::from(market_id),
        question: QUESTION.into(),
        workers,
        reference_time: REFERENCE_TIME,
    }
}

/// A `kB` field of /proc/self/status, in MiB.
fn proc_status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn mib(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.1} MiB"))
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The machine and build the figures come from, as the table's header names them.
struct Machine {
    nproc: usize,
    profile: &'static str,
}

/// Scenario 1: median round wall times of `Engine::run` and of the sequential calls.
struct Latency {
    concurrent: Duration,
    sequential: Duration,
}

/// Scenario 2: one round at a time on instant workers, with the breakdown of a round.
struct Overhead {
    /// Each timed round's wall time, sorted.
    rounds: Vec<Duration>,
    /// The wall time of the timed rounds, all together.
    wall: Duration,
    /// The process's CPU time over the timed rounds (`None` without /proc).
    cpu: Option<Duration>,
    /// Each timed round's stages (see [`Stages`]), one list per stage.
    stages: [Vec<Duration>; 4],
    /// The rubric evaluation alone, on one round's input.
    rubric: Vec<Duration>,
    /// `tokio::time::sleep(Duration::ZERO)` alone.
    zero_sleep: Vec<Duration>,
    /// One bare resolve fan-out (10 HTTP calls).
    fanout: Vec<Duration>,
    /// One single A2A resolve call.
    single: Vec<Duration>,
    /// Allocations (calls, bytes) of a whole round, the rubric, a fan-out and a single call.
    allocs: [(f64, f64); 4],
}

/// Scenario 3: `CONCURRENT_ROUNDS` rounds at once, `CONCURRENT_RUNS` times.
struct Concurrent {
    /// Each run's wall time, sorted.
    walls: Vec<Duration>,
    /// The first run's per-round latencies, sorted.
    per_round: Vec<Duration>,
    rss_before: Option<f64>,
    /// The highest peak RSS of the runs.
    rss_peak: Option<f64>,
    /// Whether the peak was reset before each run (else it is the process's lifetime peak).
    hwm_reset: bool,
}

/// Runs the three scenarios and returns the report (Markdown).
async fn run() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let profile = if cfg!(debug_assertions) {
        "debug (debug_assertions on) — numbers are not representative"
    } else {
        "release (cargo bench profile, debug_assertions off)"
    };
    eprintln!(
        "machine: nproc={nproc}, cpu={}, profile={profile}",
        cpu_model()
    );
    let wf = Workflow::default_named("bench");
    let latency = latency_scenario(&wf).await;
    let instant = start_workers(Duration::ZERO).await;
    let overhead = overhead_scenario(&wf, &instant).await;
    let concurrent = concurrent_scenario(&wf, &instant).await;
    round_report::table(&Machine { nproc, profile }, &latency, overhead, concurrent)
}

/// Scenario 1: 10 workers × 200 ms, `Engine::run` (concurrent) versus sequential calls.
async fn latency_scenario(wf: &Workflow) -> Latency {
    let slow = start_workers(SLOW_LATENCY).await;
    let slow_input = round_input(7, &slow);
    let concurrent_engine = engine(wf.clone());
    let clients = SequentialClients::new(wf);
    // one warm-up each (opens the keep-alive connections)
    engine_round(&concurrent_engine, &slow_input).await;
    sequential_round(wf, &clients, 7, &slow).await;
    let mut concurrent = Vec::new();
    let mut sequential = Vec::new();
    for run in 0..LATENCY_RUNS {
        let c = engine_round(&concurrent_engine, &slow_input).await;
        let s = sequential_round(wf, &clients, 7, &slow).await;
        eprintln!(
            "latency run {run}: concurrent {:.1} ms, sequential {:.1} ms",
            ms(c),
            ms(s)
        );
        concurrent.push(c);
        sequential.push(s);
    }
    Latency {
        concurrent: median(&mut concurrent),
        sequential: median(&mut sequential),
    }
}

/// Scenario 2's timed rounds: `OVERHEAD_ROUNDS` rounds one at a time after a warm-up,
/// with their stages, wall time and process CPU time; the breakdown is left empty.
async fn time_rounds(engine: &Engine, input: &RoundInput) -> Overhead {
    for _ in 0..OVERHEAD_WARMUP {
        engine_round(engine, input).await;
    }
    let mut rounds = Vec::with_capacity(OVERHEAD_ROUNDS);
    let cpu_start = process_cpu();
    let wall_start = Instant::now();
    let mut stages: [Vec<Duration>; 4] = Default::default();
    for _ in 0..OVERHEAD_ROUNDS {
        let (took, staged) = engine_round_staged(engine, input).await;
        rounds.push(took);
        for (v, d) in stages.iter_mut().zip(staged) {
            v.push(d);
        }
    }
    let wall = wall_start.elapsed();
    let cpu = process_cpu()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    Overhead {
        rounds,
        wall,
        cpu,
        stages,
        rubric: Vec::new(),
        zero_sleep: Vec::new(),
        fanout: Vec::new(),
        single: Vec::new(),
        allocs: [(0.0, 0.0); 4],
    }
}

/// Scenario 2: the engine's overhead with 10 instant workers, one round at a time, and
/// the breakdown of a round: the rubric alone, a zero sleep, one bare resolve fan-out
/// (10 HTTP calls, no challenge/eval/tally), one single A2A resolve call; then the
/// allocations of each, counted in passes of their own.
async fn overhead_scenario(wf: &Workflow, instant: &[WorkerSlot]) -> Overhead {
    let instant_input = round_input(8, instant);
    let overhead_engine = engine(wf.clone());
    let mut o = time_rounds(&overhead_engine, &instant_input).await;
    let sample = overhead_engine.run(&instant_input).await.expect("round");
    let sample_eval = eval_input_of(&sample, 8);
    assert_eq!(sample_eval.workers.len(), WORKERS);
    o.rubric = time_rubric(&sample_eval).await;
    // the reference agent sleeps `latency` even when it is zero: tokio's timer rounds a
    // deadline up to its next 1 ms tick, so measure that wait on its own
    for _ in 0..OVERHEAD_ROUNDS {
        let t = Instant::now();
        tokio::time::sleep(Duration::ZERO).await;
        o.zero_sleep.push(t.elapsed());
    }
    let stage_clients = SequentialClients::new(wf);
    let request = ResolveRequest {
        market_id: 8,
        question: QUESTION.into(),
        deadline: None,
        context: None,
    };
    let first = instant[0].target.as_ref().expect("discovered");
    let fan_out = || {
        resolve_stage(
            &stage_clients.resolve,
            instant,
            &request,
            wf.quorum.rule,
            None,
        )
    };
    let one_call = || A2aProtocol.resolve(&stage_clients.resolve, &first.endpoint, &request);
    for i in 0..OVERHEAD_WARMUP + OVERHEAD_ROUNDS {
        let t = Instant::now();
        let stage = fan_out().await;
        let f = t.elapsed();
        assert_eq!(stage.valid, WORKERS);
        let t = Instant::now();
        one_call().await.expect("single resolve");
        let one = t.elapsed();
        if i >= OVERHEAD_WARMUP {
            o.fanout.push(f);
            o.single.push(one);
        }
    }
    // allocations, counted in passes of their own (the timed passes above do not count)
    o.allocs = [
        count_allocations(ALLOC_RUNS, || async {
            engine_round(&overhead_engine, &instant_input).await;
        })
        .await,
        count_allocations(ALLOC_RUNS, || async {
            RubricEvaluator
                .evaluate(&sample_eval)
                .await
                .expect("rubric");
        })
        .await,
        count_allocations(ALLOC_RUNS, || async {
            fan_out().await;
        })
        .await,
        count_allocations(ALLOC_RUNS, || async {
            one_call().await.expect("single resolve");
        })
        .await,
    ];
    o.rounds.sort();
    o
}

/// The rubric evaluation alone on one round's input, `OVERHEAD_ROUNDS` times.
async fn time_rubric(input: &EvalInput) -> Vec<Duration> {
    let mut rubric = Vec::with_capacity(OVERHEAD_ROUNDS);
    for _ in 0..OVERHEAD_ROUNDS {
        let t = Instant::now();
        let ev = RubricEvaluator.evaluate(input).await.expect("rubric");
        rubric.push(t.elapsed());
        assert_eq!(ev.scores.len(), WORKERS);
    }
    rubric
}

/// Scenario 3: `CONCURRENT_ROUNDS` concurrent rounds × 10 instant workers, with the
/// process's RSS before and its peak during each run.
async fn concurrent_scenario(wf: &Workflow, instant: &[WorkerSlot]) -> Concurrent {
    let mut wf_many = wf.clone();
    wf_many.resolve.concurrency = CONCURRENCY;
    let many_engine = Arc::new(engine(wf_many));
    let many_input = Arc::new(round_input(9, instant));
    let rss_before = proc_status_mib("VmRSS:");
    let mut walls = Vec::with_capacity(CONCURRENT_RUNS);
    let mut peaks = Vec::with_capacity(CONCURRENT_RUNS);
    let mut per_round = Vec::new();
    let mut hwm_reset = true;
    for run in 0..CONCURRENT_RUNS {
        // reset the peak (VmHWM) to the current RSS, so the peak is this run's
        hwm_reset &= std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let t = Instant::now();
        let tasks: Vec<_> = (0..CONCURRENT_ROUNDS)
            .map(|_| {
                let engine = many_engine.clone();
                let input = many_input.clone();
                tokio::spawn(async move { engine_round(&engine, &input).await })
            })
            .collect();
        let results = futures::future::join_all(tasks).await;
        let wall = t.elapsed();
        let ok = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, CONCURRENT_ROUNDS, "every round must succeed");
        let peak = proc_status_mib("VmHWM:");
        eprintln!(
            "concurrent run {run}: {:.0} ms, peak RSS {}",
            ms(wall),
            mib(peak)
        );
        walls.push(wall);
        peaks.extend(peak);
        if run == 0 {
            per_round = results.into_iter().flatten().collect();
        }
    }
    per_round.sort();
    walls.sort();
    Concurrent {
        walls,
        per_round,
        rss_before,
        rss_peak: peaks.iter().copied().reduce(f64::max),
        hwm_reset,
    }
}
