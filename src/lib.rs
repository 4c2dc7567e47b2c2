//! cresolver: a resolution orchestrator for AI-resolved prediction markets.
//!
//! The modules follow the pipeline of a round:
//! `chain` (bindings, revert decoding) → `workers` (protocol, client, fan-out) →
//! `evaluate` (LLM or rubric scores) → `resolve` (quorum, tally, report bytes), with
//! `workflow` holding the declarative workflow files and `round` driving one round;
//! `submit` checks and simulates the submission and `txm` (the transaction manager)
//! signs, broadcasts and follows it until it is mined deep enough.
//! `devnet` deploys the contracts on a local chain for tests and the demo; with `agent`
//! (the reference worker) and `demo` it is the development harness, behind the default-on
//! `devnet` feature.

pub mod chain;
pub mod config;
#[cfg(feature = "devnet")]
pub mod devnet;
pub mod discovery;
pub mod evaluate;
pub mod fuzz;
pub mod node;
pub mod pipeline;
pub mod resolve;
pub mod store;
pub mod submit;
pub mod tally_cli;
pub mod workers;
pub mod workflow;

// The stages' modules under their historical paths (`cresolver::round`, …).
#[cfg(feature = "devnet")]
pub use devnet::{agent, demo};
pub use node::{api, metrics};
pub use pipeline::{dryrun, live, replay, round, transcript};
pub use submit::txm;
