//! The `[signer]` section: where the resolver's signing key comes from. Only names are
//! written here (an env var, a file, a keystore, a foundry account); reading the key is
//! the wallet's job (`crate::wallet`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the resolver's signing key comes from: a hex key (env var or file) or an
/// encrypted keystore with its password (env var or file). Only names are written here.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SignerSection {
    /// Env var holding the hex private key.
    pub private_key_env: String,
    /// Or a file holding it (first line, hex).
    #[schemars(extend("x-path" = true))]
    pub key_file: Option<PathBuf>,
    /// Or an encrypted JSON keystore (the format `cast wallet import` writes). When set
    /// (or `account`), it is the key, whatever the env var holds.
    #[schemars(extend("x-path" = true))]
    pub keystore: Option<PathBuf>,
    /// Or a foundry account name: `~/.foundry/keystores/<account>` (`--account`).
    pub account: Option<String>,
    /// Env var holding the keystore's password.
    pub password_env: String,
    /// Or a file holding it (first line).
    #[schemars(extend("x-path" = true))]
    pub password_file: Option<PathBuf>,
}

impl Default for SignerSection {
    fn default() -> Self {
        Self {
            private_key_env: "CRESOLVER_PRIVATE_KEY".into(),
            key_file: None,
            keystore: None,
            account: None,
            password_env: "CRESOLVER_KEYSTORE_PASSWORD".into(),
            password_file: None,
        }
    }
}

impl SignerSection {
    /// The keystore file to use, if one is configured: `keystore`, or foundry's
    /// `~/.foundry/keystores/<account>`.
    pub fn keystore_path(&self) -> Option<PathBuf> {
        if let Some(p) = &self.keystore {
            return Some(p.clone());
        }
        let name = self.account.as_deref()?.trim();
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        Some(home.join(".foundry").join("keystores").join(name))
    }
}
