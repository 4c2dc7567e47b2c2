//! cresolver-don: makes a set of independent cresolver nodes a DON. Each member observes
//! a round itself (the pipeline does that), signs its observation and sends it to the
//! other members; the leader of the attempt fixes a set of at least 2f+1 signed
//! observations and proposes it; every member checks the set, recomputes the report
//! with the pure aggregate and tally of `cresolver-core`, and signs the forwarder's
//! digest only if the bytes are its own — never two different reports for one
//! execution. f+1 signatures on one report are an agreement, which the pipeline
//! transmits through the KeystoneForwarder.
//!
//! - [`config`]: the `[don]` section and its start-up checks.
//! - [`wire`]: the signed messages between members and their bounds.
//! - [`persist`]: what a member must remember across a restart (its observation, the
//!   one report it signed, its attempt, the agreement).
//! - [`member`]: the agreement itself.
//! - [`server`]: the HTTP endpoint the other members send to.

pub mod agreed;
pub mod config;
pub mod member;
pub mod persist;
pub mod server;
pub mod wire;

pub use config::{DonConfig, DonConfigError, MemberConfig};
pub use member::{AgreeError, Agreed, Don, Job};
