//! Contract bindings. The engine uses the interface ABIs (`contracts-abi/I*.json`);
//! `artifacts` holds the deployable local contracts (ABI + bytecode) for tests and the demo.

// Generated code: `sol!` writes one Rust method per contract function, with its
// Solidity parameters (IdentityRegistry's take 9 and 11), so too_many_arguments is
// allowed here only; no hand-written function lives in this file.
#![allow(clippy::too_many_arguments, missing_docs)]

use alloy::sol;

sol!(
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    ICREsolverMarket,
    "../../contracts-abi/ICREsolverMarket.json"
);
sol!(
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    IIdentityRegistry,
    "../../contracts-abi/IIdentityRegistry.json"
);
sol!(
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    IReputationRegistry,
    "../../contracts-abi/IReputationRegistry.json"
);
sol!(
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    IReceiver,
    "../../contracts-abi/IReceiver.json"
);
sol!(
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    IKeystoneForwarder,
    "../../contracts-abi/IKeystoneForwarder.json"
);
sol!(
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    IMulticall3,
    "../../contracts-abi/IMulticall3.json"
);

/// Deployable local contracts (ABI + bytecode from `contracts-abi/artifacts`).
pub mod artifacts {
    #![allow(clippy::too_many_arguments, missing_docs)]
    use alloy::sol;

    sol!(
        #[sol(rpc)]
        #[derive(Debug, PartialEq, Eq)]
        CREsolverMarket,
        "../../contracts-abi/artifacts/CREsolverMarket.json"
    );
    sol!(
        #[sol(rpc)]
        #[derive(Debug, PartialEq, Eq)]
        IdentityRegistry,
        "../../contracts-abi/artifacts/IdentityRegistry.json"
    );
    sol!(
        #[sol(rpc)]
        #[derive(Debug, PartialEq, Eq)]
        ReputationRegistry,
        "../../contracts-abi/artifacts/ReputationRegistry.json"
    );
    sol!(
        #[sol(rpc)]
        #[derive(Debug, PartialEq, Eq)]
        CREReceiver,
        "../../contracts-abi/artifacts/CREReceiver.json"
    );
    sol!(
        #[sol(rpc)]
        #[derive(Debug, PartialEq, Eq)]
        TestForwarder,
        "../../contracts-abi/artifacts/TestForwarder.json"
    );
    sol!(
        #[sol(rpc)]
        #[derive(Debug, PartialEq, Eq)]
        StrictForwarder,
        "../../contracts-abi/artifacts/StrictForwarder.json"
    );
    sol!(
        #[sol(rpc)]
        #[derive(Debug, PartialEq, Eq)]
        Multicall3,
        "../../contracts-abi/artifacts/Multicall3.json"
    );
    // Chainlink's production KeystoneForwarder 1.0.0, compiled from the unmodified source of
    // @chainlink/contracts 1.5.0 (`src/v0.8/keystone/KeystoneForwarder.sol`): `setConfig`,
    // `clearConfig`, the signature-checked `report`, the transmission look-ups,
    // `typeAndVersion`, `ReportProcessed` and every custom error it reverts with.
    sol!(
        #[sol(rpc)]
        #[derive(Debug, PartialEq, Eq)]
        KeystoneForwarder,
        "../../contracts-abi/artifacts/KeystoneForwarder.json"
    );
}
