//! The stages' settings from a node configuration: discovery (with the worker protocols
//! it may speak) and the submitter. The node, replay and dry-run build their stages from
//! these, so the three paths read `[discovery]`, `[protocols]` and `[submit]` alike.

use crate::config::{AgoraSection, ChorusSection, ConfigError, NodeConfig, ProtocolsSection};
use crate::workflow::Workflow;
use alloy::primitives::Address;
use cresolver_chain::discovery::DiscoveryConfig;
use cresolver_core::report::ReportMetadata;
use cresolver_submit::SubmitterConfig;
use cresolver_workers::registry::{ProtocolKind, ProtocolSet};
use std::sync::Arc;

/// The discovery settings of a node config.
pub fn discovery_config(cfg: &NodeConfig) -> Result<DiscoveryConfig, ConfigError> {
    Ok(DiscoveryConfig {
        allow_private_endpoints: cfg.discovery.allow_private_endpoints,
        lookup: Arc::new(cresolver_workers::netguard::SystemLookup),
        ipfs_gateway: url::Url::parse(&cfg.discovery.ipfs_gateway).map_err(|e| {
            ConfigError::Invalid {
                key: "discovery.ipfs_gateway".into(),
                message: e.to_string(),
            }
        })?,
        fetch_timeout: cfg.discovery.fetch_timeout,
        max_metadata_bytes: cfg.discovery.max_metadata_bytes,
        protocols: protocol_set(cfg)?,
    })
}

/// The node's protocol adapters from `[protocols]`: A2A always, each other protocol
/// when enabled. Secrets come from the env vars the config names.
pub fn protocol_set(cfg: &NodeConfig) -> Result<ProtocolSet, ConfigError> {
    use cresolver_workers::agora::AgoraProtocol;
    use cresolver_workers::chorus::ChorusProtocol;
    use cresolver_workers::factagora::{FactagoraConfig, FactagoraProtocol};
    use cresolver_workers::roundtable::{RoundTableConfig, RoundTableProtocol};
    let p = &cfg.protocols;
    warn_unlisted_credentials(p);
    let mut set = ProtocolSet::a2a_only();
    if p.factagora.enabled {
        set = set.with(
            ProtocolKind::Factagora,
            Arc::new(FactagoraProtocol::new(FactagoraConfig {
                token: secret(&p.factagora.token_env).map(Into::into),
                token_hosts: p.factagora.token_hosts.clone(),
            })),
        );
    }
    if p.roundtable.enabled {
        set = set.with(
            ProtocolKind::Roundtable,
            Arc::new(RoundTableProtocol::new(RoundTableConfig {
                api_key: secret(&p.roundtable.api_key_env).map(Into::into),
                api_key_hosts: p.roundtable.api_key_hosts.clone(),
            })),
        );
    }
    if p.chorus.enabled {
        set = set.with(
            ProtocolKind::Chorus,
            Arc::new(ChorusProtocol::new(chorus_settings(&p.chorus)?)),
        );
    }
    if p.agora.enabled {
        let node = agora_node(&p.agora)?;
        set = set.with_factory(ProtocolKind::Agora, AgoraProtocol::factory(Arc::new(node)));
    }
    Ok(set)
}

/// The value of the env var `var`, trimmed; `None` when it is unset or blank.
fn secret(var: &str) -> Option<String> {
    std::env::var(var)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Warns about a protocol credential that is set while no host may receive it.
fn warn_unlisted_credentials(p: &ProtocolsSection) {
    for (token, hosts, env, key) in [
        (
            secret(&p.factagora.token_env),
            &p.factagora.token_hosts,
            &p.factagora.token_env,
            "protocols.factagora.token_hosts",
        ),
        (
            secret(&p.roundtable.api_key_env),
            &p.roundtable.api_key_hosts,
            &p.roundtable.api_key_env,
            "protocols.roundtable.api_key_hosts",
        ),
    ] {
        if token.is_some() && hosts.is_empty() {
            tracing::warn!(env = %env, key, "a protocol credential is set but no host may receive it: list the hosts in {key} (workers choose their own endpoints; the credential is never sent to an unlisted host)");
        }
    }
}

/// The Chorus adapter's settings from `[protocols.chorus]`, validated.
fn chorus_settings(
    c: &ChorusSection,
) -> Result<cresolver_workers::chorus::ChorusConfig, ConfigError> {
    let mut settings = cresolver_workers::chorus::ChorusConfig {
        skill: c.skill.trim().to_string(),
        challenge_skill: Some(c.challenge_skill.trim().to_string()).filter(|s| !s.is_empty()),
        budget: c.budget,
        ..Default::default()
    };
    if !c.orchestrator_id.trim().is_empty() {
        settings.orchestrator_id = c.orchestrator_id.trim().to_string();
    }
    settings
        .validate()
        .map_err(|message| ConfigError::Invalid {
            key: "protocols.chorus".into(),
            message,
        })?;
    Ok(settings)
}

/// The node's Agora identity from `[protocols.agora]`: the seed from the env var, else
/// from the key file, else a fresh identity for this run.
fn agora_node(a: &AgoraSection) -> Result<cresolver_workers::agora::AgoraNode, ConfigError> {
    use cresolver_workers::agora::{AgoraConfig, AgoraNode};
    let settings = AgoraConfig {
        max_cost_usd: a.max_cost_usd,
        poll_timeout: a.poll_timeout,
        ..AgoraConfig::default()
    };
    let invalid = |message: String| ConfigError::Invalid {
        key: "protocols.agora".into(),
        message,
    };
    let seed = match (secret(&a.key_env), &a.key_file) {
        (Some(hex), _) => Some((hex, format!("env var {}", a.key_env))),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::KeyFile {
                path: path.clone(),
                source,
            })?;
            let line = text.lines().next().unwrap_or("").trim().to_string();
            Some((line, format!("key file {}", path.display())))
        }
        (None, None) => None,
    };
    match seed {
        Some((hex, from)) => AgoraNode::from_secret_hex(&hex, settings)
            .map_err(|e| invalid(format!("identity from {from}: {e}"))),
        None => {
            let node = AgoraNode::generate(settings).map_err(|e| invalid(e.to_string()))?;
            // info, not a warning: nothing is wrong until an Agora worker is met, and
            // a newcomer who configured nothing of Agora should not be alarmed
            tracing::info!(
                did = %node.did(),
                "no Agora identity configured (protocols.agora.key_env / key_file): using a fresh one for this run"
            );
            Ok(node)
        }
    }
}

/// The submitter settings of `workflow` on `market` under a node config.
pub fn submitter_config(cfg: &NodeConfig, workflow: &Workflow, market: Address) -> SubmitterConfig {
    let report = &workflow.submit.report;
    SubmitterConfig {
        market,
        mode: workflow.submit.mode,
        forwarder: cfg.submit.forwarder,
        receiver: cfg.submit.receiver,
        metadata: ReportMetadata::new(
            report.workflow_id,
            workflow.report_workflow_name(),
            report.workflow_owner,
            [0, 1],
        ),
        gas_margin_percent: cfg.submit.gas_margin_percent,
    }
}
