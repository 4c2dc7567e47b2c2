//! A short pass of the fuzz harness (`cresolver fuzz` runs 1,000,000 cases per target):
//! every parser of untrusted bytes returns, whatever it is given; none panics.

#[test]
fn every_parser_survives_a_short_fuzz_run() {
    let targets = cresolver_pipeline::fuzz::targets();
    let names: Vec<&str> = targets.iter().map(|t| t.name).collect();
    for family in [
        "a2a_resolve",
        "a2a_challenge",
        "factagora_reply",
        "roundtable_reply",
        "chorus_result",
        "agora_envelope",
        "agora_poll",
        "registration",
        "data_uri",
        "llm_reply",
        "rpc_log",
    ] {
        assert!(
            names.contains(&family),
            "no fuzz target {family}: {names:?}"
        );
    }
    for t in &targets {
        let r = cresolver_pipeline::fuzz::run(t, 5_000, 7);
        assert_eq!(r.cases, 5_000);
        assert_eq!(
            r.panic_count,
            0,
            "{}: {} panics; first: {:?} on input {}",
            t.name,
            r.panic_count,
            r.panics.first().map(|p| &p.1),
            r.panics
                .first()
                .map(|p| alloy::hex::encode(&p.0))
                .unwrap_or_default()
        );
    }
}
