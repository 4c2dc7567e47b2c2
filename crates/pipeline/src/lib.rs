//! The round pipeline: `round` (the engine: collect answers, defences and the evaluation,
//! then decide — tally and report — as pure functions), `live` (how every path reads the
//! market at the request block and prepares a round), `transcript` (what a round
//! recorded, written and read by serde), and the paths that are not the node: `replay`
//! (recorded or live rounds compared with the chain) and `dryrun` (the submission
//! simulated).

pub mod config;
pub mod dispatch;
pub mod dryrun;
pub mod fuzz;
pub mod live;
pub mod node;
pub mod replay;
pub mod round;
pub mod store_sink;
pub mod transcript;
pub mod workflow;
