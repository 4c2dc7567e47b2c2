//! dry-run: the submission simulated without touching the chain, in direct and report mode, watching new requests, and at the request block.

use super::*;
use alloy::primitives::B256;

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

/// The authorizedResolvers slot of the layout is the one the contract uses: set for the
/// deployer, clear for account 12. Returns account 12's slot.
async fn check_authorized_slots(s: &MarketSetup) -> B256 {
    let dev = &s.dev;
    let market = dev.contracts.market;
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
    slot12
}

/// The authorized key's dry-run succeeds: the simulation, its gas estimate and calldata,
/// and the decoded would-be report.
async fn check_authorized_dry_run(s: &MarketSetup, config: &Path) {
    let dev = &s.dev;
    let out = cli(
        &["dry-run", "--config", p(config), "--market", "0", "--json"],
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
}

/// A key that is not authorized: the decoded Unauthorized and the override's verdict, as
/// JSON and (with --from, without a key) as text; nothing is sent. `slot12` is account
/// 12's authorizedResolvers slot.
async fn check_unauthorized_dry_run(
    s: &MarketSetup,
    config: &Path,
    slot12: B256,
    block_before: u64,
) {
    let dev = &s.dev;
    let outsider = dev.accounts[12];
    let out = cli(
        &["dry-run", "--config", p(config), "--market", "0", "--json"],
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
            p(config),
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
    let slot12 = check_authorized_slots(&s).await;

    let block_before = dev.provider.get_block_number().await.unwrap();
    let nonce_before = dev
        .provider
        .get_transaction_count(dev.accounts[0])
        .await
        .unwrap();

    // the authorized key: the simulation succeeds
    check_authorized_dry_run(&s, &config).await;

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

    check_unauthorized_dry_run(&s, &config, slot12, block_before).await;

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
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
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
    assert_eq!(rep.state, Stage::Confirmed, "{rep:?}");
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
