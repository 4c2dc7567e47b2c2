//! Replay, dry-run and round export on anvil: a market resolved live by a node is
//! exported and replayed from its transcript (bit-identical report, "agree"); tampered
//! transcripts and changed workflows show their differences; a block range behind a
//! JSON-RPC proxy that refuses large ranges replays resolved, unresolved and
//! transcript-less markets; dry-runs leave the chain and the resolver's nonce as they
//! were; bad transcripts are clear errors.

mod common;

use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use alloy::signers::local::PrivateKeySigner;
use common::chain::*;
use common::node::{node_config, start, tmpdir, wait_final};
use common::*;
use cresolver_devnet::agent::DeterminationMode;
use cresolver_pipeline::node::Node;
use cresolver_pipeline::transcript::Transcript;
use cresolver_store::RoundState;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Writes the default workflow with `edit` applied to its text.
fn workflow_file(dir: &Path, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        edit(cresolver_devnet::demo::DEFAULT_WORKFLOW.to_string()),
    )
    .unwrap();
    p
}

async fn good_uris(list: &[(DeterminationMode, f64)]) -> Vec<AgentUri> {
    let mut out = Vec::new();
    for (d, c) in list {
        out.push(AgentUri::Endpoint(agent(behaviour(*d, *c)).await));
    }
    out
}

async fn cli(args: &[&str], envs: &[(&str, String)]) -> Output {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"));
    c.args(args)
        .env("CRESOLVER_LOG", "warn")
        .env_remove("CRESOLVER_PRIVATE_KEY");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().await.unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(o)))
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

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
    assert_eq!(report.state, RoundState::Confirmed, "{report:?}");
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

    // rounds export: one file per round
    let exported = dir.join("export");
    let mut args = vec!["rounds", "export", "--out", p(&exported)];
    args.extend(store_args);
    let out = cli(&args, &[]).await;
    assert!(out.status.success(), "{}", show(&out));
    let file = exported.join(cresolver_pipeline::transcript::export_file_name(
        s.dev.contracts.market,
        s.market_id,
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

    // the CLI replay agrees with the chain, exit 0
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(&file),
            "--rpc-url",
            &rpc,
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
    assert_eq!(m["request"]["block"].as_u64(), request.block_number);
    // the table
    let out = cli(
        &["replay", "--transcript", p(&file), "--rpc-url", &rpc],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    let table = text(&out.stdout);
    let row = table.lines().nth(1).unwrap();
    for cell in ["0", "YES", "yes", "identical"] {
        assert!(row.contains(cell), "{table}");
    }
    assert!(table.contains("1 of 1 market(s) agree"), "{table}");

    // offline: no RPC at all, compared with the recorded round
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(&file),
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
    let mut args = vec!["replay", "--market", "0", "--rpc-url", &rpc, "--json"];
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
        &rpc,
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

    // tamper with a worker's answer: the NO worker now says YES
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
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
            &rpc,
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
        &["replay", "--transcript", p(&tampered), "--rpc-url", &rpc],
        &[],
    )
    .await;
    let table = text(&out.stdout);
    let row = table.lines().nth(1).unwrap();
    assert!(
        row.contains("NO") && row.contains("#3") && row.contains("differs"),
        "{table}"
    );

    // a changed workflow parameter is named: a fixed quorum of 4 out of 3 workers
    let strict = workflow_file(&dir, "strict.toml", |t| {
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
            p(&file),
            "--workflow",
            p(&strict),
            "--rpc-url",
            &rpc,
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
            p(&file),
            "--workflow",
            p(&strict),
            "--rpc-url",
            &rpc,
        ],
        &[],
    )
    .await;
    assert!(
        text(&out.stdout).contains("`quorum.rule` changed"),
        "{}",
        show(&out)
    );

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
    node.request(s.market_id).await.unwrap();
    let report = node
        .run_round(s.dev.contracts.market, s.market_id)
        .await
        .unwrap();
    assert_eq!(report.state, RoundState::Confirmed, "{report:?}");
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
    assert_eq!(report.state, RoundState::Confirmed, "{report:?}");
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

#[derive(Clone)]
struct Proxy {
    upstream: String,
    max_span: u64,
    refused: Arc<AtomicUsize>,
    http: reqwest::Client,
}

fn hex_u64(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.trim_start_matches("0x"), 16).ok()
}

async fn proxy_one(p: &Proxy, req: Value) -> Value {
    if req["method"] == "eth_getLogs"
        && let (Some(from), Some(to)) = (
            hex_u64(&req["params"][0]["fromBlock"]),
            hex_u64(&req["params"][0]["toBlock"]),
        )
        && to.saturating_sub(from) + 1 > p.max_span
    {
        p.refused.fetch_add(1, Ordering::SeqCst);
        return json!({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32005,
            "message": format!("query exceeds max block range {}", p.max_span)}});
    }
    p.http
        .post(&p.upstream)
        .json(&req)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn proxy_handler(
    axum::extract::State(p): axum::extract::State<Proxy>,
    axum::Json(body): axum::Json<Value>,
) -> axum::Json<Value> {
    axum::Json(match body {
        Value::Array(items) => {
            let mut out = Vec::new();
            for i in items {
                out.push(proxy_one(&p, i).await);
            }
            Value::Array(out)
        }
        one => proxy_one(&p, one).await,
    })
}

/// Starts the proxy; returns its URL and the refusal counter.
async fn refusing_proxy(upstream: String, max_span: u64) -> (String, Arc<AtomicUsize>) {
    let refused = Arc::new(AtomicUsize::new(0));
    let state = Proxy {
        upstream,
        max_span,
        refused: refused.clone(),
        http: reqwest::Client::new(),
    };
    let app = axum::Router::new()
        .route("/", axum::routing::post(proxy_handler))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_range_replays_resolved_unresolved_and_untranscribed_markets() {
    // market 0 (from the helper) and market 1: good workers, resolved by the node
    let s = market_with_workers(
        good_uris(&[
            (DeterminationMode::Yes, 0.9),
            (DeterminationMode::No, 0.7),
            (DeterminationMode::Yes, 0.6),
        ])
        .await,
    )
    .await;
    let dev = &s.dev;
    let m1 = dev
        .create_market("Second question?", s.reward, 86_400)
        .await
        .unwrap();
    for (i, a) in s.agents.iter().enumerate() {
        dev.join(m1, s.workers[i], a.agent_id, s.stake)
            .await
            .unwrap();
    }
    // market 2: workers that do not answer -> quorum not met, never resolved
    let m2 = dev
        .create_market("Third question?", s.reward, 86_400)
        .await
        .unwrap();
    for k in 4..7 {
        let owner = dev.accounts[k];
        let uri = dev.registration_uri(&format!("down-{k}"), owner, &closed_port_url());
        let agent = dev.register_agent(owner, Some(uri)).await.unwrap();
        dev.join(m2, owner, agent.agent_id, s.stake).await.unwrap();
    }
    // market 3: requested while the node is down (no transcript); market 4: never requested
    let m3 = dev
        .create_market("Fourth question?", s.reward, 86_400)
        .await
        .unwrap();
    for (i, a) in s.agents.iter().enumerate() {
        dev.join(m3, s.workers[i], a.agent_id, s.stake)
            .await
            .unwrap();
    }
    let m4 = dev
        .create_market("Fifth question?", s.reward, 86_400)
        .await
        .unwrap();
    assert_eq!(
        (m1, m2, m3, m4),
        (U256::from(1), U256::from(2), U256::from(3), U256::from(4))
    );

    let dir = tmpdir("range");
    let wf = workflow_file(&dir, "wf.toml", |t| t);
    let r = start(node_config(&s, &dir, wf), dev.signers[0].clone()).await;
    let market = dev.contracts.market;
    for (id, want) in [
        (s.market_id, RoundState::Confirmed),
        (m1, RoundState::Confirmed),
        (m2, RoundState::Failed),
    ] {
        dev.request_resolution(id).await.unwrap();
        let rep = wait_final(&r.node, market, id).await;
        assert_eq!(rep.state, want, "market {id}: {rep:?}");
    }
    r.stop().await;
    dev.request_resolution(m3).await.unwrap();

    let (proxy, refused) = refusing_proxy(dev.rpc_url(), 3).await;
    let data = dir.join("data");
    let market_s = market.to_string();
    let args = [
        "replay",
        "--from-block",
        "0",
        "--rpc-url",
        proxy.as_str(),
        "--market-address",
        market_s.as_str(),
        "--data-dir",
        p(&data),
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let out = cli(&json_args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        refused.load(Ordering::SeqCst) > 0,
        "the proxy refused nothing"
    );
    let v = json_of(&out);
    let rows = v["markets"].as_array().unwrap();
    let ids: Vec<&str> = rows
        .iter()
        .map(|m| m["market_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["0x0", "0x1", "0x2", "0x3"], "{v:#}");
    for m in &rows[..2] {
        assert_eq!(m["agree"], true, "{m:#}");
        assert_eq!(m["on_chain"]["resolved"], true);
        assert_eq!(m["report_identical"], true);
        assert_eq!(m["differences_vs_chain"], json!([]));
    }
    assert_eq!(rows[1]["on_chain"]["resolution"], true);
    // never resolved, and the replay agrees: no quorum
    assert_eq!(rows[2]["on_chain"]["resolved"], false);
    assert_eq!(rows[2]["replayed"]["status"], "no_quorum");
    assert_eq!(rows[2]["agree"], true, "{:#}", rows[2]);
    // never resolved and never transcribed: not replayed, not agreeing
    assert_eq!(rows[3]["on_chain"]["resolved"], false);
    assert_eq!(rows[3]["replayed"]["status"], "unavailable");
    assert_eq!(rows[3]["agree"], false);
    assert_eq!(v["all_agree"], false);

    // the table
    let out = cli(&args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("MARKET") && lines[0].contains("AGREE"),
        "{table}"
    );
    assert!(
        lines[3].contains("unresolved")
            && lines[3].contains("no quorum")
            && lines[3].contains("yes"),
        "{table}"
    );
    assert!(
        lines[4].contains("unresolved")
            && lines[4].contains("NO")
            && lines[4].contains("no transcript"),
        "{table}"
    );
    assert!(table.contains("3 of 4 market(s) agree"), "{table}");

    // a range that holds only resolved markets agrees (exit 0)
    let to = rows[1]["request"]["block"].as_u64().unwrap().to_string();
    let out = cli(
        &[
            "replay",
            "--from-block",
            "0",
            "--to-block",
            &to,
            "--rpc-url",
            proxy.as_str(),
            "--market-address",
            market_s.as_str(),
            "--data-dir",
            p(&data),
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("2 of 2 market(s) agree"),
        "{}",
        show(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ─── Dry-run ─────────────────────────────────────────────────────────────────────────

fn dry_run_config(s: &MarketSetup, dir: &Path) -> PathBuf {
    dry_run_config_with(s, dir, |t| t, "")
}

/// A node config file for the CLI: the devnet, the default workflow with `edit`
/// applied, loopback workers allowed, and `extra` TOML appended.
fn dry_run_config_with(
    s: &MarketSetup,
    dir: &Path,
    edit: impl Fn(String) -> String,
    extra: &str,
) -> PathBuf {
    let wf = workflow_file(dir, "wf.toml", edit);
    let cfg = format!(
        "[chain]\nrpc_url = \"{}\"\nmarket_address = \"{}\"\nmulticall_address = \"{}\"\n\n[node]\ndata_dir = \"{}\"\nworkflows = [\"{}\"]\n\n[discovery]\nallow_private_endpoints = true\n{extra}",
        s.dev.rpc_url(),
        s.dev.contracts.market,
        s.dev.contracts.multicall,
        p(&dir.join("data")),
        p(&wf)
    );
    let path = dir.join("node.toml");
    std::fs::write(&path, cfg).unwrap();
    path
}

fn key_of(s: &PrivateKeySigner) -> String {
    alloy::hex::encode(s.to_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_simulates_without_touching_the_chain() {
    let s = market_with_workers(
        good_uris(&[(DeterminationMode::Yes, 0.9), (DeterminationMode::No, 0.6)]).await,
    )
    .await;
    let dir = tmpdir("dry");
    let config = dry_run_config(&s, &dir);
    let dev = &s.dev;
    let market = dev.contracts.market;

    // the authorizedResolvers slot of the layout is the one the contract uses
    let slot = cresolver_pipeline::dryrun::authorized_resolver_slot(dev.accounts[0]);
    let v = dev
        .provider
        .get_storage_at(market, U256::from_be_bytes(slot.0))
        .await
        .unwrap();
    assert_eq!(
        v,
        U256::from(1),
        "deployer is authorized at the computed slot"
    );
    let slot12 = cresolver_pipeline::dryrun::authorized_resolver_slot(dev.accounts[12]);
    let v = dev
        .provider
        .get_storage_at(market, U256::from_be_bytes(slot12.0))
        .await
        .unwrap();
    assert_eq!(v, U256::ZERO);

    let block_before = dev.provider.get_block_number().await.unwrap();
    let nonce_before = dev
        .provider
        .get_transaction_count(dev.accounts[0])
        .await
        .unwrap();

    // the authorized key: the simulation succeeds
    let out = cli(
        &["dry-run", "--config", p(&config), "--market", "0", "--json"],
        &[("CRESOLVER_PRIVATE_KEY", key_of(&dev.signers[0]))],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    let r = json_of(&out);
    assert_eq!(r["status"], "would_submit", "{r:#}");
    assert_eq!(r["sent"], false);
    assert_eq!(r["resolver_authorized"], true);
    assert_eq!(r["simulation"]["success"], true);
    assert_eq!(r["simulation"]["state_override"], false);
    assert!(
        r["simulation"]["gas_estimate"].as_u64().unwrap() > 50_000,
        "{r:#}"
    );
    assert!(r["override_simulation"].is_null());
    assert!(
        r["simulation"]["calldata"]
            .as_str()
            .unwrap()
            .starts_with(&alloy::hex::encode_prefixed(
                <cresolver_chain::bindings::ICREsolverMarket::resolveMarketCall as alloy::sol_types::SolCall>::SELECTOR
            ))
    );
    let decoded = &r["decoded_report"];
    assert_eq!(decoded["resolution"], true);
    let workers: Vec<Address> = serde_json::from_value(decoded["workers"].clone()).unwrap();
    assert_eq!(workers, s.workers);
    assert!(r["report"].as_str().unwrap().len() > 2);

    // nothing moved
    assert_eq!(dev.provider.get_block_number().await.unwrap(), block_before);
    assert_eq!(
        dev.provider
            .get_transaction_count(dev.accounts[0])
            .await
            .unwrap(),
        nonce_before
    );
    assert!(
        !dev.market()
            .getMarket(s.market_id)
            .call()
            .await
            .unwrap()
            .resolved
    );
    assert!(
        !dir.join("data").exists(),
        "a dry-run must not create a store"
    );

    // a key that is not authorized: the decoded Unauthorized, and the override's verdict
    let outsider = dev.accounts[12];
    let out = cli(
        &["dry-run", "--config", p(&config), "--market", "0", "--json"],
        &[("CRESOLVER_PRIVATE_KEY", key_of(&dev.signers[12]))],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let r = json_of(&out);
    assert_eq!(r["status"], "would_revert");
    assert_eq!(r["resolver_authorized"], false);
    assert_eq!(r["simulation"]["revert"]["name"], "Unauthorized", "{r:#}");
    let o = &r["override_simulation"];
    assert_eq!(o["slot"].as_str().unwrap(), slot12.to_string());
    assert_eq!(o["simulation"]["state_override"], true);
    assert_eq!(o["simulation"]["success"], true, "{o:#}");
    assert!(o["simulation"]["gas_estimate"].as_u64().unwrap() > 50_000);
    // as text, without a key: --from
    let out = cli(
        &[
            "dry-run",
            "--config",
            p(&config),
            "--market",
            "0",
            "--from",
            &outsider.to_string(),
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let so = text(&out.stdout);
    assert!(
        so.contains("NOT authorized")
            && so.contains("reverts with Unauthorized")
            && so.contains("STATE OVERRIDE")
            && so.contains("succeeds; gas estimate")
            && so.contains("would-be report")
            && so.contains("nothing was signed or sent"),
        "{so}"
    );
    assert_eq!(
        dev.provider.get_transaction_count(outsider).await.unwrap(),
        0
    );
    assert_eq!(dev.provider.get_block_number().await.unwrap(), block_before);

    // without --from and without a key: says what to pass
    let out = cli(&["dry-run", "--config", p(&config), "--market", "0"], &[]).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--from"), "{}", show(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_mode_dry_run_then_replay_of_the_forwarded_report() {
    let s = market_with_workers(
        good_uris(&[(DeterminationMode::Yes, 0.9), (DeterminationMode::Yes, 0.8)]).await,
    )
    .await;
    let dev = &s.dev;
    let dir = tmpdir("reportmode");
    let to_report = |t: String| t.replace("mode = \"direct\"", "mode = \"report\"");
    let extra = format!(
        "\n[submit]\nforwarder = \"{}\"\nreceiver = \"{}\"\n",
        dev.contracts.forwarder, dev.contracts.receiver
    );
    let config = dry_run_config_with(&s, &dir, to_report, &extra);

    // dry-run: the resolver the market checks is the receiver, which is authorized
    let key7 = dev.accounts[7];
    let out = cli(
        &[
            "dry-run",
            "--config",
            p(&config),
            "--market",
            "0",
            "--from",
            &key7.to_string(),
            "--json",
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    let r = json_of(&out);
    assert_eq!(r["status"], "would_submit", "{r:#}");
    let addr = |v: &Value| v.as_str().unwrap().parse::<Address>().unwrap();
    assert_eq!(addr(&r["resolver"]), dev.contracts.receiver);
    assert_eq!(r["resolver_authorized"], true);
    assert_eq!(addr(&r["simulation"]["to"]), dev.contracts.forwarder);
    assert_eq!(addr(&r["simulation"]["from"]), key7);
    assert_eq!(
        addr(&r["simulation"]["executes_to"]),
        dev.contracts.receiver
    );
    assert_eq!(dev.provider.get_transaction_count(key7).await.unwrap(), 0);

    // resolve for real in report mode, then replay: the report is read back from the
    // forwarder's calldata and matches
    let mut cfg = node_config(&s, &dir, dir.join("wf.toml"));
    cfg.submit.forwarder = Some(dev.contracts.forwarder);
    cfg.submit.receiver = Some(dev.contracts.receiver);
    let r = start(cfg, dev.signers[7].clone()).await;
    dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, RoundState::Confirmed, "{report:?}");
    r.stop().await;
    let file = dir.join("t.json");
    std::fs::write(&file, report.transcript.unwrap().to_string()).unwrap();
    let out = cli(
        &[
            "replay",
            "--transcript",
            p(&file),
            "--rpc-url",
            &dev.rpc_url(),
            "--json",
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    let m = &json_of(&out)["markets"][0];
    assert_eq!(addr(&m["on_chain"]["resolver"]), dev.contracts.receiver);
    assert!(m["on_chain"]["report"].is_object(), "{m:#}");
    assert_eq!(m["differences_vs_chain"], json!([]));
    assert_eq!(m["agree"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_watch_simulates_each_new_request() {
    let s = market_with_workers(good_uris(&[(DeterminationMode::Yes, 0.9)]).await).await;
    let dir = tmpdir("drywatch");
    let config = dry_run_config(&s, &dir);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .args([
            "dry-run",
            "--config",
            p(&config),
            "--watch",
            "--from",
            &s.dev.accounts[0].to_string(),
            "--json",
        ])
        .env("CRESOLVER_LOG", "warn")
        .env("CRESOLVER__CHAIN__POLL_INTERVAL_MS", "100")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // let the watcher take the head as its start
    tokio::time::sleep(Duration::from_millis(1500)).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let stdout = child.stdout.take().unwrap();
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("a dry-run within 30 s")
        .unwrap()
        .unwrap();
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["market_id"], "0x0");
    assert_eq!(r["status"], "would_submit", "{r:#}");
    assert!(
        !s.dev
            .market()
            .getMarket(s.market_id)
            .call()
            .await
            .unwrap()
            .resolved
    );
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn bad_transcripts_are_errors_naming_file_and_field() {
    let dir = tmpdir("bad");
    let missing = dir.join("nope.json");
    let out = cli(&["replay", "--transcript", p(&missing), "--offline"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(text(&out.stderr).contains(p(&missing)), "{}", show(&out));

    let cut = dir.join("cut.json");
    std::fs::write(&cut, "{\"version\": 2, \"workflow\": {").unwrap();
    let out = cli(&["replay", "--transcript", p(&cut), "--offline"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(p(&cut)) && err.contains("not valid JSON"),
        "{err}"
    );

    let empty = dir.join("empty.json");
    std::fs::write(&empty, "{\"version\": 2}").unwrap();
    let out = cli(&["replay", "--transcript", p(&empty), "--offline"], &[]).await;
    let err = text(&out.stderr);
    assert!(err.contains(p(&empty)) && err.contains("workflow"), "{err}");

    let old = dir.join("future.json");
    std::fs::write(&old, "{\"version\": 7}").unwrap();
    let out = cli(&["replay", "--transcript", p(&old), "--offline"], &[]).await;
    let err = text(&out.stderr);
    assert!(err.contains("`version`") && err.contains('7'), "{err}");

    // a directory of transcripts with one bad file names that file
    let tdir = dir.join("transcripts");
    std::fs::create_dir_all(&tdir).unwrap();
    std::fs::write(tdir.join("a.json"), "[]").unwrap();
    let out = cli(
        &[
            "replay",
            "--market",
            "0",
            "--transcripts",
            p(&tdir),
            "--market-address",
            &Address::repeat_byte(1).to_string(),
            "--rpc-url",
            &closed_port_url(),
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = text(&out.stderr);
    assert!(err.contains("a.json") && err.contains("`version`"), "{err}");

    // rounds show without a store says where it looked
    let out = cli(
        &["rounds", "show", "0", "--data-dir", p(&dir.join("none"))],
        &[],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no round store"),
        "{}",
        show(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_at_the_request_block_gives_the_node_s_report() {
    let s = market_with_workers(
        good_uris(&[
            (DeterminationMode::Yes, 0.9),
            (DeterminationMode::Yes, 0.7),
            (DeterminationMode::No, 0.6),
        ])
        .await,
    )
    .await;
    let block = s
        .dev
        .request_resolution(s.market_id)
        .await
        .unwrap()
        .block_number
        .unwrap();
    // the head moves on (and a day passes) before anyone looks
    s.dev
        .provider
        .raw_request::<_, Value>("evm_increaseTime".into(), (86_400u64,))
        .await
        .unwrap();
    s.dev
        .provider
        .raw_request::<_, Value>("anvil_mine".into(), (U256::from(3),))
        .await
        .unwrap();
    let dir = tmpdir("dry-vs-node");
    let config = dry_run_config(&s, &dir);
    let out = cli(
        &[
            "dry-run",
            "--config",
            p(&config),
            "--market",
            &s.market_id.to_string(),
            "--at-block",
            &block.to_string(),
            "--json",
        ],
        &[("CRESOLVER_PRIVATE_KEY", key_of(&s.dev.signers[0]))],
    )
    .await;
    assert!(out.status.success(), "{}", show(&out));
    let dry = json_of(&out);
    assert_eq!(dry["block"], json!(block), "{dry:#}");
    assert_eq!(dry["status"], "would_submit", "{dry:#}");
    assert!(dry["report"].is_string(), "{dry:#}");
    assert!(dry["tally"]["resolution"].is_boolean(), "{dry:#}");

    let cfg = node_config(&s, &dir, workflow_file(&dir, "wf-node.toml", |t| t));
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let rep = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    r.stop().await;
    assert_eq!(rep.state, RoundState::Confirmed, "{rep:?}");
    let t = rep.transcript.unwrap();
    assert_eq!(
        t["outcome"]["report"], dry["report"],
        "the same report bytes"
    );
    assert_eq!(
        t["outcome"]["tally"]["resolution"], dry["tally"]["resolution"],
        "{dry:#}"
    );
}

#[test]
fn a_stored_v2_transcript_still_loads_and_replays() {
    // written by `cresolver rounds export` from a live round on anvil (see
    // CRESOLVER_WRITE_FIXTURE above); it must keep loading as the types evolve
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/transcript-v2.json");
    let t = Transcript::load(&file).unwrap();
    assert_eq!(t.version, 2);
    let recorded = t.outcome.as_ref().unwrap();
    assert_eq!(recorded.resolve.results.len(), 3);
    let replayed = cresolver_pipeline::replay::replay_transcript(&t, &t.workflow);
    assert_eq!(replayed.report.as_ref(), Some(&recorded.report));
    assert_eq!(replayed.tally.as_ref(), Some(&recorded.tally));
}
