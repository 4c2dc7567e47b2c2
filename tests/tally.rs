//! Tally: hand-checked vectors (cross-checked with the reference's JavaScript
//! arithmetic), property tests, and the `cresolver tally` audit command.

use alloy::primitives::{Address, U256};
use cresolver_core::Position;
use cresolver_core::tally::Vote;
use cresolver_core::{
    Dimensions, Reputation, TallyError, TallyWorker, TieRule, decode_report, tally,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

fn dims(v: [f64; 8]) -> Dimensions {
    Dimensions::from_array(v)
}

fn w(i: u8, vote: Option<bool>, scores: Dimensions, rep: Reputation) -> TallyWorker {
    TallyWorker {
        address: Address::repeat_byte(i),
        vote: vote.map(|d| Vote {
            position: Position::from_answer(d, false),
            confidence: 0.7,
        }),
        scores,
        reputation: rep,
    }
}

fn rep(r: f64, s: f64, a: f64, count: u64) -> Reputation {
    Reputation {
        res_quality: r,
        src_quality: s,
        analysis_depth: a,
        count,
    }
}

// Dimension order: resolutionQuality, sourceQuality, analysisDepth, reasoningClarity,
// evidenceStrength, biasAwareness, timeliness, collaboration.
const B: [f64; 8] = [60.0, 50.0, 40.0, 70.0, 30.0, 20.0, 90.0, 100.0];
const C: [f64; 8] = [91.0, 77.0, 66.0, 85.0, 72.0, 58.0, 64.0, 49.0];

#[test]
fn hand_checked_vector_with_reputation_history() {
    let workers = vec![
        w(
            1,
            Some(true),
            Dimensions::uniform(80.0),
            Reputation::default(),
        ),
        // res (60*20+70*15+30*10)/45 = 56.67 -> 57; src (50*15+90*10)/25 = 66;
        // depth (40*15+20*10+100*5)/30 = 43.33 -> 43; q = round(166/3) = 55; rep 1.1
        w(2, Some(false), dims(B), rep(70.0, 60.0, 50.0, 3)),
        // res 3815/45 = 84.78 -> 85; src 1795/25 = 71.8 -> 72; depth 1815/30 = 60.5 -> 61 (half up);
        // q = round(218/3) = 73; rep (88+75+69)/3/100 + 0.5 = 1.27333…
        w(3, Some(true), dims(C), rep(88.0, 75.0, 69.0, 5)),
        w(4, None, Dimensions::default(), rep(10.0, 10.0, 10.0, 1)),
    ];
    let out = tally(U256::from(9).into(), &workers, TieRule::Yes).unwrap();
    assert!(out.resolution);
    assert_eq!(
        out.dim_scores(),
        vec![80, 80, 80, 57, 66, 43, 85, 72, 61, 0, 0, 0]
    );
    // 80*200*1; round(55*50*1.1 = 3025.0000000000005); round(73*200*1.27333… = 18590.67); 0
    assert_eq!(
        out.weights(),
        [16000u64, 3025, 18591, 0].map(U256::from).to_vec()
    );
    assert_eq!(out.no_weight, 55.0 * 1.1);
    assert_eq!(
        out.workers.iter().map(|w| w.quality).collect::<Vec<_>>(),
        vec![80.0, 55.0, 73.0, 0.0]
    );
    // the report decodes back to the same arrays, in registration order
    let r = decode_report(&out.report()).unwrap();
    assert_eq!(r.market_id, U256::from(9).into());
    assert_eq!(
        r.workers,
        (1..=4).map(Address::repeat_byte).collect::<Vec<_>>()
    );
    assert_eq!(r.weights, out.weights());
    assert_eq!(r.dim_scores, out.dim_scores());
    assert!(r.resolution);
}

#[test]
fn tie_follows_the_rule() {
    let workers = vec![
        w(
            1,
            Some(true),
            Dimensions::uniform(50.0),
            Reputation::default(),
        ),
        w(
            2,
            Some(false),
            Dimensions::uniform(50.0),
            Reputation::default(),
        ),
    ];
    let yes = tally(U256::ZERO.into(), &workers, TieRule::Yes).unwrap();
    assert!(yes.resolution && yes.tie);
    assert_eq!(yes.weights(), vec![U256::from(10000), U256::from(2500)]);
    let no = tally(U256::ZERO.into(), &workers, TieRule::No).unwrap();
    assert!(!no.resolution);
    assert_eq!(no.weights(), vec![U256::from(2500), U256::from(10000)]);
    assert_eq!(
        tally(U256::ZERO.into(), &workers, TieRule::Fail),
        Err(TallyError::Tie { weight: 50.0 })
    );
}

#[test]
fn all_no_round() {
    let workers = vec![
        w(
            1,
            Some(false),
            Dimensions::uniform(70.0),
            Reputation::default(),
        ),
        w(2, Some(false), dims(B), Reputation::default()),
    ];
    let out = tally(U256::from(1).into(), &workers, TieRule::Yes).unwrap();
    assert!(!out.resolution);
    assert_eq!(out.yes_weight, 0.0);
    assert_eq!(out.weights(), vec![U256::from(14000), U256::from(11000)]);
}

#[test]
fn degenerate_rounds_fail_clearly() {
    let none = vec![w(1, None, Dimensions::default(), Reputation::default())];
    assert_eq!(
        tally(U256::ZERO.into(), &none, TieRule::Yes),
        Err(TallyError::NoResponders)
    );
    let zero = vec![w(
        1,
        Some(true),
        Dimensions::uniform(0.0),
        Reputation::default(),
    )];
    assert_eq!(
        tally(U256::ZERO.into(), &zero, TieRule::Yes),
        Err(TallyError::ZeroTotalWeight)
    );
    let dup = vec![
        w(
            1,
            Some(true),
            Dimensions::uniform(10.0),
            Reputation::default(),
        ),
        w(1, None, Dimensions::default(), Reputation::default()),
    ];
    assert!(matches!(
        tally(U256::ZERO.into(), &dup, TieRule::Yes),
        Err(TallyError::DuplicateWorker { .. })
    ));
    let bad = vec![w(
        1,
        Some(true),
        dims([101.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        Reputation::default(),
    )];
    assert!(matches!(
        tally(U256::ZERO.into(), &bad, TieRule::Yes),
        Err(TallyError::ScoreOutOfRange {
            field: "resolutionQuality",
            ..
        })
    ));
}

fn arb_worker(i: u8) -> impl Strategy<Value = TallyWorker> {
    (
        proptest::option::of(any::<bool>()),
        proptest::array::uniform8(0u8..=100),
        (0u8..=100, 0u8..=100, 0u8..=100, 0u64..5),
    )
        .prop_map(move |(vote, s, (r, sq, a, c))| {
            w(
                i,
                vote,
                Dimensions::from_array(s.map(f64::from)),
                rep(f64::from(r), f64::from(sq), f64::from(a), c),
            )
        })
}

fn arb_round() -> impl Strategy<Value = Vec<TallyWorker>> {
    (1usize..=10).prop_flat_map(|n| (0..n).map(|i| arb_worker(i as u8 + 1)).collect::<Vec<_>>())
}

proptest! {
    #[test]
    fn tally_properties(workers in arb_round(), tie in prop_oneof![Just(TieRule::Yes), Just(TieRule::No)]) {
        let n = workers.len();
        let anyone = workers.iter().any(|w| w.vote.is_some());
        match tally(U256::from(1).into(), &workers, tie) {
            Ok(out) => {
                prop_assert!(anyone);
                prop_assert_eq!(out.dim_scores().len(), 3 * n);
                prop_assert!(out.dim_scores().iter().all(|s| *s <= 100));
                prop_assert!(out.weights().iter().fold(U256::ZERO, |a, b| a + b) > U256::ZERO);
                for (w, r) in workers.iter().zip(&out.workers) {
                    prop_assert_eq!(w.address, r.address);
                    if w.vote.is_none() { prop_assert_eq!(r.weight, 0); }
                }
                let r = decode_report(&out.report()).unwrap();
                prop_assert_eq!(r.dim_scores, out.dim_scores());
            }
            Err(TallyError::NoResponders) => prop_assert!(!anyone),
            Err(TallyError::ZeroTotalWeight) => {
                prop_assert!(workers.iter().filter(|w| w.vote.is_some()).all(|w| w.scores.reduce().quality() == 0.0));
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

fn cli(input: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .args(["tally", "--input", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn scores_json(v: [f64; 8]) -> Value {
    let mut o = json!({});
    for (n, x) in Dimensions::NAMES.iter().zip(v) {
        o[n] = json!(x);
    }
    o
}

#[test]
fn cli_abstention_is_rewarded_but_does_not_vote() {
    let input = |abstain: bool| {
        json!({
            "market_id": 4,
            "workers": [
                {"address": format!("{}", Address::repeat_byte(1)), "responded": true, "determination": true, "confidence": 0.7, "scores": scores_json([60.0; 8])},
                {"address": format!("{}", Address::repeat_byte(2)), "responded": true, "determination": false, "abstain": abstain, "confidence": 0.9, "scores": scores_json([90.0; 8])}
            ]
        })
        .to_string()
    };
    // voting NO, the stronger worker carries the market
    let (code, out, err) = cli(&input(false));
    assert_eq!(code, 0, "{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["resolution"], json!(false));
    assert_eq!(out["weights"], json!(["3000", "18000"]));
    // abstaining, it weighs nothing in the vote and is rewarded at the 50 multiplier
    let (code, out, err) = cli(&input(true));
    assert_eq!(code, 0, "{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["resolution"], json!(true));
    assert_eq!(out["weights"], json!(["12000", "4500"]));
}

#[test]
fn cli_matches_the_library_and_rejects_bad_fields() {
    let input = json!({
        "market_id": 9,
        "workers": [
            {"address": format!("{}", Address::repeat_byte(1)), "responded": true, "determination": true, "confidence": 0.9, "scores": scores_json([80.0; 8])},
            {"address": format!("{}", Address::repeat_byte(2)), "responded": true, "determination": false, "confidence": 0.6, "scores": scores_json(B),
             "reputation": {"resQuality": 70, "srcQuality": 60, "analysisDepth": 50, "count": 3}},
            {"address": format!("{}", Address::repeat_byte(3)), "responded": true, "determination": true, "confidence": 0.8, "scores": scores_json(C),
             "reputation": {"resQuality": 88, "srcQuality": 75, "analysisDepth": 69, "count": 5}},
            {"address": format!("{}", Address::repeat_byte(4)), "responded": false}
        ]
    });
    let (code, out, err) = cli(&input.to_string());
    assert_eq!(code, 0, "{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["resolution"], json!(true));
    assert_eq!(out["weights"], json!(["16000", "3025", "18591", "0"]));
    assert_eq!(
        out["dimScores"],
        json!([80, 80, 80, 57, 66, 43, 85, 72, 61, 0, 0, 0])
    );
    assert_eq!(
        out["workers"][3],
        json!(Address::repeat_byte(4).to_string())
    );
    let report = alloy::hex::decode(out["report"].as_str().unwrap()).unwrap();
    assert_eq!(
        decode_report(&report).unwrap().weights[2],
        U256::from(18591)
    );

    let mut bad = input.clone();
    bad["workers"][1]["confidence"] = json!("high");
    let (code, _, err) = cli(&bad.to_string());
    assert_eq!(code, 2);
    assert!(err.contains("workers[1].confidence"), "{err}");

    let mut bad = input.clone();
    bad["workers"][2]["scores"]["timeliness"] = json!(140);
    let (code, _, err) = cli(&bad.to_string());
    assert_eq!(code, 2);
    assert!(err.contains("workers[2].scores.timeliness"), "{err}");

    let mut bad = input.clone();
    bad["workers"][0]
        .as_object_mut()
        .unwrap()
        .remove("determination");
    let (code, _, err) = cli(&bad.to_string());
    assert_eq!(code, 2);
    assert!(err.contains("workers[0].determination"), "{err}");

    let mut bad = input.clone();
    bad["workers"][0]["address"] = json!("0x1234");
    let (code, _, err) = cli(&bad.to_string());
    assert_eq!(code, 2);
    assert!(err.contains("workers[0].address"), "{err}");

    let (code, _, err) = cli("{\"market_id\": 1, \"workers\": [], \"tie\": \"maybe\"}");
    assert_eq!(code, 2);
    assert!(err.contains("tie"), "{err}");
}
