//! Why the node could not start, or could not serve a request: one error type for
//! start-up (configuration, key, store, chain, market, DON, listeners) and for the
//! manual trigger.

use alloy::primitives::Address;
use cresolver_chain::reader::ReadError;
use cresolver_store::MarketId;
use cresolver_submit::SubmitError;

/// Why the node could not start, or could not serve a request.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node's configuration is invalid.
    #[error(transparent)]
    Config(#[from] cresolver_pipeline::config::ConfigError),
    /// A workflow file is invalid.
    #[error(transparent)]
    Workflow(#[from] cresolver_pipeline::workflow::WorkflowError),
    /// A workflow's engine cannot be built (its evaluator, its worker clients).
    #[error(transparent)]
    Engine(#[from] cresolver_pipeline::round::EngineError),
    /// No RPC endpoint could be used.
    #[error(transparent)]
    Connect(#[from] cresolver_chain::ConnectError),
    /// The round store failed.
    #[error(transparent)]
    Store(#[from] cresolver_store::StoreError),
    /// A workflow's submitter cannot be built.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The RPC serves another chain than the config names.
    #[error(
        "the RPC endpoints serve chain {actual}, but {origin} is {expected}: point chain.rpc_url (or rpc_urls) at a node of chain {expected}, or set chain.chain_id = {actual}"
    )]
    ChainId {
        /// `chain.chain_id` of the config.
        expected: u64,
        /// The endpoint's `eth_chainId`.
        actual: u64,
        /// Where `chain.chain_id` was set.
        origin: String,
    },
    /// The signing key cannot be read.
    #[error("{error}{causes} ({origin}){hint}", causes = causes(error.as_ref()))]
    Signer {
        /// What reading it met (its causes are printed after it; boxed: the node's
        /// error stays small).
        error: Box<cresolver_pipeline::wallet::WalletError>,
        /// Where the key (or its file, keystore or password) was named.
        origin: String,
        /// What to do (`: …`), or nothing when the error says it.
        hint: &'static str,
    },
    /// The SQLite data dir cannot be used.
    #[error(
        "data dir {} ({origin}) {problem}: give the user the node runs as write access, or set node.data_dir (--data-dir) to a writable directory",
        path.display()
    )]
    DataDir {
        /// The data dir.
        path: std::path::PathBuf,
        /// Where `node.data_dir` was set.
        origin: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Another process holds the SQLite data dir.
    #[error(
        "the data dir {} is in use by another cresolver process ({holder}): a node and `resolve` each need its SQLite store to themselves; stop the other process first, or give this one its own --data-dir (read-only commands such as `rounds list` may run beside it)",
        path.display()
    )]
    DataDirBusy {
        /// The data dir.
        path: std::path::PathBuf,
        /// What the lock file says of its holder (pid, command, since when).
        holder: String,
    },
    /// The data dir's lock file cannot be made or locked.
    #[error("cannot lock {}: {error}", path.display())]
    DataDirLock {
        /// The lock file.
        path: std::path::PathBuf,
        /// The operating system's refusal.
        error: std::io::Error,
    },
    /// The market address holds no contract.
    #[error(
        "no contract at market address {address} on chain {chain_id} ({origin}): set it to the CREsolver market's address on this chain, or point chain.rpc_url at the chain the market is on"
    )]
    NoMarket {
        /// The address.
        address: Address,
        /// The chain asked.
        chain_id: u64,
        /// Where the address was set.
        origin: String,
    },
    /// The contract at the market address does not answer as the market does.
    #[error(
        "the contract at market address {address} ({origin}) is not a CREsolver market: marketCount() failed ({error}); set the market's address, not the forwarder's, receiver's or a registry's"
    )]
    NotMarket {
        /// The address.
        address: Address,
        /// Where the address was set.
        origin: String,
        /// What the call met.
        error: String,
    },
    /// The market could not be read at start (the RPC failed).
    #[error("cannot read the market at {address} at start: {error} (is the RPC up? try again)")]
    MarketRead {
        /// The address.
        address: Address,
        /// What the read met.
        error: String,
    },
    /// Two workflows watch one market contract.
    #[error("workflows {0} and {1} both watch market {2}: give each its own [trigger].address")]
    SameMarket(String, String, Address),
    /// A manual request could not be judged against the chain.
    #[error("cannot read market {market_id} on chain to judge the request: {error} (try again)")]
    Judge {
        /// The market asked for.
        market_id: MarketId,
        /// What the read met.
        error: ReadError,
    },
    /// The node's DON membership (`[don]`) cannot be set up. (Shown in the message, so
    /// not a `source`: the cause is printed once.)
    #[error("[don]: {0}")]
    Don(crate::don::DonSetupError),
    /// An HTTP listener cannot be bound.
    #[error(
        "cannot listen on {addr} for the HTTP API: {error}{what} (is another node running? set api.listen to a free address, or empty to disable)"
    )]
    Listen {
        /// The address asked for.
        addr: String,
        /// The operating system's refusal.
        error: std::io::Error,
        /// Which listener, when it is not the API's (`""` for the API).
        what: &'static str,
    },
}

/// The causes of `e` as ": cause: its cause" (printed after an error that is held as a
/// field, not as the source, so that they are shown once).
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = String::new();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}
