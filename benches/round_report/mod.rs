//! The round benchmark's report: the Markdown table of its three scenarios' figures,
//! and the comparison of this run with `benches/round-baseline.json`.

use super::{
    ALLOC_RUNS, CONCURRENCY, CONCURRENT_ROUNDS, CONCURRENT_RUNS, Concurrent, LATENCY_RUNS, Latency,
    Machine, OVERHEAD_ROUNDS, OVERHEAD_WARMUP, Overhead, cpu_model, median, mib, ms, percentile,
    us,
};
use std::fmt::Write as _;
use std::time::Duration;

/// The Markdown table of a run's figures, followed by the comparison with the baseline.
pub(super) fn table(
    machine: &Machine,
    latency: &Latency,
    mut overhead: Overhead,
    mut concurrent: Concurrent,
) -> String {
    let Machine { nproc, profile } = *machine;
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
    latency_rows(&mut s, latency);
    let overhead_med = overhead_rows(&mut s, nproc, &mut overhead);
    breakdown_rows(&mut s, &mut overhead);
    let many_wall = concurrent_rows(&mut s, &mut concurrent);
    let current = [
        ("per_round_us", us(overhead_med)),
        ("rubric_us", us(median(&mut overhead.rubric))),
        ("fanout_us", us(median(&mut overhead.fanout))),
        ("concurrent_1000_ms", ms(many_wall)),
    ];
    s.push_str(&against_baseline(&current));
    s
}

/// Scenario 1's rows: the two median round wall times and their ratio.
fn latency_rows(s: &mut String, latency: &Latency) {
    let ratio = latency.concurrent.as_secs_f64() / latency.sequential.as_secs_f64();
    let _ = writeln!(
        s,
        "| 1 | 10 workers × 200 ms, `Engine::run` (concurrent fan-out) | median round wall time ({LATENCY_RUNS} runs) | {:.1} ms |",
        ms(latency.concurrent)
    );
    let _ = writeln!(
        s,
        "| 1 | 10 workers × 200 ms, sequential A2A (resolve ×10, then challenge ×10) + rubric + tally | median round wall time ({LATENCY_RUNS} runs) | {:.1} ms |",
        ms(latency.sequential)
    );
    let _ = writeln!(
        s,
        "| 1 | | ratio concurrent / sequential | {ratio:.3} (1/{:.1}) |",
        1.0 / ratio
    );
}

/// Scenario 2's rows of the whole round: median, p90, mean, process CPU and each stage.
/// Returns the median round.
fn overhead_rows(s: &mut String, nproc: usize, o: &mut Overhead) -> Duration {
    let overhead_med = median(&mut o.rounds);
    let overhead_p90 = percentile(&o.rounds, 90.0);
    let overhead_mean = o.rounds.iter().sum::<Duration>() / o.rounds.len() as u32;
    let _ = writeln!(
        s,
        "| 2 | 10 instant workers, `Engine::run`, {OVERHEAD_ROUNDS} rounds one at a time ({OVERHEAD_WARMUP} warm-up) | median per round | {:.0} µs |",
        us(overhead_med)
    );
    let _ = writeln!(s, "| 2 | | p90 per round | {:.0} µs |", us(overhead_p90));
    let _ = writeln!(s, "| 2 | | mean per round | {:.0} µs |", us(overhead_mean));
    if let Some(cpu) = o.cpu {
        let _ = writeln!(
            s,
            "| 2 | | process CPU per round (user+sys, client and servers, 10 ms ticks) | {:.0} µs ({:.0}% of {nproc} cores over {:.2} s) |",
            us(cpu) / OVERHEAD_ROUNDS as f64,
            100.0 * cpu.as_secs_f64() / (o.wall.as_secs_f64() * nproc.max(1) as f64),
            o.wall.as_secs_f64()
        );
    }
    for (name, v) in [
        "resolve stage (10 HTTP calls, quorum)",
        "challenge stage (10 HTTP calls)",
        "evaluation (rubric)",
        "decision, tally and report",
    ]
    .iter()
    .zip(o.stages.iter_mut())
    {
        let _ = writeln!(
            s,
            "| 2 | stage of the round: {name} | median | {:.0} µs |",
            us(median(v))
        );
    }
    overhead_med
}

/// Scenario 2's breakdown rows: the parts of a round timed alone, and the allocations.
fn breakdown_rows(s: &mut String, o: &mut Overhead) {
    let _ = writeln!(
        s,
        "| 2 | breakdown: rubric evaluation alone (10 workers, same input) | median | {:.0} µs |",
        us(median(&mut o.rubric))
    );
    let _ = writeln!(
        s,
        "| 2 | breakdown: one resolve fan-out alone (`resolve_stage`, 10 HTTP calls) | median | {:.0} µs |",
        us(median(&mut o.fanout))
    );
    let _ = writeln!(
        s,
        "| 2 | breakdown: one A2A resolve call alone (1 HTTP call) | median | {:.0} µs |",
        us(median(&mut o.single))
    );
    let _ = writeln!(
        s,
        "| 2 | breakdown: `tokio::time::sleep(ZERO)` alone (the agent sleeps `latency` = 0 before every answer) | median | {:.0} µs |",
        us(median(&mut o.zero_sleep))
    );
    let whats = [
        "a whole round",
        "the rubric evaluation",
        "one resolve fan-out (10 HTTP calls)",
        "one A2A resolve call",
    ];
    for (what, (calls, bytes)) in whats.into_iter().zip(o.allocs) {
        let _ = writeln!(
            s,
            "| 2 | allocations: {what} (whole process: node side and agents, mean of {ALLOC_RUNS}) | calls / bytes | {calls:.0} / {:.1} KiB |",
            bytes / 1024.0
        );
    }
}

/// Scenario 3's rows: wall time, throughput, per-round latency and memory. Returns the
/// median wall time.
fn concurrent_rows(s: &mut String, c: &mut Concurrent) -> Duration {
    let many_wall = median(&mut c.walls);
    let rounds_per_s = CONCURRENT_ROUNDS as f64 / many_wall.as_secs_f64();
    let _ = writeln!(
        s,
        "| 3 | {CONCURRENT_ROUNDS} concurrent rounds × 10 instant workers (`resolve.concurrency` = {CONCURRENCY}) | total wall time, median of {CONCURRENT_RUNS} runs (min–max) | {:.0} ms ({:.0}–{:.0}) |",
        ms(many_wall),
        ms(c.walls[0]),
        ms(c.walls[c.walls.len() - 1])
    );
    let _ = writeln!(s, "| 3 | | throughput | {rounds_per_s:.0} rounds/s |");
    let per_round = &c.per_round;
    let _ = writeln!(
        s,
        "| 3 | | per-round latency median / p90 / max (first run) | {:.0} / {:.0} / {:.0} ms |",
        ms(median(&mut per_round.clone())),
        ms(percentile(per_round, 90.0)),
        ms(*per_round.last().expect("rounds"))
    );
    let _ = writeln!(s, "| 3 | | RSS before (VmRSS) | {} |", mib(c.rss_before));
    let _ = writeln!(
        s,
        "| 3 | | peak RSS (VmHWM{}) | {} |",
        if c.hwm_reset {
            ", reset before each run; max over runs"
        } else {
            ", process lifetime"
        },
        mib(c.rss_peak)
    );
    many_wall
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
