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

use alloy::primitives::{Address, U256};
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
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

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
        market_id,
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
        market_id,
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
    let outcome =
        cresolver_core::tally(U256::from(market_id), &tally_workers, wf.tally.tie).expect("tally");
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
        market_id,
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

    // ---- 1. 10 workers × 200 ms: Engine::run (concurrent) vs sequential calls ----------
    let wf = Workflow::default_named("bench");
    let slow = start_workers(SLOW_LATENCY).await;
    let slow_input = round_input(7, &slow);
    let concurrent_engine = engine(wf.clone());
    let clients = SequentialClients::new(&wf);
    // one warm-up each (opens the keep-alive connections)
    engine_round(&concurrent_engine, &slow_input).await;
    sequential_round(&wf, &clients, 7, &slow).await;
    let mut concurrent = Vec::new();
    let mut sequential = Vec::new();
    for run in 0..LATENCY_RUNS {
        let c = engine_round(&concurrent_engine, &slow_input).await;
        let s = sequential_round(&wf, &clients, 7, &slow).await;
        eprintln!(
            "latency run {run}: concurrent {:.1} ms, sequential {:.1} ms",
            ms(c),
            ms(s)
        );
        concurrent.push(c);
        sequential.push(s);
    }
    let concurrent_med = median(&mut concurrent);
    let sequential_med = median(&mut sequential);
    let ratio = concurrent_med.as_secs_f64() / sequential_med.as_secs_f64();

    // ---- 2. engine overhead: 10 instant workers, one round at a time -------------------
    let instant = start_workers(Duration::ZERO).await;
    let instant_input = round_input(8, &instant);
    let overhead_engine = engine(wf.clone());
    for _ in 0..OVERHEAD_WARMUP {
        engine_round(&overhead_engine, &instant_input).await;
    }
    let mut overhead = Vec::with_capacity(OVERHEAD_ROUNDS);
    let cpu_start = process_cpu();
    let wall_start = Instant::now();
    let mut stages: [Vec<Duration>; 4] = Default::default();
    for _ in 0..OVERHEAD_ROUNDS {
        let (took, staged) = engine_round_staged(&overhead_engine, &instant_input).await;
        overhead.push(took);
        for (v, d) in stages.iter_mut().zip(staged) {
            v.push(d);
        }
    }
    let overhead_wall = wall_start.elapsed();
    let overhead_cpu = process_cpu()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    // breakdown: the rubric alone on this round's input, one bare resolve fan-out
    // (10 HTTP calls, no challenge/eval/tally), one single A2A resolve call
    let sample = overhead_engine.run(&instant_input).await.expect("round");
    let sample_eval = eval_input_of(&sample, 8);
    assert_eq!(sample_eval.workers.len(), WORKERS);
    let mut rubric = Vec::with_capacity(OVERHEAD_ROUNDS);
    for _ in 0..OVERHEAD_ROUNDS {
        let t = Instant::now();
        let ev = RubricEvaluator
            .evaluate(&sample_eval)
            .await
            .expect("rubric");
        rubric.push(t.elapsed());
        assert_eq!(ev.scores.len(), WORKERS);
    }
    // the reference agent sleeps `latency` even when it is zero: tokio's timer rounds a
    // deadline up to its next 1 ms tick, so measure that wait on its own
    let mut zero_sleep = Vec::with_capacity(OVERHEAD_ROUNDS);
    for _ in 0..OVERHEAD_ROUNDS {
        let t = Instant::now();
        tokio::time::sleep(Duration::ZERO).await;
        zero_sleep.push(t.elapsed());
    }
    let stage_clients = SequentialClients::new(&wf);
    let request = ResolveRequest {
        market_id: 8,
        question: QUESTION.into(),
        deadline: None,
        context: None,
    };
    let mut fanout = Vec::with_capacity(OVERHEAD_ROUNDS);
    let mut single = Vec::with_capacity(OVERHEAD_ROUNDS);
    let first = instant[0].target.as_ref().expect("discovered");
    let fan_out = || {
        resolve_stage(
            &stage_clients.resolve,
            &instant,
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
            fanout.push(f);
            single.push(one);
        }
    }
    // allocations, counted in passes of their own (the timed passes above do not count)
    let allocs_round = count_allocations(ALLOC_RUNS, || async {
        engine_round(&overhead_engine, &instant_input).await;
    })
    .await;
    let allocs_rubric = count_allocations(ALLOC_RUNS, || async {
        RubricEvaluator
            .evaluate(&sample_eval)
            .await
            .expect("rubric");
    })
    .await;
    let allocs_fanout = count_allocations(ALLOC_RUNS, || async {
        fan_out().await;
    })
    .await;
    let allocs_single = count_allocations(ALLOC_RUNS, || async {
        one_call().await.expect("single resolve");
    })
    .await;
    overhead.sort();
    let overhead_med = median(&mut overhead);
    let overhead_p90 = percentile(&overhead, 90.0);
    let overhead_mean = overhead.iter().sum::<Duration>() / overhead.len() as u32;

    // ---- 3. 1,000 concurrent rounds × 10 instant workers -------------------------------
    let mut wf_many = wf.clone();
    wf_many.resolve.concurrency = CONCURRENCY;
    let many_engine = Arc::new(engine(wf_many));
    let many_input = Arc::new(round_input(9, &instant));
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
    let rss_peak = peaks.iter().copied().reduce(f64::max);
    walls.sort();
    let many_wall = median(&mut walls);
    let rounds_per_s = CONCURRENT_ROUNDS as f64 / many_wall.as_secs_f64();

    // ---- the table ----------------------------------------------------------------------
    let mut s = String::new();
    let _ = writeln!(s, "## cresolver round benchmark\n");
    let _ = writeln!(
        s,
        "Machine: nproc = {nproc} ({}); tokio multi-thread runtime, {nproc} workers; \
build profile: {profile}. Workers are reference agents (axum) on 127.0.0.1 in the same \
process; workflow = `Workflow::default_named` (BFT quorum, challenges on, rubric \
evaluator) except `resolve.concurrency` in scenario 3.\n",
        cpu_model()
    );
    let _ = writeln!(s, "| # | Scenario | Metric | Value |");
    let _ = writeln!(s, "|---|---|---|---|");
    let _ = writeln!(
        s,
        "| 1 | 10 workers × 200 ms, `Engine::run` (concurrent fan-out) | median round wall time ({LATENCY_RUNS} runs) | {:.1} ms |",
        ms(concurrent_med)
    );
    let _ = writeln!(
        s,
        "| 1 | 10 workers × 200 ms, sequential A2A (resolve ×10, then challenge ×10) + rubric + tally | median round wall time ({LATENCY_RUNS} runs) | {:.1} ms |",
        ms(sequential_med)
    );
    let _ = writeln!(
        s,
        "| 1 | | ratio concurrent / sequential | {ratio:.3} (1/{:.1}) |",
        1.0 / ratio
    );
    let _ = writeln!(
        s,
        "| 2 | 10 instant workers, `Engine::run`, {OVERHEAD_ROUNDS} rounds one at a time ({OVERHEAD_WARMUP} warm-up) | median per round | {:.0} µs |",
        us(overhead_med)
    );
    let _ = writeln!(s, "| 2 | | p90 per round | {:.0} µs |", us(overhead_p90));
    let _ = writeln!(s, "| 2 | | mean per round | {:.0} µs |", us(overhead_mean));
    if let Some(cpu) = overhead_cpu {
        let _ = writeln!(
            s,
            "| 2 | | process CPU per round (user+sys, client and servers, 10 ms ticks) | {:.0} µs ({:.0}% of {nproc} cores over {:.2} s) |",
            us(cpu) / OVERHEAD_ROUNDS as f64,
            100.0 * cpu.as_secs_f64() / (overhead_wall.as_secs_f64() * nproc.max(1) as f64),
            overhead_wall.as_secs_f64()
        );
    }
    for (name, v) in [
        "resolve stage (10 HTTP calls, quorum)",
        "challenge stage (10 HTTP calls)",
        "evaluation (rubric)",
        "decision, tally and report",
    ]
    .iter()
    .zip(stages.iter_mut())
    {
        let _ = writeln!(
            s,
            "| 2 | stage of the round: {name} | median | {:.0} µs |",
            us(median(v))
        );
    }
    let _ = writeln!(
        s,
        "| 2 | breakdown: rubric evaluation alone (10 workers, same input) | median | {:.0} µs |",
        us(median(&mut rubric))
    );
    let _ = writeln!(
        s,
        "| 2 | breakdown: one resolve fan-out alone (`resolve_stage`, 10 HTTP calls) | median | {:.0} µs |",
        us(median(&mut fanout))
    );
    let _ = writeln!(
        s,
        "| 2 | breakdown: one A2A resolve call alone (1 HTTP call) | median | {:.0} µs |",
        us(median(&mut single))
    );
    let _ = writeln!(
        s,
        "| 2 | breakdown: `tokio::time::sleep(ZERO)` alone (the agent sleeps `latency` = 0 before every answer) | median | {:.0} µs |",
        us(median(&mut zero_sleep))
    );
    for (what, (calls, bytes)) in [
        ("a whole round", allocs_round),
        ("the rubric evaluation", allocs_rubric),
        ("one resolve fan-out (10 HTTP calls)", allocs_fanout),
        ("one A2A resolve call", allocs_single),
    ] {
        let _ = writeln!(
            s,
            "| 2 | allocations: {what} (whole process: node side and agents, mean of {ALLOC_RUNS}) | calls / bytes | {calls:.0} / {:.1} KiB |",
            bytes / 1024.0
        );
    }
    let _ = writeln!(
        s,
        "| 3 | {CONCURRENT_ROUNDS} concurrent rounds × 10 instant workers (`resolve.concurrency` = {CONCURRENCY}) | total wall time, median of {CONCURRENT_RUNS} runs (min–max) | {:.0} ms ({:.0}–{:.0}) |",
        ms(many_wall),
        ms(walls[0]),
        ms(walls[walls.len() - 1])
    );
    let _ = writeln!(s, "| 3 | | throughput | {rounds_per_s:.0} rounds/s |");
    let _ = writeln!(
        s,
        "| 3 | | per-round latency median / p90 / max (first run) | {:.0} / {:.0} / {:.0} ms |",
        ms(median(&mut per_round.clone())),
        ms(percentile(&per_round, 90.0)),
        ms(*per_round.last().expect("rounds"))
    );
    let _ = writeln!(s, "| 3 | | RSS before (VmRSS) | {} |", mib(rss_before));
    let _ = writeln!(
        s,
        "| 3 | | peak RSS (VmHWM{}) | {} |",
        if hwm_reset {
            ", reset before each run; max over runs"
        } else {
            ", process lifetime"
        },
        mib(rss_peak)
    );
    let current = [
        ("per_round_us", us(overhead_med)),
        ("rubric_us", us(median(&mut rubric))),
        ("fanout_us", us(median(&mut fanout))),
        ("concurrent_1000_ms", ms(many_wall)),
    ];
    s.push_str(&against_baseline(&current));
    s
}

/// Compares this run with `benches/round-baseline.json` (figures of this machine that a
/// change must not worsen) and says loudly what is more than 20 % slower; writes this
/// run's figures to `target/bench-round-current.json` (copy it over the baseline to
/// accept a new level).
fn against_baseline(current: &[(&str, f64)]) -> String {
    let dir = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target").to_string());
    let now: serde_json::Map<String, serde_json::Value> = current
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!((v * 10.0).round() / 10.0)))
        .collect();
    let _ = std::fs::write(
        std::path::Path::new(&dir).join("bench-round-current.json"),
        serde_json::to_string_pretty(&now).unwrap_or_default(),
    );
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/round-baseline.json");
    let Some(base) = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
    else {
        return "\nNo baseline (benches/round-baseline.json): nothing compared.\n".into();
    };
    let mut out =
        String::from("\n| against the baseline | baseline | now | change |\n|---|---|---|---|\n");
    let mut worse = vec![];
    for (k, v) in current {
        let Some(b) = base[*k].as_f64() else { continue };
        let change = (v - b) / b * 100.0;
        let _ = writeln!(out, "| {k} | {b:.1} | {v:.1} | {change:+.0} % |");
        if change > 20.0 {
            worse.push(format!("{k}: {b:.1} -> {v:.1} ({change:+.0} %)"));
        }
    }
    if !worse.is_empty() {
        let loud = format!(
            "\n**REGRESSION: more than 20 % slower than benches/round-baseline.json: {}**\n",
            worse.join("; ")
        );
        eprintln!("{}", "!".repeat(78));
        eprintln!("{loud}");
        eprintln!("{}", "!".repeat(78));
        out.push_str(&loud);
    }
    out
}
