//! Revert decoding: custom errors of the market, receiver, forwarders (the report surface
//! every forwarder shares, and the production KeystoneForwarder's configuration errors) and
//! registries, `Error(string)` and `Panic(uint256)`, turned into a named, readable reason.

use super::bindings::ICREsolverMarket::ICREsolverMarketErrors;
use super::bindings::IIdentityRegistry::IIdentityRegistryErrors;
use super::bindings::IKeystoneForwarder::IKeystoneForwarderErrors;
use super::bindings::artifacts::CREReceiver::CREReceiverErrors;
use super::bindings::artifacts::KeystoneForwarder::KeystoneForwarderErrors;
use alloy::primitives::Bytes;
use alloy::sol_types::{Panic, Revert, SolError, SolInterface};
use std::fmt;

/// A decoded revert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevertReason {
    /// A custom error of the CREsolver market.
    Market(ICREsolverMarketErrors),
    /// A custom error of the CRE receiver.
    Receiver(CREReceiverErrors),
    /// A forwarder's `report(...)` errors (shared by the production KeystoneForwarder, the
    /// test forwarders and `IKeystoneForwarder`).
    Forwarder(IKeystoneForwarderErrors),
    /// The production KeystoneForwarder's errors outside the report surface (`setConfig`'s
    /// `FaultToleranceMustBePositive`, `ExcessSigners`, `InsufficientSigners`); its report
    /// errors decode as [`RevertReason::Forwarder`].
    ForwarderConfig(KeystoneForwarderErrors),
    /// A custom error of the ERC-8004 identity registry.
    Identity(IIdentityRegistryErrors),
    /// `Error(string)` (`require` with a message).
    Message(String),
    /// `Panic(uint256)`.
    Panic(u64),
    /// Revert data no known ABI explains.
    Unknown(Bytes),
}

/// Decodes revert data.
pub fn decode_revert(data: &[u8]) -> RevertReason {
    if let Ok(e) = ICREsolverMarketErrors::abi_decode(data) {
        return RevertReason::Market(e);
    }
    if let Ok(e) = CREReceiverErrors::abi_decode(data) {
        return RevertReason::Receiver(e);
    }
    if let Ok(e) = IKeystoneForwarderErrors::abi_decode(data) {
        return RevertReason::Forwarder(e);
    }
    if let Ok(e) = KeystoneForwarderErrors::abi_decode(data) {
        return RevertReason::ForwarderConfig(e);
    }
    if let Ok(e) = IIdentityRegistryErrors::abi_decode(data) {
        return RevertReason::Identity(e);
    }
    if let Ok(r) = Revert::abi_decode(data) {
        return RevertReason::Message(r.reason);
    }
    if let Ok(p) = Panic::abi_decode(data) {
        return RevertReason::Panic(p.code.saturating_to());
    }
    RevertReason::Unknown(Bytes::copy_from_slice(data))
}

/// Revert data carried by a contract call error, if the node returned any.
pub fn revert_data(err: &alloy::contract::Error) -> Option<Bytes> {
    err.as_revert_data()
}

impl RevertReason {
    /// The forwarder's `AlreadyAttempted`: this report's transmission was already
    /// attempted (delivered, or pending from another DON member).
    pub fn is_already_attempted(&self) -> bool {
        matches!(
            self,
            RevertReason::Forwarder(IKeystoneForwarderErrors::AlreadyAttempted(_))
        )
    }

    /// The forwarder's `InvalidSigner(signer)`: a signature's signer is not in its config.
    pub fn invalid_signer(&self) -> Option<alloy::primitives::Address> {
        match self {
            RevertReason::Forwarder(IKeystoneForwarderErrors::InvalidSigner(e)) => Some(e.signer),
            _ => None,
        }
    }

    /// The market's `Unauthorized`: the resolving key (or the receiver) is not an
    /// authorized resolver — the one refusal an operator can still lift, so it is worth
    /// trying again.
    pub fn is_resolver_unauthorized(&self) -> bool {
        matches!(
            self,
            RevertReason::Market(ICREsolverMarketErrors::Unauthorized(_))
        )
    }

    /// The error's name (`Unauthorized`, `Error`, `Panic`, …).
    pub fn name(&self) -> String {
        match self {
            RevertReason::Market(e) => variant_name(&format!("{e:?}")),
            RevertReason::Receiver(e) => variant_name(&format!("{e:?}")),
            RevertReason::Forwarder(e) => variant_name(&format!("{e:?}")),
            RevertReason::ForwarderConfig(e) => variant_name(&format!("{e:?}")),
            RevertReason::Identity(e) => variant_name(&format!("{e:?}")),
            RevertReason::Message(_) => "Error".into(),
            RevertReason::Panic(_) => "Panic".into(),
            RevertReason::Unknown(_) => "Unknown".into(),
        }
    }
}

fn variant_name(debug: &str) -> String {
    debug
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or(debug)
        .to_string()
}

impl std::error::Error for RevertReason {}

impl fmt::Display for RevertReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ICREsolverMarketErrors as M;
        match self {
            RevertReason::Market(e) => match e {
                M::Unauthorized(x) => write!(
                    f,
                    "Unauthorized({}): this key is not an authorized resolver of the market; the market owner must call setAuthorizedResolver({}, true)",
                    x.caller, x.caller
                ),
                M::AlreadyResolved(x) => write!(
                    f,
                    "AlreadyResolved({}): market {} is already resolved",
                    x.marketId, x.marketId
                ),
                M::ArrayMismatch(x) => write!(
                    f,
                    "ArrayMismatch({}, {}, {}): workers, weights and dimScores (3 per worker) lengths differ",
                    x.workersLen, x.weightsLen, x.scoresLen
                ),
                M::WorkerSetMismatch(x) => write!(
                    f,
                    "WorkerSetMismatch({}, {}, {}): the report must list exactly the market's {} registered workers, it lists {}",
                    x.marketId, x.expected, x.provided, x.expected, x.provided
                ),
                M::UnregisteredWorker(x) => {
                    write!(
                        f,
                        "UnregisteredWorker({}, {}): {} has no stake in market {}",
                        x.marketId, x.worker, x.worker, x.marketId
                    )
                }
                M::DuplicateWorker(x) => write!(
                    f,
                    "DuplicateWorker({}, {}): {} is listed twice",
                    x.marketId, x.worker, x.worker
                ),
                M::ZeroTotalWeight(x) => {
                    write!(f, "ZeroTotalWeight({}): every weight is 0", x.marketId)
                }
                M::TooManyWorkers(x) => write!(
                    f,
                    "TooManyWorkers({}, {}): more than the maximum of {}",
                    x.count, x.max, x.max
                ),
                M::MarketNotActive(x) => write!(
                    f,
                    "MarketNotActive({}): the market does not exist, is resolved or past its deadline",
                    x.marketId
                ),
                M::MarketDoesNotExist(x) => write!(f, "MarketDoesNotExist({})", x.marketId),
                M::MarketAlreadyResolved(x) => write!(f, "MarketAlreadyResolved({})", x.marketId),
                M::NotAgentOwner(x) => write!(
                    f,
                    "NotAgentOwner({}, {}): the sender does not own or operate agent {}",
                    x.caller, x.agentId, x.agentId
                ),
                M::ScoreOutOfRange(x) => write!(
                    f,
                    "ScoreOutOfRange({}, {}, {}): a score is above 100",
                    x.marketId, x.worker, x.score
                ),
                other => f.write_str(&format!("{other:?}")),
            },
            RevertReason::Receiver(e) => write!(f, "{e:?}"),
            RevertReason::Forwarder(e) => fmt_forwarder(f, e),
            RevertReason::ForwarderConfig(e) => fmt_forwarder_config(f, e),
            RevertReason::Identity(e) => write!(f, "{e:?}"),
            RevertReason::Message(m) if m == "Self-feedback not allowed" => write!(
                f,
                "Error(\"Self-feedback not allowed\"): a worker's agent lets the market act as its operator (approve/setApprovalForAll), so the registry refuses the market's feedback"
            ),
            RevertReason::Message(m) => write!(f, "Error({m:?})"),
            RevertReason::Panic(c) => write!(f, "Panic(0x{c:02x})"),
            RevertReason::Unknown(b) if b.is_empty() => write!(f, "reverted without data"),
            RevertReason::Unknown(b) => write!(f, "unknown revert data {b}"),
        }
    }
}

/// The forwarder's report errors, each with what it means (KeystoneForwarder 1.0.0).
fn fmt_forwarder(f: &mut fmt::Formatter<'_>, e: &IKeystoneForwarderErrors) -> fmt::Result {
    use IKeystoneForwarderErrors as F;
    match e {
        F::InvalidReport(_) => write!(
            f,
            "InvalidReport(): rawReport is shorter than the 109-byte forwarder metadata"
        ),
        F::InvalidConfig(x) => write!(
            f,
            "InvalidConfig({}): the forwarder has no config for DON {} version {} (configId = donId << 32 | configVersion)",
            x.configId,
            x.configId >> 32,
            x.configId & 0xffff_ffff
        ),
        F::InvalidSignatureCount(x) => write!(
            f,
            "InvalidSignatureCount({}, {}): the forwarder wants exactly f+1 = {} signatures, the report carries {}",
            x.expected, x.received, x.expected, x.received
        ),
        F::InvalidSignature(x) => write!(
            f,
            "InvalidSignature({}): a signature is not 65 bytes (r ‖ s ‖ v, v = 0 or 1)",
            x.signature
        ),
        F::InvalidSigner(x) => write!(
            f,
            "InvalidSigner({}): a signature recovers to {}, not a configured signer of this DON config (wrong key, wrong digest, or v not 0/1)",
            x.signer, x.signer
        ),
        F::DuplicateSigner(x) => write!(
            f,
            "DuplicateSigner({}): two signatures from the same signer",
            x.signer
        ),
        F::UnauthorizedForwarder(_) => write!(
            f,
            "UnauthorizedForwarder(): route() was called by a contract the router does not list as a forwarder"
        ),
        F::AlreadyAttempted(x) => write!(
            f,
            "AlreadyAttempted({}): this transmission (receiver, execution id, report id) already succeeded or its receiver was invalid",
            x.transmissionId
        ),
        F::InsufficientGasForRouting(x) => write!(
            f,
            "InsufficientGasForRouting({}): too little gas left to call the receiver; send with a higher gas limit",
            x.transmissionId
        ),
    }
}

/// The production forwarder's `setConfig` errors.
fn fmt_forwarder_config(f: &mut fmt::Formatter<'_>, e: &KeystoneForwarderErrors) -> fmt::Result {
    use KeystoneForwarderErrors as K;
    match e {
        K::FaultToleranceMustBePositive(_) => {
            write!(f, "FaultToleranceMustBePositive(): setConfig with f = 0")
        }
        K::ExcessSigners(x) => write!(
            f,
            "ExcessSigners({}, {}): more than {} signers",
            x.numSigners, x.maxSigners, x.maxSigners
        ),
        K::InsufficientSigners(x) => write!(
            f,
            "InsufficientSigners({}, {}): f needs at least 3f+1 = {} signers",
            x.numSigners, x.minSigners, x.minSigners
        ),
        other => write!(f, "{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::ICREsolverMarket;
    use alloy::primitives::{Address, U256};

    #[test]
    fn decodes_custom_errors_and_strings() {
        let data = ICREsolverMarket::Unauthorized {
            caller: Address::repeat_byte(1),
        }
        .abi_encode();
        let r = decode_revert(&data);
        assert_eq!(r.name(), "Unauthorized");
        assert!(r.to_string().contains("setAuthorizedResolver"));
        let data = ICREsolverMarket::WorkerSetMismatch {
            marketId: U256::from(1),
            expected: U256::from(3),
            provided: U256::from(2),
        }
        .abi_encode();
        assert_eq!(decode_revert(&data).name(), "WorkerSetMismatch");
        let data = Revert::from("Self-feedback not allowed").abi_encode();
        assert!(decode_revert(&data).to_string().contains("operator"));
        assert_eq!(decode_revert(&[1, 2, 3]).name(), "Unknown");
    }

    #[test]
    fn names_the_production_forwarder_errors() {
        use crate::bindings::artifacts::KeystoneForwarder as K;
        let a = Address::repeat_byte(7);
        let id = alloy::primitives::B256::repeat_byte(9);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                K::InvalidSignatureCount {
                    expected: U256::from(2),
                    received: U256::from(1),
                }
                .abi_encode(),
                "InvalidSignatureCount",
            ),
            (K::InvalidSigner { signer: a }.abi_encode(), "InvalidSigner"),
            (
                K::DuplicateSigner { signer: a }.abi_encode(),
                "DuplicateSigner",
            ),
            (
                K::InvalidConfig {
                    configId: (1u64 << 32) | 1,
                }
                .abi_encode(),
                "InvalidConfig",
            ),
            (K::InvalidReport {}.abi_encode(), "InvalidReport"),
            (
                K::AlreadyAttempted { transmissionId: id }.abi_encode(),
                "AlreadyAttempted",
            ),
            (
                K::InsufficientGasForRouting { transmissionId: id }.abi_encode(),
                "InsufficientGasForRouting",
            ),
            (
                K::InvalidSignature {
                    signature: vec![1u8; 64].into(),
                }
                .abi_encode(),
                "InvalidSignature",
            ),
            (
                K::UnauthorizedForwarder {}.abi_encode(),
                "UnauthorizedForwarder",
            ),
            (
                K::FaultToleranceMustBePositive {}.abi_encode(),
                "FaultToleranceMustBePositive",
            ),
            (
                K::ExcessSigners {
                    numSigners: U256::from(32),
                    maxSigners: U256::from(31),
                }
                .abi_encode(),
                "ExcessSigners",
            ),
            (
                K::InsufficientSigners {
                    numSigners: U256::from(3),
                    minSigners: U256::from(4),
                }
                .abi_encode(),
                "InsufficientSigners",
            ),
        ];
        for (data, name) in cases {
            let r = decode_revert(&data);
            assert_eq!(r.name(), name, "{r:?}");
            assert!(r.to_string().starts_with(name), "{r}");
        }
        let r = decode_revert(
            &K::InvalidConfig {
                configId: (1u64 << 32) | 2,
            }
            .abi_encode(),
        );
        assert!(r.to_string().contains("DON 1 version 2"), "{r}");
    }
}
