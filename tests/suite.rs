//! The integration tests, in one test binary (`cargo test --test suite`): each file of
//! `tests/` is a module of it, and `tests/common` (the anvil harness, the peers, the
//! node helpers) is compiled once for all of them instead of once per file, and linked
//! once. Run one file's tests with its module as the filter, e.g.
//! `cargo test --test suite -- don_e2e::`. `tests/rpc_outage.rs`, which mostly waits out
//! outages, stays a binary of its own (see `scripts/test.sh`).

mod common;

mod api;
mod api_memory;
mod book;
mod cli;
mod cluster;
mod config_check;
mod config_reference;
mod contracts;
mod deploy;
mod devnet_up;
mod discovery;
mod docs;
mod don_e2e;
mod evaluator_labels;
mod finality;
mod first_run;
mod fuzz;
mod keystone_forwarder;
mod keystore;
mod layering;
mod llm_evaluator;
mod market_cli;
mod net_boundary;
mod node_e2e;
mod openapi;
mod protocols;
mod quickstart;
mod release;
mod replay;
mod rubric_padding;
mod secrets;
mod status_page;
mod store_pg;
mod tally;
mod txm;
mod watcher;
mod workers;
