//! Fuzzing of every parser of untrusted bytes, as property tests: worker replies (A2A,
//! Factagora, Chorus), Agora envelopes and relay polls, ERC-8004 registration files and
//! `data:` URIs, LLM replies and `eth_getLogs` logs (`targets.rs`; the round-table
//! replies are fuzzed by `cresolver-workers`' `roundtable::proptests`). Each case is
//! arbitrary bytes, an arbitrary JSON document, or a valid seed mutated (`inputs.rs`); a
//! case passes when the parser returns without panicking and what it accepted has the
//! target's properties (a confidence in [0, 1], bounded evidence, scores 0–100, …).
//! Randomized and mutation-based, not coverage-guided; stable Rust, no nightly.
//!
//! - `cargo test --test suite -- fuzz::`: the short pass of the normal suite, 256 cases per parser
//!   (one `#[test]` per parser, named after it).
//! - `cargo test --test suite -- fuzz:: --ignored --nocapture`: the long pass, 100,000 cases per
//!   parser (`long_pass`); `PROPTEST_CASES=N` sets the cases of either pass.
//! - A failure is shrunk to a small input, printed as hex and text, and its seed appended
//!   to `tests/fuzz/regressions.txt`; every later run replays the saved seeds first, so
//!   `cargo test --test suite -- fuzz::<parser>` reproduces it (commit the file with the fix).
//!   `PROPTEST_RNG_SEED=N` makes a whole run repeatable.

mod inputs;
mod targets;

use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use std::cell::Cell;
use targets::Target;

/// Where failing seeds are saved and replayed from (relative to the crate root, the
/// directory cargo runs tests in).
const REGRESSIONS: &str = "tests/fuzz/regressions.txt";
/// Cases per parser in the long pass, unless `PROPTEST_CASES` says.
const LONG_CASES: u32 = 100_000;

/// Runs `cases` inputs through `target`; panics with the shrunk input on a failure.
fn fuzz(target: &Target, cases: u32) {
    let config = Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
        ..Config::default()
    };
    let accepted = Cell::new(0u64);
    let started = std::time::Instant::now();
    let result = TestRunner::new(config).run(&inputs::inputs((target.seeds)()), |input| {
        accepted.set(accepted.get() + u64::from((target.run)(&input.0)?));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{}: {e}", target.name);
    }
    println!(
        "{:<16} {cases:>8} cases  {:>7} accepted  {:.2} s",
        target.name,
        accepted.get(),
        started.elapsed().as_secs_f64()
    );
}

fn target(name: &str) -> Target {
    targets::all()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no fuzz target {name}"))
}

/// One short-pass `#[test]` per parser, and the list of them.
macro_rules! short_pass {
    ($($name:ident),* $(,)?) => {
        const TESTED: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                fuzz(&target(stringify!($name)), Config::default().cases);
            }
        )*
    };
}

short_pass!(
    a2a_resolve,
    a2a_challenge,
    factagora_reply,
    chorus_result,
    agora_envelope,
    agora_poll,
    registration,
    data_uri,
    llm_reply,
    rpc_log,
);

#[test]
fn every_target_has_a_short_pass() {
    let names: Vec<&str> = targets::all().iter().map(|t| t.name).collect();
    assert_eq!(names, TESTED);
}

#[test]
fn every_seed_is_accepted() {
    // mutations start from what the parsers accept, so they reach past the first check
    for t in targets::all() {
        let seeds = (t.seeds)();
        assert!(!seeds.is_empty(), "{}", t.name);
        for s in seeds {
            let accepted = (t.run)(&s);
            assert!(
                matches!(accepted, Ok(true)),
                "{}: {accepted:?} for its seed {}",
                t.name,
                String::from_utf8_lossy(&s)
            );
        }
    }
}

#[test]
#[ignore = "the long pass: 100,000 cases per parser (PROPTEST_CASES overrides), minutes"]
fn long_pass() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(LONG_CASES);
    for t in targets::all() {
        fuzz(&t, cases);
    }
}
