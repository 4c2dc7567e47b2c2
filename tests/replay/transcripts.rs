//! Replays of recorded rounds: bit for bit under the recorded workflow, named differences under a changed one, an LLM-scored round from its recorded reply.

use super::*;
use cresolver_store::RoundKey;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_round_is_exported_and_replays_bit_for_bit_and_differences_are_named() {
    let s = market_with_workers(
        good_uris(&[
            (DeterminationMode::Yes, 0.9),
            (DeterminationMode::Yes, 0.7),
            (DeterminationMode::No, 0.6),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("bitexact");
    let wf = workflow_file(&dir, "wf.toml", |t| t);
    let r = start(node_config(&s, &dir, wf), s.dev.signers[0].clone()).await;
    let request = s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    r.stop().await;

    // the stored transcript has the request and the receipt outcome
    let stored = report.transcript.unwrap();
    assert_eq!(stored["version"], 2);
    assert_eq!(
        stored["request"]["block"].as_u64(),
        request.block_number,
        "{}",
        stored["request"]
    );
    assert_eq!(
        stored["request"]["tx"].as_str().unwrap(),
        request.transaction_hash.to_string()
    );
    assert_eq!(stored["confirmation"]["status"], "confirmed");
    assert_eq!(
        stored["confirmation"]["tx_hash"].as_str().unwrap(),
        report.tx_hash.unwrap().to_string()
    );

    let market = s.dev.contracts.market.to_string();
    let rpc = s.dev.rpc_url();
    let data = dir.join("data");
    let store_args = ["--data-dir", p(&data), "--market-address", market.as_str()];
    check_rounds_show(&store_args, &stored).await;
    let file = check_rounds_export(&s, &dir, &store_args).await;
    check_replay_agrees(&file, &rpc, request.block_number).await;
    check_replay_offline_by_market_and_live(&file, &rpc, &store_args).await;
    check_tampered_answer_differs(&dir, &file, &rpc).await;
    check_changed_workflow_is_named(&dir, &file, &rpc).await;

    // a corrupt field is named with the file
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    doc["outcome"]["tally"]["workers"][1]["weight"] = json!("lots");
    let corrupt = dir.join("corrupt.json");
    std::fs::write(&corrupt, doc.to_string()).unwrap();
    let out = cli(&["replay", "--transcript", p(&corrupt), "--offline"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains(p(&corrupt)) && err.contains("outcome.tally.workers[1].weight"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rounds show --json` prints the export document of the confirmed round with its
/// transaction manager's record (`stored` is the node's transcript); the text form names
/// the state, every worker and the mined attempt.
async fn check_rounds_show(store_args: &[&str], stored: &Value) {
    // rounds show --json: the export document
    let mut args = vec!["rounds", "show", "0", "--json"];
    args.extend(store_args);
    let out = cli(&args, &[]).await;
    assert!(out.status.success(), "{}", show(&out));
    let shown = json_of(&out);
    assert_eq!(shown["round"]["state"], "confirmed");
    assert_eq!(
        shown["round"]["submit_tx"],
        stored["confirmation"]["tx_hash"]
    );
    // the transaction manager's record: one nonce, its attempt mined
    assert_eq!(shown["transactions"][0]["state"], "mined", "{shown}");
    assert_eq!(
        shown["transactions"][0]["attempts"][0]["tx_hash"],
        stored["confirmation"]["tx_hash"]
    );
    assert_eq!(shown["transactions"][0]["attempts"][0]["state"], "mined");
    // and as text
    let mut args = vec!["rounds", "show", "0"];
    args.extend(store_args);
    let out = cli(&args, &[]).await;
    let so = text(&out.stdout);
    assert!(
        out.status.success()
            && so.contains("confirmed")
            && so.contains("worker #3")
            && so.contains("attempt 0: tx ")
            && so.contains(", mined"),
        "{}",
        show(&out)
    );
}

/// `rounds export` writes one file per round; the library replay of that file reproduces
/// the report bytes bit for bit. Returns the exported file.
async fn check_rounds_export(s: &MarketSetup, dir: &Path, store_args: &[&str]) -> PathBuf {
    let exported = dir.join("export");
    let mut args = vec!["rounds", "export", "--out", p(&exported)];
    args.extend(store_args);
    let out = cli(&args, &[]).await;
    assert!(out.status.success(), "{}", show(&out));
    let file = exported.join(cresolver_pipeline::transcript::export_file_name(
        RoundKey::new(s.dev.contracts.market, s.market_id),
    ));
    assert!(file.is_file(), "{}", show(&out));
    assert_eq!(std::fs::read_dir(&exported).unwrap().count(), 1);
    // CRESOLVER_WRITE_FIXTURE=1 refreshes the version-2 transcript that
    // `a_stored_v2_transcript_still_loads_and_replays` keeps loading
    if std::env::var_os("CRESOLVER_WRITE_FIXTURE").is_some() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        std::fs::create_dir_all(&fixtures).unwrap();
        std::fs::copy(&file, fixtures.join("transcript-v2.json")).unwrap();
    }

    // the library replay reproduces the report bytes bit for bit
    let t = Transcript::load(&file).unwrap();
    let replayed = cresolver_pipeline::replay::replay_transcript(&t, &t.workflow);
    assert_eq!(
        replayed.report.as_ref(),
        Some(&t.outcome.as_ref().unwrap().report)
    );
    file
}

/// The CLI replay of the exported transcript agrees with the chain (exit 0), as JSON and
/// as a table; `request_block` is the block of the round's request.
async fn check_replay_agrees(file: &Path, rpc: &str, request_block: Option<u64>) {
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(file),
            "--rpc-url",
            rpc,
            "--json",
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    let v = json_of(&out);
    let m = &v["markets"][0];
    assert_eq!(v["all_agree"], true, "{v:#}");
    assert_eq!(m["agree"], true);
    assert_eq!(m["report_identical"], true);
    assert_eq!(m["on_chain"]["resolved"], true);
    assert_eq!(m["on_chain"]["resolution"], true);
    assert_eq!(m["differences_vs_chain"], json!([]));
    assert_eq!(m["differences_vs_transcript"], json!([]));
    assert_eq!(m["chain_check"]["consistent"], true, "{m:#}");
    assert_eq!(m["request"]["block"].as_u64(), request_block);
    // the table
    let out = cli(&["replay", "--transcript", p(file), "--rpc-url", rpc], &[]).await;
    assert!(out.status.success(), "{}", show(&out));
    let table = text(&out.stdout);
    let row = table.lines().nth(1).unwrap();
    for cell in ["0", "YES", "yes", "identical"] {
        assert!(row.contains(cell), "{table}");
    }
    assert!(table.contains("1 of 1 market(s) agree"), "{table}");
}

/// The round replays offline (no RPC, compared with the recorded round), by market id
/// with the transcript from the store, and live with today's workers.
async fn check_replay_offline_by_market_and_live(file: &Path, rpc: &str, store_args: &[&str]) {
    // offline: no RPC at all, compared with the recorded round
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(file),
            "--offline",
            "--rpc-url",
            "http://127.0.0.1:1",
            "--json",
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(json_of(&out)["markets"][0]["on_chain"]["checked"], false);

    // replay by market id, with the transcript from the store
    let mut args = vec!["replay", "--market", "0", "--rpc-url", rpc, "--json"];
    args.extend(store_args);
    let out = cli(&args, &[]).await;
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(json_of(&out)["markets"][0]["source"], "transcript");

    // --live: today's workers, the market read at the request's block
    let mut args = vec![
        "replay",
        "--market",
        "0",
        "--live",
        "--rpc-url",
        rpc,
        "--json",
    ];
    args.extend(store_args);
    let out = cli(
        &args,
        &[(
            "CRESOLVER__DISCOVERY__ALLOW_PRIVATE_ENDPOINTS",
            "true".into(),
        )],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    let v = json_of(&out);
    assert_eq!(v["markets"][0]["source"], "live");
    assert_eq!(v["markets"][0]["report_identical"], true, "{v:#}");
}

/// A transcript whose NO worker is edited to say YES disagrees with the chain (exit 1):
/// the JSON names the changed weight of slot 3, the table the differing row.
async fn check_tampered_answer_differs(dir: &Path, file: &Path, rpc: &str) {
    // tamper with a worker's answer: the NO worker now says YES
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let answer = &mut doc["outcome"]["resolve"]["results"][2]["outcome"]["Ok"];
    assert_eq!(answer["determination"], false);
    answer["determination"] = json!(true);
    let tampered = dir.join("tampered.json");
    std::fs::write(&tampered, doc.to_string()).unwrap();
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(&tampered),
            "--rpc-url",
            rpc,
            "--json",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let v = json_of(&out);
    let m = &v["markets"][0];
    assert_eq!(m["agree"], false);
    assert_eq!(m["report_identical"], false);
    let diffs = m["differences_vs_chain"].as_array().unwrap();
    assert!(
        diffs
            .iter()
            .any(|d| d["what"] == "weight" && d["slot"] == 3 && d["baseline"] != d["replayed"]),
        "{m:#}"
    );
    let out = cli(
        &["replay", "--transcript", p(&tampered), "--rpc-url", rpc],
        &[],
    )
    .await;
    let table = text(&out.stdout);
    let row = table.lines().nth(1).unwrap();
    assert!(
        row.contains("NO") && row.contains("#3") && row.contains("differs"),
        "{table}"
    );
}

/// Replayed under a workflow with a fixed quorum of 4 out of 3 workers, the round has no
/// quorum (exit 1) and the changed parameter is named, in the JSON and in the text.
async fn check_changed_workflow_is_named(dir: &Path, file: &Path, rpc: &str) {
    let strict = workflow_file(dir, "strict.toml", |t| {
        t.replace("rule = \"bft\"", "rule = 4")
    });
    assert_ne!(
        std::fs::read_to_string(&strict).unwrap(),
        cresolver_devnet::demo::DEFAULT_WORKFLOW,
        "the default workflow spells out the quorum rule"
    );
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(file),
            "--workflow",
            p(&strict),
            "--rpc-url",
            rpc,
            "--json",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let v = json_of(&out);
    let m = &v["markets"][0];
    assert_eq!(m["replayed"]["status"], "no_quorum");
    let changes = m["workflow_changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{m:#}");
    assert_eq!(changes[0]["parameter"], "quorum.rule");
    assert_eq!(changes[0]["replayed"], 4);
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(file),
            "--workflow",
            p(&strict),
            "--rpc-url",
            rpc,
        ],
        &[],
    )
    .await;
    assert!(
        text(&out.stdout).contains("`quorum.rule` changed"),
        "{}",
        show(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tie_rule_is_named_and_flips_a_tied_market() {
    // Two workers, same confidence, opposite answers, same texts: an exact tie.
    let s = market_with_workers(
        good_uris(&[(DeterminationMode::Yes, 0.8), (DeterminationMode::No, 0.8)]).await,
    )
    .await;
    let dir = tmpdir("tie");
    let wf = workflow_file(&dir, "wf.toml", |t| t);
    // a manual request (as `cresolver resolve` makes): no ResolutionRequested log
    let node = Node::build(node_config(&s, &dir, wf), Some(s.dev.signers[0].clone()))
        .await
        .unwrap();
    node.request(s.market_id.into()).await.unwrap();
    let report = node
        .run_round(RoundKey::new(s.dev.contracts.market, s.market_id))
        .await
        .unwrap();
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    drop(node);
    let t = report.transcript.unwrap();
    assert_eq!(t["request"], json!({"tx": null, "block": null}));
    assert_eq!(
        t["outcome"]["tally"]["tie"], true,
        "{:#}",
        t["outcome"]["tally"]
    );
    assert_eq!(t["outcome"]["tally"]["resolution"], true);
    let file = dir.join("t.json");
    std::fs::write(&file, t.to_string()).unwrap();
    let tie_no = workflow_file(&dir, "no.toml", |t| {
        t.replace("tie = \"yes\"", "tie = \"no\"")
    });
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(&file),
            "--workflow",
            p(&tie_no),
            "--rpc-url",
            &s.dev.rpc_url(),
            "--json",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let v = json_of(&out);
    let m = &v["markets"][0];
    assert_eq!(m["workflow_changes"][0]["parameter"], "tally.tie", "{m:#}");
    assert_eq!(m["replayed"]["tally"]["resolution"], false);
    assert!(
        m["differences_vs_chain"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["what"] == "resolution" && d["baseline"] == "YES" && d["replayed"] == "NO"),
        "{m:#}"
    );
    // under the recorded workflow it agrees again
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(&file),
            "--rpc-url",
            &s.dev.rpc_url(),
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    // and by market id from the store, though no request log exists
    let out = cli(
        &[
            "replay",
            "--market",
            "0",
            "--rpc-url",
            &s.dev.rpc_url(),
            "--market-address",
            &s.dev.contracts.market.to_string(),
            "--data-dir",
            p(&dir.join("data")),
            "--json",
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    let m = &json_of(&out)["markets"][0];
    assert_eq!(
        (m["agree"].clone(), m["report_identical"].clone()),
        (json!(true), json!(true)),
        "{m:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_scored_round_replays_from_the_recorded_reply_without_calling_the_llm() {
    let s = market_with_workers(
        good_uris(&[(DeterminationMode::Yes, 0.9), (DeterminationMode::No, 0.6)]).await,
    )
    .await;
    let dims = |v: f64| {
        let mut o = serde_json::Map::new();
        for n in cresolver_core::Dimensions::NAMES {
            o.insert(n.into(), json!(v));
        }
        o
    };
    let mut w1 = dims(81.0);
    w1.insert("workerId".into(), json!("W1"));
    let mut w2 = dims(40.4);
    w2.insert("workerId".into(), json!("W2"));
    // fenced, with a fraction to round: the parser's work shows in the scores
    let content = format!("```json\n{}\n```", json!({"workers": [w1, w2]}));
    let (url, server) = llm_server(vec![Scripted::content(&content)]).await;
    let dir = tmpdir("llm");
    // CARGO_PKG_NAME is set by cargo for test runs: a harmless stand-in for an API key
    let wf = workflow_file(&dir, "wf.toml", |t| {
        t.replace("kind = \"rubric\"", "kind = \"llm\"").replace(
            "[tally]",
            &format!(
                "[evaluator.llm]\nbase_url = \"{url}\"\nmodel = \"test\"\napi_key_env = \"CARGO_PKG_NAME\"\nretries = 0\n\n[tally]"
            ),
        )
    });
    let r = start(node_config(&s, &dir, wf), s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    r.stop().await;
    let t = report.transcript.unwrap();
    let ev = &t["outcome"]["evaluation"];
    assert_eq!(ev["evaluator"], "llm", "{ev:#}");
    assert_eq!(ev["raw_reply"], json!(content));
    assert_eq!(ev["scores"][1]["timeliness"], 40.0);
    let calls = server.requests.lock().unwrap().len();
    assert_eq!(calls, 1);
    let file = dir.join("t.json");
    std::fs::write(&file, t.to_string()).unwrap();

    for offline in [true, false] {
        let rpc = s.dev.rpc_url();
        let mut args = vec!["replay", "--transcript", p(&file), "--json"];
        if offline {
            args.push("--offline");
        } else {
            args.extend(["--rpc-url", rpc.as_str()]);
        }
        let out = cli(&args, &[]).await;
        assert!(out.status.success(), "{}", show(&out));
        let m = &json_of(&out)["markets"][0];
        assert_eq!(m["report_identical"], true, "{m:#}");
        assert_eq!(m["replayed"]["evaluation"]["evaluator"], "llm");
    }
    assert_eq!(
        server.requests.lock().unwrap().len(),
        calls,
        "a transcript replay never calls the LLM"
    );

    // a different recorded reply changes the replay: the reply is what is replayed. W2
    // is the worker the evaluator saw second (a random order, recorded; slots count from 1)
    let w2_slot = t["outcome"]["evaluation"]["order"][1].as_u64().unwrap() + 1;
    let mut doc = t.clone();
    let changed = content.replace("40.4", "90");
    doc["outcome"]["evaluation"]["raw_reply"] = json!(changed);
    let edited = dir.join("edited.json");
    std::fs::write(&edited, doc.to_string()).unwrap();
    let out = cli(
        &["replay", "--transcript", p(&edited), "--offline", "--json"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let m = &json_of(&out)["markets"][0];
    assert_eq!(m["report_identical"], false);
    assert!(
        m["differences_vs_transcript"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["slot"] == w2_slot && d["what"] == "srcQuality"),
        "{m:#}"
    );
    // an unusable recorded reply goes through the workflow's fallback (rubric)
    doc["outcome"]["evaluation"]["raw_reply"] = json!("no scores today");
    std::fs::write(&edited, doc.to_string()).unwrap();
    let out = cli(
        &["replay", "--transcript", p(&edited), "--offline", "--json"],
        &[],
    )
    .await;
    let m = &json_of(&out)["markets"][0];
    let ev = &m["replayed"]["evaluation"];
    assert_eq!(ev["evaluator"], "rubric", "{m:#}");
    assert!(
        ev["fallback_reason"]
            .as_str()
            .unwrap()
            .contains("recorded LLM reply"),
        "{ev:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ─── A JSON-RPC proxy that refuses large eth_getLogs ranges ─────────────────────────
