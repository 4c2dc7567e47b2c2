//! The neighbouring agent protocols (Factagora BYOA, round-table, Chorus, Agora) as
//! round workers, each against a real server on 127.0.0.1 speaking that protocol.
//! A module per protocol.

mod agora;
mod chorus;
mod factagora;
mod mixed;
mod roundtable;
