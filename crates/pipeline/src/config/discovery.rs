//! The `[discovery]` section: which worker endpoints are allowed and how their
//! registration files are fetched.

use super::duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use validator::Validate;

/// How workers are discovered: which endpoints are allowed and how registration files
/// are fetched.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields, default)]
#[schemars(transform = duration::legacy_keys)]
pub struct DiscoverySection {
    /// Allow worker endpoints on loopback/private/link-local addresses (demo and tests only).
    pub allow_private_endpoints: bool,
    /// The gateway `ipfs://` token URIs are fetched through.
    #[validate(url(message = "is not a URL"))]
    pub ipfs_gateway: String,
    /// How long fetching one registration file may take (`"5s"`).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]
    pub fetch_timeout: Duration,
    /// The largest registration file read.
    pub max_metadata_bytes: usize,
}

impl Default for DiscoverySection {
    fn default() -> Self {
        Self {
            allow_private_endpoints: false,
            ipfs_gateway: "https://ipfs.io/ipfs/".into(),
            fetch_timeout: Duration::from_secs(5),
            max_metadata_bytes: 64 * 1024,
        }
    }
}
