//! Chain: contract bindings and revert decoding.
