//! The signing and recovery the consensus core needs, behind one trait: production signs
//! with the member's secp256k1 key ([`Secp256k1Keys`]); the simulator plugs in a cheap
//! deterministic scheme so that it can run millions of executions. Signing is a pure
//! function of key and digest (RFC 6979), so the core calls it directly instead of
//! yielding a "sign" effect and waiting to be resumed, as commonware's voter does.

use crate::wire::{self, WireError};
use alloy::primitives::{Address, B256, Bytes};
use alloy::signers::local::PrivateKeySigner;

/// A member's key and the DON's signature scheme.
pub trait Keys: Send + Sync {
    /// This member's address.
    fn address(&self) -> Address;
    /// Signs `digest` (65 bytes `r ‖ s ‖ v`, v = 0 or 1).
    fn sign(&self, digest: &B256) -> Result<Bytes, WireError>;
    /// The member whose signature over `digest` this is.
    fn recover(&self, digest: &B256, signature: &[u8]) -> Result<Address, WireError>;
}

/// The production scheme: secp256k1, as the KeystoneForwarder checks report signatures.
pub struct Secp256k1Keys(pub PrivateKeySigner);

impl Keys for Secp256k1Keys {
    fn address(&self) -> Address {
        self.0.address()
    }
    fn sign(&self, digest: &B256) -> Result<Bytes, WireError> {
        wire::sign_digest(&self.0, digest)
    }
    fn recover(&self, digest: &B256, signature: &[u8]) -> Result<Address, WireError> {
        wire::recover(digest, signature)
    }
}
