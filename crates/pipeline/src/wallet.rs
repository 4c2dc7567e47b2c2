//! The resolver's wallet: its signing key read from where `[signer]` names it — an
//! encrypted keystore (`signer.keystore`, or a foundry account) with its password from an
//! env var or a file, else a hex key from an env var or a file. The key and the password
//! never leave this module but inside the signer, and no error or log holds them.

use crate::config::SignerSection;
use alloy::signers::local::PrivateKeySigner;
use secrecy::{ExposeSecret, SecretString};
use std::path::{Path, PathBuf};

/// A signing key that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum WalletError {
    /// No signing key is configured.
    #[error(
        "no signing key: set the env var {env} to the resolver's hex private key, or set signer.key_file (dry-run and replay need no key)"
    )]
    NoKey {
        /// The env var the key is read from.
        env: String,
    },
    /// The signing key is not a hex private key.
    #[error("signing key from {source_name} is not a valid hex private key")]
    BadKey {
        /// Where the key came from (`env var …`, `key file …`).
        source_name: String,
    },
    /// A key or password file could not be read.
    #[error("cannot read key file {path}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// The operating system's refusal.
        #[source]
        source: std::io::Error,
    },
    /// The configured keystore file does not exist.
    #[error(
        "keystore {path} not found: import the key with `cast wallet import <name> --interactive` (then --account <name>), or point signer.keystore at the file"
    )]
    KeystoreMissing {
        /// The keystore file.
        path: PathBuf,
    },
    /// The keystore's password is configured nowhere.
    #[error("keystore {path} needs its password: set the env var {env}, or signer.password_file")]
    NoKeystorePassword {
        /// The keystore file.
        path: PathBuf,
        /// The env var the password is read from.
        env: String,
    },
    /// The password does not decrypt the keystore.
    #[error(
        "wrong password for keystore {path} (password from {source_name}): check it, or re-import the key with `cast wallet import`"
    )]
    KeystorePassword {
        /// The keystore file.
        path: PathBuf,
        /// Where the password came from (`env var …`, `password file …`).
        source_name: String,
    },
    /// The keystore file is not an encrypted JSON keystore.
    #[error(
        "keystore {path} is not a readable encrypted JSON keystore (import the key again with `cast wallet import`)"
    )]
    KeystoreInvalid {
        /// The keystore file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: alloy::signers::local::LocalSignerError,
    },
}

/// Reads the signing key `signer` names: a configured keystore (`signer.keystore`,
/// `--account`), else the env var, else the key file. The key never leaves the signer.
pub fn signer(signer: &SignerSection) -> Result<PrivateKeySigner, WalletError> {
    if let Some(path) = signer.keystore_path() {
        return keystore_signer(signer, &path);
    }
    let (text, source_name) = match std::env::var(&signer.private_key_env) {
        Ok(v) if !v.trim().is_empty() => (
            SecretString::from(v),
            format!("env var {}", signer.private_key_env),
        ),
        _ => match &signer.key_file {
            Some(p) => (first_line(p)?, format!("key file {}", p.display())),
            None => {
                return Err(WalletError::NoKey {
                    env: signer.private_key_env.clone(),
                });
            }
        },
    };
    let line = text.expose_secret().lines().next().unwrap_or("").trim();
    line.parse()
        .map_err(|_| WalletError::BadKey { source_name })
}

/// The first line of a key or password file (the rest, if any, is never read as a key).
fn first_line(path: &Path) -> Result<SecretString, WalletError> {
    let text = SecretString::from(std::fs::read_to_string(path).map_err(|source| {
        WalletError::KeyFile {
            path: path.to_path_buf(),
            source,
        }
    })?);
    Ok(text
        .expose_secret()
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
        .into())
}

/// Decrypts the keystore at `path` with the password from `signer.password_env` or
/// `signer.password_file`.
fn keystore_signer(signer: &SignerSection, path: &Path) -> Result<PrivateKeySigner, WalletError> {
    if !path.is_file() {
        return Err(WalletError::KeystoreMissing {
            path: path.to_path_buf(),
        });
    }
    let env = &signer.password_env;
    let (password, source_name): (SecretString, String) = match std::env::var(env) {
        Ok(v) if !v.is_empty() => (v.into(), format!("env var {env}")),
        _ => match &signer.password_file {
            Some(f) => (first_line(f)?, format!("password file {}", f.display())),
            None => {
                return Err(WalletError::NoKeystorePassword {
                    path: path.to_path_buf(),
                    env: env.clone(),
                });
            }
        },
    };
    PrivateKeySigner::decrypt_keystore(path, password.expose_secret().as_bytes()).map_err(
        |source| {
            // alloy's keystore error says "Mac Mismatch" when the password is wrong
            if source.to_string().to_lowercase().contains("mac mismatch") {
                WalletError::KeystorePassword {
                    path: path.to_path_buf(),
                    source_name,
                }
            } else {
                WalletError::KeystoreInvalid {
                    path: path.to_path_buf(),
                    source,
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_missing_key_file_keeps_its_cause() {
        let dir = tempfile::tempdir().unwrap();
        let s = SignerSection {
            private_key_env: "CRESOLVER_TEST_WALLET_UNSET_VAR".into(),
            key_file: Some(dir.path().join("nope.hex")),
            ..SignerSection::default()
        };
        let e = signer(&s).unwrap_err();
        assert!(matches!(e, WalletError::KeyFile { .. }), "{e}");
        assert!(e.to_string().contains("nope.hex"), "{e}");
        let cause = e.source().expect("the I/O error is the source");
        assert!(cause.to_string().contains("os error"), "{cause}");
        assert!(
            !e.to_string().contains("os error"),
            "the cause is printed once"
        );
    }

    #[test]
    fn a_bad_key_is_not_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("k.hex");
        std::fs::write(&f, "0xnot-a-key-but-secret\nsecond line").unwrap();
        let s = SignerSection {
            private_key_env: "CRESOLVER_TEST_WALLET_UNSET_VAR".into(),
            key_file: Some(f),
            ..SignerSection::default()
        };
        let e = signer(&s).unwrap_err();
        assert!(matches!(e, WalletError::BadKey { .. }), "{e}");
        assert!(!format!("{e} {e:?}").contains("secret"), "{e:?}");
    }

    #[test]
    fn no_key_names_the_env_var() {
        let s = SignerSection {
            private_key_env: "CRESOLVER_TEST_WALLET_UNSET_VAR".into(),
            ..SignerSection::default()
        };
        let e = signer(&s).unwrap_err();
        assert!(
            e.to_string().contains("CRESOLVER_TEST_WALLET_UNSET_VAR"),
            "{e}"
        );
    }
}
