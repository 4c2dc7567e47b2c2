//! anvil harness (filled in with the contracts).
