//! ERC-8004 agents: registration-v1 files (as `data:` URIs) and registering an agent in
//! the identity registry.

use super::{MarketError, confirm};
use alloy::primitives::{Address, U256};
use alloy::providers::DynProvider;
use base64::Engine as _;
use cresolver_chain::bindings::IIdentityRegistry;
use serde_json::json;

/// An agent registered in the identity registry.
#[derive(Debug, Clone)]
pub struct RegisteredAgent {
    /// The agent id the registry assigned.
    pub agent_id: U256,
    /// The account that owns the agent.
    pub owner: Address,
    /// The token URI it was registered with (empty for none).
    pub uri: String,
}

/// Registers an agent owned by `owner` (the sender) in the identity registry at
/// `identity`, with the token URI `uri` (`None`: `register()`, no URI).
pub async fn register_agent(
    provider: &DynProvider,
    identity: Address,
    owner: Address,
    uri: Option<String>,
) -> Result<RegisteredAgent, MarketError> {
    let registry = IIdentityRegistry::new(identity, provider.clone());
    let sent = match &uri {
        Some(u) => registry.register_2(u.clone()).from(owner).send().await,
        None => registry.register_0().from(owner).send().await,
    }
    .map_err(|e| MarketError::from_call("register", &e))?;
    let receipt = confirm("register", sent).await?;
    let agent_id = receipt
        .decoded_log::<IIdentityRegistry::Registered>()
        .map(|l| l.data.agentId)
        .ok_or_else(|| {
            MarketError::Invalid(format!(
                "register emitted no Registered event: is {identity} an ERC-8004 identity registry?"
            ))
        })?;
    Ok(RegisteredAgent {
        agent_id,
        owner,
        uri: uri.unwrap_or_default(),
    })
}

/// A registration-v1 JSON document (ERC-8004), with an A2A service when `endpoint` is set.
pub fn registration_json(
    name: &str,
    chain_id: u64,
    owner: Address,
    endpoint: Option<&str>,
) -> serde_json::Value {
    let mut services =
        vec![json!({"name": "wallet", "endpoint": format!("eip155:{chain_id}:{owner}")})];
    if let Some(e) = endpoint {
        services.push(json!({
            "name": "A2A",
            "endpoint": e,
            "protocol": "cresolver",
            "category": "resolution",
            "tags": ["prediction-market", "resolution", "ai-agent"],
        }));
    }
    json!({
        "type": "https://eips.ethereum.org/EIPS/eip-8004#registration-v1",
        "name": name,
        "description": format!("{name}: cresolver worker"),
        "image": "",
        "services": services,
        "x402Support": false,
        "active": true,
        "supportedTrust": ["reputation"],
    })
}

/// `data:application/json;base64,…` of a JSON document.
pub fn data_uri(doc: &serde_json::Value) -> String {
    format!(
        "data:application/json;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(doc.to_string())
    )
}
