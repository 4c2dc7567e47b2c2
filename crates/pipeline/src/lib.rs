//! cresolver-pipeline: the round pipeline, its sources and its sinks. `round` (the
//! engine: collect answers, defences and the evaluation, then decide — tally and report
//! — as pure functions), `live` (how every path reads the market at the request block and
//! prepares a round), `dispatch` (the one dispatcher every source of rounds feeds),
//! `store_sink` (the round store as the chain watcher's sink), `transcript` (what a round
//! recorded), `stages` (the stages' settings from a node configuration), and the paths
//! that are not the long-running node (`cresolver-node`): `replay` (recorded or live
//! rounds compared with the chain) and `dryrun` (the submission simulated). `workflow`
//! and `config` read the files; `wallet` reads the signing key `[signer]` names.

pub mod config;
pub mod dispatch;
pub mod dryrun;
pub mod live;
pub mod replay;
pub mod round;
pub mod schema;
pub mod stages;
pub mod store_sink;
pub mod transcript;
pub mod wallet;
pub mod workflow;
