//! The simulator's signature scheme: cheap and deterministic, so that a run costs hashes,
//! not elliptic-curve operations. Member `i`'s signature over a digest is
//! `keccak256(secret_i ‖ digest) ‖ i (4 bytes) ‖ 28 zero bytes ‖ v = 0`: 65 bytes with
//! v = 0, the shape the wire checks. Recovery reads the index, recomputes the hash with
//! that member's secret and names the member, or refuses. Only a member's own key makes
//! its signature: a Byzantine member signs with its own secret only.

use alloy::primitives::{Address, B256, Bytes, keccak256};
use cresolver_don::consensus::Keys;
use cresolver_don::wire::WireError;
use std::sync::Arc;

/// Every member's address and secret: what recovery needs.
#[derive(Debug)]
pub struct Scheme {
    /// The members, in configuration order.
    pub members: Vec<Address>,
    secrets: Vec<B256>,
}

impl Scheme {
    /// The members and secrets of a run (derived from its seed).
    pub fn new(seed: u64, n: usize) -> Self {
        let word = |tag: &[u8], i: usize| {
            let mut buf = tag.to_vec();
            buf.extend_from_slice(&seed.to_be_bytes());
            buf.extend_from_slice(&(i as u64).to_be_bytes());
            keccak256(buf)
        };
        Self {
            members: (0..n)
                .map(|i| Address::from_word(word(b"sim-member", i)))
                .collect(),
            secrets: (0..n).map(|i| word(b"sim-secret", i)).collect(),
        }
    }

    fn mac(&self, i: usize, digest: &B256) -> B256 {
        let mut buf = [0u8; 64];
        buf[..32].copy_from_slice(self.secrets[i].as_slice());
        buf[32..].copy_from_slice(digest.as_slice());
        keccak256(buf)
    }

    /// Member `i`'s signature over `digest`.
    pub fn sign(&self, i: usize, digest: &B256) -> Bytes {
        let mut sig = [0u8; 65];
        sig[..32].copy_from_slice(self.mac(i, digest).as_slice());
        sig[32..36].copy_from_slice(&(i as u32).to_be_bytes());
        Bytes::copy_from_slice(&sig)
    }

    /// The member whose signature over `digest` this is.
    pub fn recover(&self, digest: &B256, sig: &[u8]) -> Result<Address, WireError> {
        if sig.len() != 65 || sig[64] != 0 || sig[36..64].iter().any(|b| *b != 0) {
            return Err(WireError::BadSignature);
        }
        let i = u32::from_be_bytes([sig[32], sig[33], sig[34], sig[35]]) as usize;
        if i >= self.members.len() || self.mac(i, digest).as_slice() != &sig[..32] {
            return Err(WireError::BadSignature);
        }
        Ok(self.members[i])
    }
}

/// One member's key in the simulator's scheme.
pub struct SimKeys {
    /// The scheme.
    pub scheme: Arc<Scheme>,
    /// The member's index.
    pub index: usize,
}

impl Keys for SimKeys {
    fn address(&self) -> Address {
        self.scheme.members[self.index]
    }
    fn sign(&self, digest: &B256) -> Result<Bytes, WireError> {
        Ok(self.scheme.sign(self.index, digest))
    }
    fn recover(&self, digest: &B256, signature: &[u8]) -> Result<Address, WireError> {
        self.scheme.recover(digest, signature)
    }
}
