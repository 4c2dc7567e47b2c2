//! Replay, dry-run and round export on anvil: a market resolved live by a node is
//! exported and replayed from its transcript (bit-identical report, "agree"); tampered
//! transcripts and changed workflows show their differences; a block range behind a
//! JSON-RPC proxy that refuses large ranges replays resolved, unresolved and
//! transcript-less markets; dry-runs leave the chain and the resolver's nonce as they
//! were; bad transcripts are clear errors.

use crate::common;
mod dry_run;
mod range;
mod transcripts;

use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use alloy::signers::local::PrivateKeySigner;
use common::chain::*;
use common::node::{node_config, start, tmpdir, wait_final};
use common::*;
use cresolver_devnet::agent::DeterminationMode;
use cresolver_node::Node;
use cresolver_pipeline::transcript::Transcript;
use cresolver_store::Stage;
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
