//! The neighbouring agent protocols (Factagora BYOA, round-table, Chorus, Agora) as
//! round workers, each against a real server on 127.0.0.1 speaking that protocol.
//! One test binary with a module per protocol (one link instead of four).

#[path = "../common/mod.rs"]
mod common;

mod agora;
mod chorus;
mod factagora;
mod mixed;
mod roundtable;
