//! `did:key` identifiers for Ed25519 keys (Agora spec, Appendix A): `did:key:z` followed
//! by base58btc(`0xed 0x01` ‖ 32-byte public key). Decoding is strict: the multibase
//! prefix must be `z`, the multicodec prefix `0xed01`, the key exactly 32 bytes and a
//! valid curve point.

use ed25519_dalek::VerifyingKey;

/// Everything before the base58btc part of an Ed25519 `did:key`.
pub const DID_KEY_PREFIX: &str = "did:key:z";
/// Multicodec prefix of an Ed25519 public key.
pub const ED25519_MULTICODEC: [u8; 2] = [0xed, 0x01];
/// Longest `did:key` accepted before decoding (an Ed25519 one is 56 characters).
pub const MAX_DID_LEN: usize = 128;

/// Why a string is not an Ed25519 `did:key`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DidKeyError {
    /// It does not start with [`DID_KEY_PREFIX`].
    #[error("not a did:key with base58btc multibase (must start with `did:key:z`)")]
    Prefix,
    /// Longer than [`MAX_DID_LEN`]; holds its length in bytes.
    #[error("did:key is {0} characters; the limit is {MAX_DID_LEN}")]
    TooLong(usize),
    /// The part after the prefix is not base58btc; holds the decoder's reason.
    #[error("did:key is not valid base58btc: {0}")]
    Base58(String),
    /// The decoded bytes do not start with [`ED25519_MULTICODEC`].
    #[error("did:key multicodec prefix is not 0xed01 (Ed25519)")]
    Codec,
    /// The key after the multicodec prefix is not 32 bytes; holds its length in bytes.
    #[error("did:key holds a {0}-byte key; Ed25519 keys are 32 bytes")]
    KeyLength(usize),
    /// The 32 bytes are not a point of the Ed25519 curve.
    #[error("did:key holds bytes that are not an Ed25519 public key")]
    InvalidPoint,
}

/// The `did:key` of an Ed25519 public key.
pub fn public_key_to_did(public_key: &[u8; 32]) -> String {
    let mut bytes = Vec::with_capacity(34);
    bytes.extend_from_slice(&ED25519_MULTICODEC);
    bytes.extend_from_slice(public_key);
    format!("{DID_KEY_PREFIX}{}", bs58::encode(bytes).into_string())
}

/// The raw 32-byte Ed25519 public key of a `did:key` (format checks only).
pub fn did_to_public_key(did: &str) -> Result<[u8; 32], DidKeyError> {
    if did.len() > MAX_DID_LEN {
        return Err(DidKeyError::TooLong(did.len()));
    }
    let encoded = did
        .strip_prefix(DID_KEY_PREFIX)
        .ok_or(DidKeyError::Prefix)?;
    let decoded = bs58::decode(encoded)
        .into_vec()
        .map_err(|e| DidKeyError::Base58(e.to_string()))?;
    if decoded.len() < 2 || decoded[..2] != ED25519_MULTICODEC {
        return Err(DidKeyError::Codec);
    }
    let key = &decoded[2..];
    <[u8; 32]>::try_from(key).map_err(|_| DidKeyError::KeyLength(key.len()))
}

/// The verifying key of a `did:key`: format checks plus a valid curve point.
pub fn did_to_verifying_key(did: &str) -> Result<VerifyingKey, DidKeyError> {
    let bytes = did_to_public_key(did)?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| DidKeyError::InvalidPoint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signature, Signer, SigningKey, Verifier};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 8032, section 7.1, TEST 1.
    const RFC8032_SECRET: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const RFC8032_PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
    const RFC8032_SIG: &str = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";

    #[test]
    fn rfc8032_test1_sign_verify_and_did_roundtrip() {
        let secret: [u8; 32] = hex(RFC8032_SECRET).try_into().unwrap();
        let key = SigningKey::from_bytes(&secret);
        let public: [u8; 32] = hex(RFC8032_PUBLIC).try_into().unwrap();
        assert_eq!(key.verifying_key().to_bytes(), public);
        let sig = key.sign(b"");
        assert_eq!(sig.to_bytes().to_vec(), hex(RFC8032_SIG));
        let did = public_key_to_did(&public);
        assert!(did.starts_with("did:key:z6Mk"), "{did}");
        assert_eq!(did_to_public_key(&did).unwrap(), public);
        let vk = did_to_verifying_key(&did).unwrap();
        let expected = Signature::from_bytes(&hex(RFC8032_SIG).try_into().unwrap());
        assert!(vk.verify(b"", &expected).is_ok());
        assert!(vk.verify(b"x", &expected).is_err());
    }

    /// W3C CCG did-method-key test vectors (`test-vectors/ed25519-x25519.json`): the
    /// Ed25519 keys generated from the all-zero and the `…01` seeds.
    #[test]
    fn w3c_did_method_key_vectors() {
        let vectors = [
            (
                "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp",
                "4zvwRjXUKGfvwnParsHAS3HuSVzV5cA4McphgmoCtajS",
                [0u8; 32],
            ),
            (
                "did:key:z6MkjchhfUsD6mmvni8mCdXHw216Xrm9bQe2mBH1P5RDjVJG",
                "6ASf5EcmmEHTgDJ4X4ZT5vT6iHVJBXPg5AN5YoTCpGWt",
                {
                    let mut s = [0u8; 32];
                    s[31] = 1;
                    s
                },
            ),
        ];
        for (did, public_b58, seed) in vectors {
            let public: [u8; 32] = bs58::decode(public_b58)
                .into_vec()
                .unwrap()
                .try_into()
                .unwrap();
            assert_eq!(did_to_public_key(did).unwrap(), public, "{did}");
            assert_eq!(public_key_to_did(&public), did);
            let from_seed = SigningKey::from_bytes(&seed).verifying_key().to_bytes();
            assert_eq!(from_seed, public, "{did} from its seed");
        }
    }

    #[test]
    fn strict_validation_rules() {
        let good = "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp";
        // Rule 1: base58btc multibase only (`z`); `f` is base16, `m` base64.
        assert_eq!(
            did_to_public_key(&good.replace("did:key:z", "did:key:f")),
            Err(DidKeyError::Prefix)
        );
        assert_eq!(
            did_to_public_key("did:web:example.com"),
            Err(DidKeyError::Prefix)
        );
        // A DID URL (fragment) is not a DID; `0` is not in the base58btc alphabet.
        assert!(matches!(
            did_to_public_key(&format!("{good}#frag")),
            Err(DidKeyError::Base58(_))
        ));
        assert!(matches!(
            did_to_public_key(&format!("{good}0")),
            Err(DidKeyError::Base58(_))
        ));
        // Rule 2: the multicodec must be 0xed01 (an X25519 key, 0xec01, is refused).
        let x25519 = "did:key:z6LShs9GGnqk85isEBzzshkuVWrVKsRp24GnDuHk8QWkARMW";
        assert_eq!(did_to_public_key(x25519), Err(DidKeyError::Codec));
        // Rule 3: exactly 32 key bytes.
        let mut short = ED25519_MULTICODEC.to_vec();
        short.extend_from_slice(&[7u8; 31]);
        let did = format!("did:key:z{}", bs58::encode(&short).into_string());
        assert_eq!(did_to_public_key(&did), Err(DidKeyError::KeyLength(31)));
        let mut long = ED25519_MULTICODEC.to_vec();
        long.extend_from_slice(&[7u8; 33]);
        let did = format!("did:key:z{}", bs58::encode(&long).into_string());
        assert_eq!(did_to_public_key(&did), Err(DidKeyError::KeyLength(33)));
        // The test suite's published too-short and too-long Ed25519 dids.
        assert!(did_to_public_key("did:key:zTjsVPtY").is_err());
        assert!(did_to_public_key(
            "did:key:z6MkA9MEcFWsoUVqj2zX6LACFaikLQ28i9WAsJnURDS3HLGKSkUbwUbiLH22ohgZ2BwgpQ6qC3VBTNV3pLhYDTVgR"
        )
        .is_err());
        // Bounded before decoding.
        let huge = format!("did:key:z{}", "2".repeat(500));
        assert_eq!(did_to_public_key(&huge), Err(DidKeyError::TooLong(509)));
        assert!(did_to_verifying_key(good).is_ok());
    }
}
