//! The `[api]` section: the HTTP API's listen address and the env var of its trigger's
//! token.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The node's HTTP API: its listen address and the token of its trigger.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSection {
    /// Listen address of the HTTP API; empty disables it.
    pub listen: String,
    /// Env var holding the bearer token of `POST /resolve` (unset: the trigger is disabled).
    pub token_env: String,
}

impl Default for ApiSection {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9464".into(),
            token_env: "CRESOLVER_API_TOKEN".into(),
        }
    }
}
