//! cresolver-market: the contracts driven as an operator drives them, on any chain. It
//! deploys them ([`deploy`]: the ERC-8004 identity and reputation registries, the
//! CREsolver market, Multicall3, a CRE receiver), creates, joins and requests markets and
//! authorizes resolvers ([`MarketClient`]), registers agents in the identity registry
//! ([`register_agent`]) and reads a market's state and result ([`MarketClient::show`]).
//! `cresolver market` and the development harness (`cresolver-devnet`) both use it.
//!
//! Every call takes the sending account (`from`): the provider's wallet must hold its key.
//! A refused call is a [`MarketError::Reverted`] with the decoded revert and what to do.

pub mod amount;
pub mod ops;
pub mod registration;

pub use ops::{MarketClient, MarketInfo, MarketView, WorkerView};
pub use registration::{RegisteredAgent, data_uri, register_agent, registration_json};

use alloy::network::Ethereum;
use alloy::primitives::{Address, B256, U256, address};
use alloy::providers::{DynProvider, PendingTransactionBuilder, Provider};
use alloy::rpc::types::TransactionReceipt;
use cresolver_chain::RevertReason;
use cresolver_chain::bindings::ICREsolverMarket::ICREsolverMarketErrors as M;
use cresolver_chain::bindings::IIdentityRegistry::IIdentityRegistryErrors as IdentityErrors;
use cresolver_chain::bindings::artifacts::{
    CREReceiver, CREsolverMarket, IdentityRegistry, Multicall3, ReputationRegistry, TestForwarder,
};

/// Where Multicall3 lives on nearly every public chain (deployed with a presigned
/// transaction, so the address is the same everywhere).
pub const CANONICAL_MULTICALL3: Address = address!("cA11bde05977b3631167028862bE2a173976CA11");

/// Why a contract call or deployment did not happen.
#[derive(Debug, thiserror::Error)]
pub enum MarketError {
    /// The contract refused the call (seen when the transaction was estimated or sent).
    #[error("{what} reverted: {reason}{hint}")]
    Reverted {
        /// What was being done (`createMarket`, `deploying CREsolverMarket`, …).
        what: String,
        /// The decoded revert.
        reason: RevertReason,
        /// What to do about it (empty, or starting with `: `).
        hint: String,
    },
    /// The transaction was mined but failed.
    #[error("{what}: transaction {tx} failed on chain (status 0)")]
    Failed {
        /// What was being done.
        what: String,
        /// The failed transaction.
        tx: B256,
    },
    /// The RPC endpoint failed or refused (no revert data).
    #[error("{what} failed: {detail}")]
    Rpc {
        /// What was being done.
        what: String,
        /// The error, its URLs redacted.
        detail: String,
    },
    /// What was asked cannot be done (no contract at an address, a missing event, …).
    #[error("{0}")]
    Invalid(String),
}

impl MarketError {
    /// The error of `what` from a contract call: its revert decoded, else the RPC error.
    pub fn from_call(what: &str, e: &alloy::contract::Error) -> Self {
        match e.as_revert_data() {
            Some(data) => {
                let reason = cresolver_chain::decode_revert(&data);
                let hint = hint(&reason);
                Self::Reverted {
                    what: what.to_string(),
                    reason,
                    hint,
                }
            }
            None => Self::Rpc {
                what: what.to_string(),
                detail: cresolver_chain::redact_error(&e.to_string()),
            },
        }
    }

    /// The error of `what` from a provider call.
    pub fn rpc(what: &str, e: impl std::fmt::Display) -> Self {
        Self::Rpc {
            what: what.to_string(),
            detail: cresolver_chain::redact_error(&e.to_string()),
        }
    }
}

/// What an operator does about a refusal of the market (empty when the reason says it).
fn hint(reason: &RevertReason) -> String {
    if let RevertReason::Identity(IdentityErrors::ERC721NonexistentToken(x)) = reason {
        return format!(
            ": the identity registry has no agent {}: register one with `cresolver market register-worker` (it prints the id)",
            x.tokenId
        );
    }
    let RevertReason::Market(e) = reason else {
        return String::new();
    };
    let text = match e {
        M::OwnableUnauthorizedAccount(_) => {
            "only the market's owner may do this: sign with the owner's key (`cresolver market show` prints the owner)".to_string()
        }
        M::NotAgentOwner(_) => {
            "join from the account that owns the agent (the one that ran `cresolver market register-worker`)".into()
        }
        M::BelowMinStake(x) => format!(
            "stake at least {} wei (pass --stake, or leave it out to send the market's minimum)",
            x.required
        ),
        M::AlreadyJoined(_) => "this worker is already in the market".into(),
        M::MarketNotActive(_) => {
            "the market is resolved or past its deadline: create a new one".into()
        }
        M::MarketDoesNotExist(_) => {
            "no market has this id (`cresolver market show` prints how many there are)".into()
        }
        M::MarketAlreadyResolved(_) | M::AlreadyResolved(_) => {
            "the market is resolved already: `cresolver market show <ID>` prints its outcome".into()
        }
        M::EmptyQuestion(_) => "give a question (--question)".into(),
        M::InvalidDuration(_) => "give a duration above 0 (--duration)".into(),
        M::ZeroValue(_) => "send a reward above 0 (--reward)".into(),
        M::ZeroAddress(_) => "give a non-zero address".into(),
        M::Unauthorized(_) => return String::new(),
        _ => return String::new(),
    };
    format!(": {text}")
}

/// Waits for the receipt of a sent transaction; a failed one is an error.
pub async fn confirm(
    what: &str,
    pending: PendingTransactionBuilder<Ethereum>,
) -> Result<TransactionReceipt, MarketError> {
    let receipt = pending
        .get_receipt()
        .await
        .map_err(|e| MarketError::rpc(what, e))?;
    if !receipt.status() {
        return Err(MarketError::Failed {
            what: what.to_string(),
            tx: receipt.transaction_hash,
        });
    }
    Ok(receipt)
}

/// Where a deployment put each contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Deployment {
    /// The ERC-8004 identity registry.
    pub identity: Address,
    /// The ERC-8004 reputation registry.
    pub reputation: Address,
    /// The CREsolver market.
    pub market: Address,
    /// The forwarder the receiver trusts (the zero address when no receiver was deployed).
    pub forwarder: Address,
    /// The CRE receiver, which takes reports from the forwarder and resolves markets (the
    /// zero address when none was deployed).
    pub receiver: Address,
    /// Multicall3, for batched reads.
    pub multicall: Address,
}

/// What [`deploy`] deploys and what it reuses.
#[derive(Debug, Clone, Default)]
pub struct DeployOptions {
    /// The market's minimum stake per worker, in wei.
    pub min_stake: U256,
    /// An identity registry to reuse (the chain's ERC-8004 deployment); `None` deploys one.
    pub identity: Option<Address>,
    /// A reputation registry to reuse; `None` deploys one (on the identity registry).
    pub reputation: Option<Address>,
    /// The receiver and its forwarder: none, a test forwarder, or an existing forwarder.
    pub receiver: ReceiverOption,
}

/// Whether [`deploy`] deploys a CRE receiver (authorized as a resolver of the market).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReceiverOption {
    /// No receiver: nodes resolve directly with `resolveMarket` from authorized keys.
    #[default]
    None,
    /// A `TestForwarder` (it checks no signatures: anyone can resolve through it, so only
    /// for a local chain) and a receiver that trusts it.
    TestForwarder,
    /// A receiver that trusts this forwarder (a KeystoneForwarder).
    Forwarder(Address),
}

/// Deploys the contracts from `from` (its key must be in the provider's wallet) and says
/// each one it deployed or reused through `progress`. Multicall3 is reused at its
/// canonical address when the chain has it.
pub async fn deploy(
    provider: &DynProvider,
    from: Address,
    opts: &DeployOptions,
    progress: &(dyn Fn(&str, Address) + Sync),
) -> Result<Deployment, MarketError> {
    let err =
        |what: &'static str| move |e: alloy::contract::Error| MarketError::from_call(what, &e);
    let identity = match opts.identity {
        Some(a) => a,
        None => IdentityRegistry::deploy_builder(provider)
            .from(from)
            .deploy()
            .await
            .map_err(err("deploying IdentityRegistry"))?,
    };
    progress("IdentityRegistry", identity);
    let reputation = match opts.reputation {
        Some(a) => a,
        None => ReputationRegistry::deploy_builder(provider, identity)
            .from(from)
            .deploy()
            .await
            .map_err(err("deploying ReputationRegistry"))?,
    };
    progress("ReputationRegistry", reputation);
    let market = CREsolverMarket::deploy_builder(provider, identity, reputation, opts.min_stake)
        .from(from)
        .deploy()
        .await
        .map_err(err("deploying CREsolverMarket"))?;
    progress("CREsolverMarket", market);
    let has_multicall = !provider
        .get_code_at(CANONICAL_MULTICALL3)
        .await
        .map_err(|e| MarketError::rpc("eth_getCode", e))?
        .is_empty();
    let multicall = if has_multicall {
        CANONICAL_MULTICALL3
    } else {
        Multicall3::deploy_builder(provider)
            .from(from)
            .deploy()
            .await
            .map_err(err("deploying Multicall3"))?
    };
    progress("Multicall3", multicall);
    let forwarder = match opts.receiver {
        ReceiverOption::None => return Ok(no_receiver(identity, reputation, market, multicall)),
        ReceiverOption::Forwarder(f) => f,
        ReceiverOption::TestForwarder => TestForwarder::deploy_builder(provider)
            .from(from)
            .deploy()
            .await
            .map_err(err("deploying TestForwarder"))?,
    };
    progress("forwarder", forwarder);
    let receiver = CREReceiver::deploy_builder(provider, forwarder, market)
        .from(from)
        .deploy()
        .await
        .map_err(err("deploying CREReceiver"))?;
    progress("CREReceiver", receiver);
    MarketClient::new(provider.clone(), market)
        .set_resolver(receiver, true, from)
        .await?;
    Ok(Deployment {
        identity,
        reputation,
        market,
        forwarder,
        receiver,
        multicall,
    })
}

fn no_receiver(
    identity: Address,
    reputation: Address,
    market: Address,
    multicall: Address,
) -> Deployment {
    Deployment {
        identity,
        reputation,
        market,
        forwarder: Address::ZERO,
        receiver: Address::ZERO,
        multicall,
    }
}
