//! The `[protocols]` section of the node configuration: which agent protocols the node
//! speaks besides A2A, and their settings (secrets named by env var, never written here).

use super::duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The agent protocols the node speaks besides A2A, and their settings. Every protocol
/// is on by default: an agent built for another platform can serve as a worker as it is.
/// Secrets are named by env var, never written here.
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ProtocolsSection {
    /// `[protocols.factagora]`: Factagora BYOA webhooks.
    pub factagora: FactagoraSection,
    /// `[protocols.roundtable]`: round-table agents.
    pub roundtable: RoundtableSection,
    /// `[protocols.chorus]`: Chorus jobs.
    pub chorus: ChorusSection,
    /// `[protocols.agora]`: Agora, through its relay.
    pub agora: AgoraSection,
}

/// Factagora BYOA: whether it is spoken, and the bearer token and the hosts it may go to.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FactagoraSection {
    /// Speak Factagora BYOA to the workers whose registration names it.
    pub enabled: bool,
    /// Env var holding the bearer token sent to Factagora webhooks (unset: no header).
    pub token_env: String,
    /// The hosts (`host` or `host:port`) the token may be sent to. A worker registers
    /// its own endpoint on chain: any other host gets the call without the token.
    pub token_hosts: Vec<String>,
}

impl Default for FactagoraSection {
    fn default() -> Self {
        Self {
            enabled: true,
            token_env: "CRESOLVER_FACTAGORA_TOKEN".into(),
            token_hosts: vec![],
        }
    }
}

/// Round-table: whether it is spoken, and the API key and the hosts it may go to.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RoundtableSection {
    /// Speak round-table to the workers whose registration names it.
    pub enabled: bool,
    /// Env var holding the bearer key sent to round-table agents (unset: no header).
    pub api_key_env: String,
    /// The hosts (`host` or `host:port`) the key may be sent to; any other host gets
    /// the call without it.
    pub api_key_hosts: Vec<String>,
}

impl Default for RoundtableSection {
    fn default() -> Self {
        Self {
            enabled: true,
            api_key_env: "CRESOLVER_ROUNDTABLE_API_KEY".into(),
            api_key_hosts: vec![],
        }
    }
}

/// Chorus: whether it is spoken, the skills of its jobs, their budget and this node's
/// orchestrator id.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ChorusSection {
    /// Speak Chorus to the workers whose registration names it.
    pub enabled: bool,
    /// Skill of the resolve job.
    pub skill: String,
    /// Skill of the challenge job; empty: Chorus workers are not challenged.
    pub challenge_skill: String,
    /// Budget offered per job, in Chorus credits.
    pub budget: f64,
    /// This node's orchestrator id on Chorus (a UUID v4), under which its hiring history
    /// builds up; empty: drawn once and kept in the node's store (stable across restarts,
    /// shared by a cluster).
    pub orchestrator_id: String,
}

impl Default for ChorusSection {
    fn default() -> Self {
        Self {
            enabled: true,
            skill: "market_resolve".into(),
            challenge_skill: "market_challenge".into(),
            budget: 0.0,
            orchestrator_id: String::new(),
        }
    }
}

/// Agora: whether it is spoken, the node's identity, the price cap and the relay's
/// long-poll timeout.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(transform = duration::legacy_keys)]
pub struct AgoraSection {
    /// Speak Agora to the workers whose registration names it.
    pub enabled: bool,
    /// Env var holding the node's Ed25519 seed (32 bytes, hex) — its did:key identity.
    pub key_env: String,
    /// Or a file holding it (first line, hex). Neither set: a fresh identity per start
    /// (logged as a warning with the did).
    #[schemars(extend("x-path" = true))]
    pub key_file: Option<PathBuf>,
    /// Largest offer price accepted (USD).
    pub max_cost_usd: f64,
    /// Long-poll timeout per relay request (`"30s"`; 1 s to 60 s, in whole seconds: the
    /// relay is asked in seconds).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "secs"))]
    pub poll_timeout: Duration,
}

impl Default for AgoraSection {
    fn default() -> Self {
        Self {
            enabled: true,
            key_env: "CRESOLVER_AGORA_KEY".into(),
            key_file: None,
            max_cost_usd: 0.0,
            poll_timeout: Duration::from_secs(30),
        }
    }
}
