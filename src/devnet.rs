//! Devnet: local chain helpers.
