//! The signing and recovery the consensus core needs, behind one trait: production signs
//! with the member's secp256k1 key ([`Secp256k1Keys`]); the simulator plugs in a cheap
//! deterministic scheme so that it can run millions of executions. Signing is a pure
//! function of key and digest (RFC 6979), so the core calls it directly instead of
//! yielding a "sign" effect and waiting to be resumed, as commonware's voter does.

use crate::wire::{self, WireError};
use alloy::primitives::{Address, B256, Bytes};
use alloy::signers::local::PrivateKeySigner;
use lru::LruCache;
use parking_lot::Mutex;
use std::num::NonZeroUsize;

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
/// Recoveries are remembered ([`Recovered`]): a signature carried again (an observation in
/// the proposal and in each decision, a precommit in a certificate) is recovered once.
pub struct Secp256k1Keys {
    signer: PrivateKeySigner,
    recovered: Recovered,
}

impl Secp256k1Keys {
    /// The member's key, with an empty memory of recoveries.
    pub fn new(signer: PrivateKeySigner) -> Self {
        Self {
            signer,
            recovered: Recovered::default(),
        }
    }
}

impl Keys for Secp256k1Keys {
    fn address(&self) -> Address {
        self.signer.address()
    }
    fn sign(&self, digest: &B256) -> Result<Bytes, WireError> {
        wire::sign_digest(&self.signer, digest)
    }
    fn recover(&self, digest: &B256, signature: &[u8]) -> Result<Address, WireError> {
        self.recovered.recover(digest, signature)
    }
}

/// How many recoveries a member remembers: a few executions' worth of observations and
/// votes (an execution of n members carries about n observations and 3n votes); past it
/// the least recently used is forgotten, so a flood of new signatures costs only their
/// recoveries.
const RECOVERED_KEPT: usize = 4_096;

/// The signatures a member has recovered, by digest and signature, and whom to. A
/// recovery is a pure function of the two, so a remembered one is the same answer; only
/// successful recoveries of well-formed (65-byte) signatures are kept.
pub struct Recovered(Mutex<LruCache<(B256, [u8; 65]), Address>>);

impl Default for Recovered {
    fn default() -> Self {
        Self::with_capacity(RECOVERED_KEPT)
    }
}

impl Recovered {
    /// A memory of at most `kept` recoveries (at least one).
    pub fn with_capacity(kept: usize) -> Self {
        Self(Mutex::new(LruCache::new(
            NonZeroUsize::new(kept).unwrap_or(NonZeroUsize::MIN),
        )))
    }

    /// The member whose signature over `digest` this is, recovered once.
    pub fn recover(&self, digest: &B256, signature: &[u8]) -> Result<Address, WireError> {
        let Ok(sig) = <[u8; 65]>::try_from(signature) else {
            return wire::recover(digest, signature);
        };
        let key = (*digest, sig);
        if let Some(a) = self.0.lock().get(&key) {
            return Ok(*a);
        }
        let a = wire::recover(digest, signature)?;
        self.0.lock().put(key, a);
        Ok(a)
    }

    /// How many recoveries are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recovery_is_remembered_and_gives_the_same_signer() {
        let signer = PrivateKeySigner::random();
        let keys = Secp256k1Keys::new(signer.clone());
        let digest = B256::repeat_byte(7);
        let sig = keys.sign(&digest).unwrap_or_else(|e| panic!("signs: {e}"));
        assert_eq!(keys.recover(&digest, &sig).ok(), Some(signer.address()));
        assert_eq!(keys.recovered.len(), 1);
        assert_eq!(keys.recover(&digest, &sig).ok(), Some(signer.address()));
        assert_eq!(keys.recovered.len(), 1, "the second recovery is remembered");
        // another digest with the same signature is another recovery: not this signer
        let other = B256::repeat_byte(8);
        assert_ne!(keys.recover(&other, &sig).ok(), Some(signer.address()));
        // (that other recovery is remembered too)
        assert_eq!(keys.recovered.len(), 2);
        // a malformed signature is refused and not remembered
        assert!(keys.recover(&digest, &sig[..64]).is_err());
        assert_eq!(keys.recovered.len(), 2);
    }

    #[test]
    fn the_memory_is_bounded_and_forgets_the_least_recently_used() {
        let keys = Secp256k1Keys::new(PrivateKeySigner::random());
        let recovered = Recovered::with_capacity(4);
        let signed: Vec<(B256, Bytes)> = (0u64..6)
            .map(|i| {
                let d = alloy::primitives::keccak256(i.to_be_bytes());
                (d, keys.sign(&d).unwrap_or_else(|e| panic!("signs: {e}")))
            })
            .collect();
        for (d, sig) in &signed {
            assert_eq!(recovered.recover(d, sig).ok(), Some(keys.address()));
        }
        assert_eq!(recovered.len(), 4);
        let (first, sig) = &signed[0];
        let key = (*first, <[u8; 65]>::try_from(&sig[..]).unwrap_or([0; 65]));
        assert!(
            recovered.0.lock().peek(&key).is_none(),
            "the oldest is forgotten"
        );
    }
}
