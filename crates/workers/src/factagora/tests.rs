//! Tests of the Factagora adapter: requests, every validation rule, retries and the error body.

use super::*;

fn good() -> Value {
    json!({
        "position": "NO",
        "confidence": 0.85,
        "reactCycle": {
            "initialThought": "AGI has been predicted for decades but never materialized.",
            "actions": [
                {"type": "database_query", "query": "historical AGI predictions", "result": "95% wrong"},
                {"type": "web_search", "query": "AGI compute", "result": "100x gap", "source": "https://search.example/q"}
            ],
            "observations": ["Base rate favours skepticism", "Compute gap is large"],
            "synthesisThought": "Every data point supports skepticism. Even optimistic estimates put AGI at 2030+, and alignment is unsolved, so 2026 is very unlikely.",
            "evidence": [
                {"type": "data", "title": "Historical accuracy: 5%", "description": "95% failed", "reliability": 0.95},
                {"type": "link", "title": "Compute requirements", "url": "https://arxiv.example/1"},
                {"type": "citation", "title": "Alignment status", "url": "https://arxiv.example/1"}
            ]
        },
        "reasoning": "Base rates, hardware and alignment make it unlikely.",
        "limitations": ["Unknown unknowns"]
    })
}

#[test]
fn good_response_maps_to_answer() {
    let r = validate_agent_response(&good()).unwrap();
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    let a = r.into_answer().unwrap();
    assert!(!a.determination && !a.abstain);
    assert_eq!(a.confidence, 0.85);
    assert_eq!(
        a.sources,
        vec!["https://arxiv.example/1", "https://search.example/q"]
    );
    for needle in [
        "Position: NO (confidence 0.85)",
        "Summary: Base rates",
        "Initial thought: AGI has been",
        "2. web_search: \"AGI compute\" -> 100x gap (https://search.example/q)",
        "- Compute gap is large",
        "Synthesis: Every data point",
        "- [data] Historical accuracy: 5%: 95% failed (reliability 0.95)",
        "Limitations:\n- Unknown unknowns",
    ] {
        assert!(a.evidence.contains(needle), "{needle:?} in {}", a.evidence);
    }
}

#[test]
fn neutral_abstains() {
    let mut v = good();
    v["position"] = json!("NEUTRAL");
    let a = validate_agent_response(&v).unwrap().into_answer().unwrap();
    assert!(a.abstain && !a.determination);
    assert_eq!(a.position(), cresolver_core::Position::Abstain);
}

/// A value put in place of a good response's field, breaking one rule: where (a JSON
/// pointer), the value, and what the error must say.
type Violation = (&'static str, Value, &'static str);

/// Violations of the rules of the top-level fields.
fn top_level_violations() -> Vec<Violation> {
    vec![
        ("/position", json!("yes"), "`position` must be exactly"),
        ("/position", json!(1), "`position` must be a string"),
        ("/confidence", json!(1.01), "`confidence` = 1.01 is outside"),
        ("/confidence", json!(-0.5), "outside [0.0, 1.0]"),
        ("/confidence", json!("0.5"), "`confidence` must be a number"),
        ("/reactCycle", json!([]), "`reactCycle` must be an object"),
        (
            "/reasoning",
            json!("r".repeat(1001)),
            "`reasoning` is 1001 characters; at most 1000",
        ),
        ("/reasoning", json!(["r"]), "`reasoning` must be a string"),
        (
            "/limitations",
            json!("none"),
            "`limitations` must be an array of strings",
        ),
    ]
}

/// Violations of the rules inside `reactCycle`.
fn react_cycle_violations() -> Vec<Violation> {
    let long = "x".repeat(2001);
    vec![
        (
            "/reactCycle/initialThought",
            json!("short"),
            "`reactCycle.initialThought` is 5 characters; at least 20",
        ),
        (
            "/reactCycle/initialThought",
            json!("                         "),
            "`reactCycle.initialThought` is empty",
        ),
        (
            "/reactCycle/initialThought",
            json!(long),
            "is 2001 characters; at most 2000",
        ),
        (
            "/reactCycle/synthesisThought",
            json!("too short"),
            "`reactCycle.synthesisThought` is 9 characters",
        ),
        (
            "/reactCycle/actions",
            json!([]),
            "`reactCycle.actions` has 0 entries; at least 1",
        ),
        (
            "/reactCycle/actions",
            json!({}),
            "`reactCycle.actions` must be an array",
        ),
        (
            "/reactCycle/actions",
            json!(vec![
                json!({"type":"web_search","query":"q","result":"r"});
                11
            ]),
            "has 11 entries; at most 10",
        ),
        (
            "/reactCycle/actions/0/query",
            Value::Null,
            "`reactCycle.actions[0].query` must be a string",
        ),
        (
            "/reactCycle/actions/1/result",
            json!(""),
            "`reactCycle.actions[1].result` is empty",
        ),
        (
            "/reactCycle/observations",
            json!([]),
            "`reactCycle.observations` has 0 entries",
        ),
        (
            "/reactCycle/observations",
            json!(vec!["o"; 21]),
            "has 21 entries; at most 20",
        ),
        (
            "/reactCycle/observations/1",
            json!(3),
            "`reactCycle.observations[1]` must be a string",
        ),
        (
            "/reactCycle/evidence",
            json!([]),
            "`reactCycle.evidence` has 0 entries",
        ),
        (
            "/reactCycle/evidence",
            json!(vec![json!({"type":"data","title":"t"}); 11]),
            "has 11 entries; at most 10",
        ),
        (
            "/reactCycle/evidence/2/type",
            json!(7),
            "`reactCycle.evidence[2].type` must be a string",
        ),
        (
            "/reactCycle/evidence/0/reliability",
            json!("high"),
            "`reactCycle.evidence[0].reliability` must be a number",
        ),
        (
            "/reactCycle/evidence/1/url",
            json!(5),
            "`reactCycle.evidence[1].url` must be a string",
        ),
    ]
}

#[test]
fn every_validation_rule_names_its_field() {
    let cases = top_level_violations()
        .into_iter()
        .chain(react_cycle_violations());
    for (pointer, value, needle) in cases {
        let mut v = good();
        *v.pointer_mut(pointer).unwrap() = value;
        let err = validate_agent_response(&v).unwrap_err();
        assert!(
            matches!(err, WorkerFailure::Schema { .. }),
            "{pointer}: {err}"
        );
        assert!(err.to_string().contains(needle), "{pointer}: {err}");
    }
    let removals = [
        (
            "/reactCycle/evidence/1",
            "title",
            "`reactCycle.evidence[1].title` is missing",
        ),
        (
            "/reactCycle/actions/0",
            "type",
            "`reactCycle.actions[0].type` is missing",
        ),
        (
            "/reactCycle",
            "observations",
            "`reactCycle.observations` is missing",
        ),
        ("", "confidence", "`confidence` is missing"),
        ("", "reactCycle", "`reactCycle` is missing"),
    ];
    for (pointer, key, needle) in removals {
        let mut v = good();
        v.pointer_mut(pointer)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove(key);
        let err = validate_agent_response(&v).unwrap_err();
        assert!(err.to_string().contains(needle), "{key}: {err}");
    }
    // Boundaries are inclusive.
    let mut v = good();
    v["reactCycle"]["initialThought"] = json!("x".repeat(20));
    v["reactCycle"]["synthesisThought"] = json!("é".repeat(2000));
    v["reasoning"] = json!("r".repeat(1000));
    v["confidence"] = json!(1.0);
    assert!(validate_agent_response(&v).is_ok());
    let mut v = good();
    v["confidence"] = json!(0);
    assert!(validate_agent_response(&v).is_ok());
}

#[test]
fn soft_checks_are_notes() {
    let mut v = good();
    v["confidence"] = json!(0.97);
    v["reactCycle"]["actions"] = json!([{"type": "guess", "query": "q", "result": "r"}]);
    v["reactCycle"]["evidence"] = json!([
        {"type": "video", "title": "t", "reliability": 0.5, "description": "d".repeat(201)},
        {"type": "data", "title": "u", "reliability": 3}
    ]);
    v["reactCycle"]["synthesisThought"] = json!("A brief synthesis of things.");
    let r = validate_agent_response(&v).unwrap();
    let all = r.notes.join("\n");
    for needle in [
        "confidence 0.97 is above 0.95 without high-reliability evidence",
        "only 2 evidence item(s)",
        "no web_search action",
        "synthesisThought is too brief (28 characters",
        "`reactCycle.actions[0].type` \"guess\" is not one of",
        "`reactCycle.evidence[0].type` \"video\" is not link, data or citation",
        "`reactCycle.evidence[0].description` is 201 characters",
        "`reactCycle.evidence[1].reliability` = 3 is outside [0, 1]",
    ] {
        assert!(all.contains(needle), "{needle:?} in {all}");
    }
    let a = r.into_answer().unwrap();
    assert_eq!(a.notes.len(), 8);
}

#[test]
fn evidence_and_sources_are_bounded() {
    let mut v = good();
    let big = "😀".repeat(1990);
    v["reactCycle"]["observations"] = json!(vec![big.clone(); 20]);
    v["reactCycle"]["initialThought"] = json!(big.clone());
    v["limitations"] = json!(vec![big; 200]);
    let url = format!("https://x.example/{}", "a".repeat(MAX_SOURCE_BYTES));
    v["reactCycle"]["evidence"][0]["url"] = json!(url);
    let a = validate_agent_response(&v).unwrap().into_answer().unwrap();
    assert!(a.evidence.len() <= MAX_EVIDENCE_BYTES);
    assert!(a.evidence.ends_with('…'));
    assert!(a.notes.iter().any(|n| n.contains("cut to 65536 bytes")));
    assert_eq!(a.sources.len(), 2);
    assert!(a.notes.iter().any(|n| n.contains("longer than 2048 bytes")));
}

#[test]
fn prediction_request_shape() {
    let req = ResolveRequest {
        market_id: 7,
        question: "Will it rain?".into(),
        deadline: Some(1_798_761_599),
        context: None,
    };
    let body = prediction_request(&req, 1, None, 0);
    assert_eq!(body["title"], "Will it rain?");
    assert_eq!(body["description"], "Will it rain?");
    assert_eq!(body["deadline"], "2026-12-31T23:59:59Z");
    assert_eq!(body["roundNumber"], 1);
    assert!(body.get("existingArguments").is_none());
    let id = body["predictionId"].as_str().unwrap();
    assert_eq!(id, prediction_id(7, "Will it rain?"));
    assert_ne!(id, prediction_id(8, "Will it rain?"));
    let parsed = uuid::Uuid::parse_str(id).unwrap();
    assert_eq!(parsed.get_version_num(), 8);
    let no_deadline = ResolveRequest {
        deadline: None,
        context: Some("ctx".into()),
        ..req
    };
    let body = prediction_request(&no_deadline, 2, Some(vec![]), 86_400 * 365);
    assert_eq!(body["deadline"], "1971-01-01T00:00:00Z");
    assert_eq!(body["description"], "ctx");
    assert_eq!(body["existingArguments"], json!([]));
}

#[test]
fn iso_dates() {
    assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
    assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(iso8601_utc(1_770_819_309), "2026-02-11T14:15:09Z");
}

#[test]
fn error_body_becomes_rejected_even_when_cut() {
    let full = WorkerFailure::HttpStatus {
            status: 500,
            excerpt: r#"{"code":"LLM_API_ERROR","error":"Internal agent error","message":"Failed to connect"}"#.into(),
        };
    assert_eq!(
        error_response(full),
        WorkerFailure::Rejected {
            code: "LLM_API_ERROR".into(),
            detail: "Failed to connect".into()
        }
    );
    let cut = WorkerFailure::HttpStatus {
        status: 503,
        excerpt: r#"{"code": "RATE_LIMIT", "error": "Too many", "message": "slow do"#.into(),
    };
    assert_eq!(
        error_response(cut),
        WorkerFailure::Rejected {
            code: "RATE_LIMIT".into(),
            detail: "Too many".into()
        }
    );
    for kept in [
        WorkerFailure::HttpStatus {
            status: 401,
            excerpt: r#"{"code":"X","error":"Unauthorized"}"#.into(),
        },
        WorkerFailure::HttpStatus {
            status: 500,
            excerpt: "oops".into(),
        },
        WorkerFailure::Timeout { after_ms: 5 },
    ] {
        assert_eq!(error_response(kept.clone()), kept);
    }
}

#[test]
fn debug_redacts_the_token() {
    let s = FactagoraConfig {
        token: Some("s3cret-token".into()),
        token_hosts: vec!["api.factagora.example".into()],
    };
    let p = FactagoraProtocol::new(s.clone());
    for text in [format!("{s:?}"), format!("{p:?}")] {
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("REDACTED"), "{text}");
    }
}

#[test]
fn round_two_text_notes_a_change() {
    let r = validate_agent_response(&good()).unwrap();
    let own_yes = ResolveAnswer {
        determination: true,
        confidence: 0.8,
        evidence: "e".into(),
        sources: vec![],
        abstain: false,
        notes: vec![],
        cuts: vec![],
    };
    let t = r.round_two_text(&own_yes);
    assert!(
        t.starts_with("Round 2: NO at 85% (position changed from YES in round 1)"),
        "{t}"
    );
    assert!(t.contains("Reasoning: Base rates"), "{t}");
    let own_no = ResolveAnswer {
        determination: false,
        ..own_yes
    };
    assert!(
        r.round_two_text(&own_no)
            .contains("(unchanged from round 1)")
    );
}
