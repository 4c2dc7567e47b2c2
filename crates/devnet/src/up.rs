//! `cresolver devnet up`: a local network that stays up, in a data dir it keeps. Anvil
//! (its state dumped into the data dir every few seconds and on exit), the contracts,
//! reference workers on fixed ports, and a node (`cresolver node --config
//! <data-dir>/node.toml`, a child process) with its API and status page. The first start
//! seeds something to explore; a later start resumes the same chain, workers and node.
//!
//! Layout of the data dir: `devnet.json` (ports, addresses, workers, the seeded markets),
//! `anvil-state.json`, `anvil.log`, `node.toml`, `cresolver-resolution.toml` (the
//! workflow), `api-token`, `data/` (the node's store), `node.log`, and `refuse`: while it
//! exists, the workers of the second market refuse to answer.

use crate::agent::{AgentBehaviour, DeterminationMode};
use crate::{DevnetError, anvil_path};
use alloy::network::EthereumWallet;
use alloy::primitives::{Address, U256, utils::parse_ether};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::signers::local::PrivateKeySigner;
use cresolver_market::{Deployment, MarketClient};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The seeded markets' ids.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct MarketIds {
    /// Resolved on the first start.
    pub resolved: U256,
    /// Its round failed: its workers refused.
    pub failed: U256,
    /// Joined, not requested.
    pub open: U256,
}

/// What `devnet up` starts on a first run (a later run keeps what the data dir records).
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// The data dir (created on the first start, kept).
    pub data_dir: PathBuf,
    /// Reference workers per market (1 to 9).
    pub workers: usize,
    /// Anvil's port.
    pub anvil_port: u16,
    /// The node's API and status page.
    pub api_listen: String,
    /// The first worker's port; the others follow.
    pub worker_port: u16,
    /// The `cresolver` binary that runs the node (`node --config …`).
    pub node_exe: PathBuf,
}

/// One reference worker, as the data dir records it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// Its name.
    pub name: String,
    /// Its port on 127.0.0.1 (its registration points there).
    pub port: u16,
    /// The dev account that owns its agent.
    pub owner: Address,
    /// Its agent id.
    pub agent_id: U256,
    /// Whether it refuses while `<data-dir>/refuse` exists.
    pub refuses: bool,
    /// The side it answers.
    pub determination: DeterminationMode,
    /// The confidence it answers with.
    pub confidence: f64,
}

/// What the data dir records (`devnet.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DevnetState {
    /// The chain id.
    pub chain_id: u64,
    /// Anvil's port.
    pub anvil_port: u16,
    /// The node's API.
    pub api_listen: String,
    /// The contracts.
    pub contracts: Deployment,
    /// The workers.
    pub workers: Vec<WorkerRecord>,
    /// The markets seeded on the first start (`None` until seeding finished).
    pub markets: Option<MarketIds>,
}

/// The running network: anvil, the workers, the node, until [`Running::stop`].
pub struct Running {
    /// The data dir.
    pub dir: PathBuf,
    /// What it records.
    pub state: DevnetState,
    /// Whether this start created it.
    pub fresh: bool,
    /// The dev accounts' keys (anvil's well-known ones).
    pub signers: Vec<PrivateKeySigner>,
    /// A provider that signs for every dev account.
    pub provider: DynProvider,
    anvil: tokio::process::Child,
    node: Option<tokio::process::Child>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// The RPC URL.
    pub fn rpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.state.anvil_port)
    }

    /// The status page.
    pub fn status_url(&self) -> String {
        format!("http://{}/", self.state.api_listen)
    }

    /// The market contract.
    pub fn market(&self) -> MarketClient {
        MarketClient::new(self.provider.clone(), self.state.contracts.market)
    }

    /// Waits until `shutdown` completes, or the node or anvil exits; then stops
    /// everything (the node first, anvil last, which dumps its state).
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), DevnetError> {
        let (node_log, anvil_log) = (self.dir.join("node.log"), self.dir.join("anvil.log"));
        let ended = tokio::select! {
            _ = shutdown => None,
            s = wait_for_exit(self.node.as_mut()) => {
                Some(format!("the node exited ({s}); see {}", node_log.display()))
            }
            s = wait_for_exit(Some(&mut self.anvil)) => {
                Some(format!("anvil exited ({s}); see {}", anvil_log.display()))
            }
        };
        self.stop().await;
        match ended {
            None => Ok(()),
            Some(why) => Err(DevnetError::Setup(why)),
        }
    }

    /// Stops the node (SIGINT, then its drain), the workers, and anvil (SIGINT: it dumps
    /// its state into the data dir).
    pub async fn stop(mut self) {
        if let Some(node) = self.node.as_mut() {
            interrupt(node, Duration::from_secs(40)).await;
        }
        for w in &self.workers {
            w.abort();
        }
        interrupt(&mut self.anvil, Duration::from_secs(20)).await;
    }
}

/// How a child ended (never, when there is none).
async fn wait_for_exit(child: Option<&mut tokio::process::Child>) -> String {
    match child {
        Some(c) => c
            .wait()
            .await
            .map_or_else(|e| e.to_string(), |s| s.to_string()),
        None => std::future::pending().await,
    }
}

/// Sends SIGINT to a child and waits up to `grace` for it to exit; kills it after.
async fn interrupt(child: &mut tokio::process::Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Some(pid) = child.id() {
        let _ = tokio::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .await;
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

fn setup(what: &str) -> impl Fn(std::io::Error) -> DevnetError + '_ {
    move |e| DevnetError::Setup(format!("{what}: {e}"))
}

/// Starts the network in `opts.data_dir`: a first start deploys, registers, writes the
/// node's config and seeds; a later one resumes what the data dir holds.
pub async fn start(opts: &UpOptions) -> Result<Running, DevnetError> {
    check_workers(opts.workers)?;
    std::fs::create_dir_all(&opts.data_dir).map_err(setup("cannot create the data dir"))?;
    let dir = std::fs::canonicalize(&opts.data_dir).map_err(setup("data dir"))?;
    let state_file = dir.join("devnet.json");
    let existing: Option<DevnetState> = match std::fs::read_to_string(&state_file) {
        Ok(text) => Some(serde_json::from_str(&text).map_err(|e| {
            DevnetError::Setup(format!(
                "{} is not readable ({e}): remove the data dir to start afresh",
                state_file.display()
            ))
        })?),
        Err(_) => None,
    };
    if existing.as_ref().is_some_and(|s| s.markets.is_none()) {
        return Err(DevnetError::Setup(format!(
            "the first start in {} was interrupted before it finished: remove the directory and run `cresolver devnet up` again",
            dir.display()
        )));
    }
    let port = existing.as_ref().map_or(opts.anvil_port, |s| s.anvil_port);
    let (anvil, signers) = spawn_anvil(&dir, port).await?;
    let Some(first) = signers.first().cloned() else {
        return Err(DevnetError::AnvilStart("anvil printed no dev keys".into()));
    };
    let mut wallet = EthereumWallet::from(first);
    for s in signers.iter().skip(1) {
        wallet.register_signer(s.clone());
    }
    let provider = ProviderBuilder::new()
        .wallet(wallet)
        .connect_http(
            format!("http://127.0.0.1:{port}")
                .parse()
                .map_err(|e| DevnetError::Setup(format!("anvil URL: {e}")))?,
        )
        .erased();
    let fresh = existing.is_none();
    let state = match existing {
        Some(s) => s,
        None => first_start(&provider, &signers, opts, port).await?,
    };
    write_state(&dir, &state)?;
    let mut running = Running {
        dir,
        state,
        fresh,
        signers,
        provider,
        anvil,
        node: None,
        workers: Vec::new(),
    };
    running.workers = start_workers(&running.dir, &running.state.workers).await?;
    if fresh {
        write_node_files(&running)?;
        std::fs::write(
            running.dir.join("refuse"),
            "while this file exists, the workers of market 1 refuse to answer\n",
        )
        .map_err(setup("cannot write the refuse switch"))?;
    }
    running.node = Some(spawn_node(&running, &opts.node_exe).await?);
    Ok(running)
}

fn check_workers(workers: usize) -> Result<(), DevnetError> {
    if (1..=9).contains(&workers) {
        Ok(())
    } else {
        Err(DevnetError::Setup(
            "--workers must be between 1 and 9".into(),
        ))
    }
}

/// Writes `devnet.json`.
pub fn write_state(dir: &Path, state: &DevnetState) -> Result<(), DevnetError> {
    let text = serde_json::to_string_pretty(state)
        .map_err(|e| DevnetError::Setup(format!("devnet.json: {e}")))?;
    std::fs::write(dir.join("devnet.json"), text).map_err(setup("cannot write devnet.json"))
}

/// Spawns anvil on `port` in its own process group (Ctrl-C reaches it through
/// [`Running::stop`], after the node), its state in the data dir; returns it and the dev
/// keys it printed.
async fn spawn_anvil(
    dir: &Path,
    port: u16,
) -> Result<(tokio::process::Child, Vec<PrivateKeySigner>), DevnetError> {
    let path = anvil_path()?;
    let log_path = dir.join("anvil.log");
    let log = std::fs::File::create(&log_path).map_err(setup("cannot write anvil.log"))?;
    let err_log = log.try_clone().map_err(setup("anvil.log"))?;
    let mut child = tokio::process::Command::new(&path)
        .args(["--port", &port.to_string(), "--accounts", "20"])
        .args(["--chain-id", "31337"])
        .arg("--state")
        .arg(dir.join("anvil-state.json"))
        .args(["--state-interval", "5", "--preserve-historical-states"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| DevnetError::AnvilStart(format!("{}: {e}", path.display())))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if text.contains("Listening on") {
            return Ok((child, dev_keys(&text)));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(DevnetError::AnvilStart(format!(
                "anvil exited ({status}) — port {port} in use? pass --anvil-port; its output: {}",
                text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
            )));
        }
        if Instant::now() > deadline {
            return Err(DevnetError::AnvilStart(format!(
                "anvil did not listen within 30 s; see {}",
                log_path.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The private keys anvil prints under "Private Keys", in order.
fn dev_keys(text: &str) -> Vec<PrivateKeySigner> {
    let Some((_, rest)) = text.split_once("Private Keys") else {
        return Vec::new();
    };
    rest.lines()
        .filter(|l| l.trim_start().starts_with('('))
        .filter_map(|l| l.split_whitespace().nth(1))
        .take_while(|k| k.len() == 66 && k.starts_with("0x"))
        .filter_map(|k| k.parse().ok())
        .collect()
}

/// A first start: deploys the contracts and authorizes the node's key (dev account 0),
/// registers the workers' agents (`2 × workers`, owned by dev accounts 1…), records them.
async fn first_start(
    provider: &DynProvider,
    signers: &[PrivateKeySigner],
    opts: &UpOptions,
    port: u16,
) -> Result<DevnetState, DevnetError> {
    let owner = signers[0].address();
    let deploy = cresolver_market::DeployOptions {
        min_stake: parse_ether("0.0001").unwrap_or(U256::from(100_000_000_000_000u64)),
        receiver: cresolver_market::ReceiverOption::TestForwarder,
        ..Default::default()
    };
    let contracts = cresolver_market::deploy(provider, owner, &deploy, &|_, _| {}).await?;
    let market = MarketClient::new(provider.clone(), contracts.market);
    if !market.is_resolver(owner).await? {
        market.set_resolver(owner, true, owner).await?;
    }
    let chain_id = provider
        .get_chain_id()
        .await
        .map_err(|e| DevnetError::Setup(format!("eth_chainId: {e}")))?;
    let mut workers = Vec::new();
    for i in 0..opts.workers * 2 {
        let refuses = i >= opts.workers;
        let (determination, confidence) = match i % opts.workers % 3 {
            0 => (DeterminationMode::Yes, 0.85),
            1 => (DeterminationMode::Yes, 0.7),
            _ => (DeterminationMode::No, 0.6),
        };
        let name = format!("worker-{}", i + 1);
        let port = opts.worker_port + u16::try_from(i).unwrap_or(0);
        let owner = signers[i + 1].address();
        let doc = cresolver_market::registration_json(
            &name,
            chain_id,
            owner,
            Some(&format!("http://127.0.0.1:{port}")),
        );
        let uri = cresolver_market::data_uri(&doc);
        let agent =
            cresolver_market::register_agent(provider, contracts.identity, owner, Some(uri))
                .await?;
        workers.push(WorkerRecord {
            name,
            port,
            owner,
            agent_id: agent.agent_id,
            refuses,
            determination,
            confidence,
        });
    }
    Ok(DevnetState {
        chain_id,
        anvil_port: port,
        api_listen: opts.api_listen.clone(),
        contracts,
        workers,
        markets: None,
    })
}

/// Serves every worker on its port; the refusing ones answer 503 while
/// `<dir>/refuse` exists.
async fn start_workers(
    dir: &Path,
    workers: &[WorkerRecord],
) -> Result<Vec<tokio::task::JoinHandle<()>>, DevnetError> {
    let mut tasks = Vec::new();
    for w in workers {
        let behaviour = AgentBehaviour {
            name: w.name.clone(),
            determination: w.determination,
            confidence: Some(w.confidence),
            latency: Duration::from_millis(20),
            failure: None,
        };
        let mut router = crate::agent::router(behaviour);
        if w.refuses {
            router = router.layer(axum::middleware::from_fn_with_state(
                std::sync::Arc::new(dir.join("refuse")),
                refuse_while_switched,
            ));
        }
        let addr = format!("127.0.0.1:{}", w.port);
        let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|e| {
            DevnetError::Setup(format!(
                "{} cannot listen on {addr} ({e}): its registration points there; stop what holds the port",
                w.name
            ))
        })?;
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        }));
    }
    Ok(tasks)
}

async fn refuse_while_switched(
    axum::extract::State(switch): axum::extract::State<std::sync::Arc<PathBuf>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if req.uri().path().starts_with("/a2a/") && switch.exists() {
        let msg = format!(
            "this worker refuses while {} exists: remove it to let it answer",
            switch.display()
        );
        return (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({ "error": msg })),
        )
            .into_response();
    }
    next.run(req).await
}

/// Writes the node's config, its workflow and its API token into the data dir.
fn write_node_files(r: &Running) -> Result<(), DevnetError> {
    let wf = r.dir.join("cresolver-resolution.toml");
    std::fs::write(&wf, crate::demo::DEFAULT_WORKFLOW)
        .map_err(setup("cannot write the workflow"))?;
    let token = format!("devnet-{:016x}", rand_u64());
    let token_file = r.dir.join("api-token");
    std::fs::write(&token_file, format!("{token}\n")).map_err(setup("cannot write api-token"))?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600))
        .map_err(setup("api-token"))?;
    let c = &r.state.contracts;
    let toml = format!(
        r#"# Written by `cresolver devnet up` for its local chain. The node it runs reads this file,
# and so can every command: cresolver rounds list --config {dir}/node.toml
[chain]
rpc_url = "{rpc}"
chain_id = {chain_id}
market_address = "{market}"
multicall_address = "{multicall}"
poll_interval_ms = 200
start_block = 0

[node]
data_dir = "{dir}/data"
workflows = ["{wf}"]

[discovery]
# the reference workers listen on 127.0.0.1
allow_private_endpoints = true

[api]
listen = "{api}"
# the token of POST /resolve (`rounds retry`) is in {dir}/api-token
token_env = "CRESOLVER_API_TOKEN"
"#,
        dir = r.dir.display(),
        rpc = r.rpc_url(),
        chain_id = r.state.chain_id,
        market = c.market,
        multicall = c.multicall,
        wf = wf.display(),
        api = r.state.api_listen,
    );
    std::fs::write(r.dir.join("node.toml"), toml).map_err(setup("cannot write node.toml"))
}

/// A random number for the API token (from the OS's hasher seed: no extra dependency).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish()
}

/// Starts `cresolver node --config <dir>/node.toml` (dev account 0's key, the API token),
/// its output appended to `node.log`, and waits for its API.
async fn spawn_node(r: &Running, exe: &Path) -> Result<tokio::process::Child, DevnetError> {
    let token =
        std::fs::read_to_string(r.dir.join("api-token")).map_err(setup("cannot read api-token"))?;
    let log_path = r.dir.join("node.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(setup("cannot write node.log"))?;
    let err_log = log.try_clone().map_err(setup("node.log"))?;
    let key = alloy::hex::encode_prefixed(r.signers[0].to_bytes());
    let mut child = tokio::process::Command::new(exe)
        .arg("node")
        .arg("--config")
        .arg(r.dir.join("node.toml"))
        .env("CRESOLVER_PRIVATE_KEY", key)
        .env("CRESOLVER_API_TOKEN", token.trim())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| DevnetError::Setup(format!("cannot start {} node: {e}", exe.display())))?;
    let url = format!("http://{}/health/live", r.state.api_listen);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if live(&url).await {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(DevnetError::Setup(format!(
                "the node exited ({status}): {}",
                log.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
            )));
        }
        if Instant::now() > deadline {
            return Err(DevnetError::Setup(format!(
                "the node's API ({url}) did not answer within 60 s; see {}",
                log_path.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether `url` answers 200.
async fn live(url: &str) -> bool {
    reqwest::get(url)
        .await
        .is_ok_and(|r| r.status().is_success())
}
