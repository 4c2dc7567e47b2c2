//! Endpoint discovery: from a market's registered workers to the URLs the round calls.
//!
//! Per worker (ERC-8004): `tokenURI(agentId)` on the identity registry → the registration
//! file (a `data:` URI, an `https://` URL or an `ipfs://` CID fetched through a gateway) →
//! the `services` (or legacy `endpoints`) entry named `A2A` → its `endpoint`, which must be
//! a public http(s) URL. A worker that fails any step is kept, with a [`DiscardReason`],
//! so the round still counts it in the registered set.
//!
//! Everything here is untrusted input: fetches are size- and time-bounded, redirects are
//! not followed, and — unless `allow_private_endpoints` — URLs whose host is or resolves
//! to a loopback, private, link-local, metadata or otherwise non-public address are
//! refused, both for worker endpoints and for the metadata fetch itself (including the
//! IPFS gateway). `http://` is only accepted with `allow_private_endpoints`, for local
//! development; otherwise metadata URLs must be `https://`.
//!
//! Limits: the address check resolves the host once; the HTTP client resolves it again
//! when connecting, so a DNS answer that changes between the two (rebinding) is not
//! caught here. The `reqwest::Client` passed in should not follow redirects
//! ([`cresolver_workers::StageClient::default_http`] does not); a followed redirect is still
//! detected and the fetch discarded.

mod host;

pub use host::HostRefused;
use host::check_url;

use crate::bindings::IIdentityRegistry;
use crate::decode_revert;
use crate::reader::WorkerInfo;
use alloy::eips::BlockId;
use alloy::primitives::{Address, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::SolCall;
use base64::Engine as _;
use cresolver_workers::fanout::{WorkerSlot, WorkerTarget};
use cresolver_workers::registry::{ProtocolKind, ProtocolSet};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// Discovery settings.
#[derive(Debug, Clone)]
pub struct DiscoveryConfig {
    /// Accept loopback/private endpoints and `http://` metadata URLs (local development).
    pub allow_private_endpoints: bool,
    /// How host names are resolved (the system's resolver; tests play others). The same
    /// lookup and rule run again at every connection (`workers::netguard`).
    pub lookup: Arc<dyn cresolver_workers::netguard::Lookup>,
    /// Gateway for `ipfs://` URIs; `ipfs://CID/path` becomes `{gateway}CID/path`. The
    /// gateway URL is subject to the same rules as any metadata URL.
    pub ipfs_gateway: Url,
    /// Bound on one metadata fetch (connect, headers and body).
    pub fetch_timeout: Duration,
    /// Bound on a registration file's size.
    pub max_metadata_bytes: usize,
    /// The adapters of the protocols this node speaks; a worker whose chosen service
    /// speaks another is not called (its reason says which protocol to enable).
    pub protocols: ProtocolSet,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            allow_private_endpoints: false,
            lookup: Arc::new(cresolver_workers::netguard::SystemLookup),
            ipfs_gateway: Url::parse("https://ipfs.io/ipfs/").expect("static gateway URL"),
            fetch_timeout: Duration::from_secs(5),
            max_metadata_bytes: 64 * 1024,
            protocols: ProtocolSet::default(),
        }
    }
}

impl DiscoveryConfig {
    /// The address policy of calls to hosts a stranger chose, from these settings.
    pub fn net_policy(&self) -> cresolver_workers::netguard::NetPolicy {
        cresolver_workers::netguard::NetPolicy {
            allow_private: self.allow_private_endpoints,
            lookup: self.lookup.clone(),
        }
    }
}

/// Why a worker was discarded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DiscardReason {
    /// The identity registry's `tokenURI(agentId)` call failed: it reverted, the node
    /// refused it, no contract answered or its return data did not decode.
    #[error("tokenURI call failed: {detail}")]
    TokenUriCallFailed {
        /// The revert reason or RPC error.
        detail: String,
    },
    /// `tokenURI` returned an empty string.
    #[error("agent has no token URI")]
    NoTokenUri,
    /// The registration file could not be fetched (bad URL or scheme, refused host, HTTP
    /// error, redirect, timeout, too large).
    #[error("fetching the registration file failed: {detail}")]
    FetchFailed {
        /// What went wrong.
        detail: String,
    },
    /// The registration file is not a readable registration (a malformed `data:` URI,
    /// not a JSON object, a field of the wrong type, an Agora service without a `did`).
    #[error("invalid registration file: {detail}")]
    InvalidMetadata {
        /// What is wrong with it.
        detail: String,
    },
    /// No service with an endpoint in a protocol this node speaks (the serde tag keeps
    /// its historic name).
    #[error(
        "registration has no worker service endpoint (A2A, Factagora, round-table, Chorus or Agora)"
    )]
    NoA2aEndpoint,
    /// The registration's `active` is `false`.
    #[error("registration is marked inactive")]
    Inactive,
    /// The chosen service's endpoint is not a URL the node may call (see
    /// [`validate_endpoint`]).
    #[error("endpoint refused: {detail}")]
    RefusedEndpoint {
        /// Why it was refused.
        detail: String,
    },
}

fn fetch_failed(detail: impl Into<String>) -> DiscardReason {
    DiscardReason::FetchFailed {
        detail: detail.into(),
    }
}

fn invalid(detail: impl Into<String>) -> DiscardReason {
    DiscardReason::InvalidMetadata {
        detail: detail.into(),
    }
}

fn refused(detail: impl Into<String>) -> DiscardReason {
    DiscardReason::RefusedEndpoint {
        detail: detail.into(),
    }
}

/// The outcome of discovery for one registered worker (also what a transcript records).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DiscoveredWorker {
    /// The worker's address.
    pub address: Address,
    /// Its agent id in the identity registry.
    pub agent_id: U256,
    /// The registration's `name`, when the file could be read.
    pub name: Option<String>,
    /// The validated endpoint the round calls, or why the worker was discarded.
    pub endpoint: Result<Url, DiscardReason>,
    /// The protocol of the chosen service, when one was chosen.
    #[serde(
        default,
        deserialize_with = "cresolver_workers::registry::lenient_protocol"
    )]
    pub protocol: Option<ProtocolKind>,
    /// The agent's `did` from the chosen service (Agora: whom the node addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub did: Option<String>,
}

/// A registration file (ERC-8004 registration-v1), read leniently.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Registration {
    /// `name`, trimmed; `None` when absent or empty.
    pub name: Option<String>,
    /// `description`, trimmed; `None` when absent or empty.
    pub description: Option<String>,
    /// `active`; `true` when absent.
    pub active: bool,
    /// `services`, or the legacy `endpoints` array.
    pub services: Vec<Service>,
}

/// One entry of a registration's `services`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Service {
    /// `name`, trimmed (`A2A`, `MCP`, …).
    pub name: String,
    /// `endpoint`, trimmed, when present.
    pub endpoint: Option<String>,
    /// `protocol`, trimmed, when present and not empty; names the protocol in place of
    /// `name`.
    pub protocol: Option<String>,
    /// The agent's decentralised identifier (`did:key:…`), used by Agora services.
    pub did: Option<String>,
}

/// The service a worker is called through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerService {
    /// The protocol the worker is called in.
    pub kind: ProtocolKind,
    /// The service's endpoint, not yet validated.
    pub endpoint: String,
    /// The service's `did`, when it has one.
    pub did: Option<String>,
}

/// Discovers every worker's endpoint concurrently; one entry per worker, in the order
/// of `workers`. `tokenURI` is read at `block` (`None`: latest).
pub async fn discover(
    provider: &DynProvider,
    identity: Address,
    workers: &[WorkerInfo],
    block: Option<u64>,
    cfg: &DiscoveryConfig,
    http: &reqwest::Client,
) -> Vec<DiscoveredWorker> {
    let block = block.map_or(BlockId::latest(), BlockId::number);
    futures::future::join_all(
        workers
            .iter()
            .map(|w| discover_one(provider, identity, w, block, cfg, http)),
    )
    .await
}

async fn discover_one(
    provider: &DynProvider,
    identity: Address,
    worker: &WorkerInfo,
    block: BlockId,
    cfg: &DiscoveryConfig,
    http: &reqwest::Client,
) -> DiscoveredWorker {
    let mut found = DiscoveredWorker {
        address: worker.address,
        agent_id: worker.agent_id,
        name: None,
        endpoint: Err(DiscardReason::NoTokenUri),
        protocol: None,
        did: None,
    };
    let result = async {
        let uri = token_uri(provider, identity, worker.agent_id, block).await?;
        if uri.trim().is_empty() {
            return Err(DiscardReason::NoTokenUri);
        }
        let bytes = fetch_token_uri(uri.trim(), cfg, http).await?;
        let reg = parse_registration(&bytes)?;
        found.name = reg.name.clone();
        if !reg.active {
            return Err(DiscardReason::Inactive);
        }
        let service = worker_service(&reg).ok_or(DiscardReason::NoA2aEndpoint)?;
        found.protocol = Some(service.kind);
        found.did = service.did.clone();
        if service.kind == ProtocolKind::Agora && service.did.is_none() {
            return Err(invalid(
                "the Agora service has no `did` (the agent's did:key the node addresses)",
            ));
        }
        validate_endpoint_with(&service.endpoint, &cfg.net_policy()).await
    }
    .await;
    if let Err(reason) = &result {
        tracing::warn!(
            worker = %worker.address,
            agent_id = %worker.agent_id,
            reason = %reason,
            "worker discarded by discovery"
        );
    }
    found.endpoint = result;
    found
}

/// `tokenURI(agentId)` on the identity registry at `block`.
async fn token_uri(
    provider: &DynProvider,
    identity: Address,
    agent_id: U256,
    block: BlockId,
) -> Result<String, DiscardReason> {
    let call = IIdentityRegistry::tokenURICall { tokenId: agent_id };
    let tx = TransactionRequest::default()
        .to(identity)
        .input(call.abi_encode().into());
    let failed = |detail: String| DiscardReason::TokenUriCallFailed { detail };
    let raw = provider
        .call(tx)
        .block(block)
        .await
        .map_err(|e| match e.as_error_resp() {
            Some(p) => match p.as_revert_data() {
                Some(data) => failed(format!("reverted: {}", decode_revert(&data))),
                None => failed(p.message.to_string()),
            },
            None => failed(e.to_string()),
        })?;
    if raw.is_empty() {
        return Err(failed(format!("no contract at {identity}")));
    }
    IIdentityRegistry::tokenURICall::abi_decode_returns_validate(&raw)
        .map_err(|e| failed(format!("undecodable return data: {e}")))
}

/// Worker slots for the fan-out: each worker with an endpoint gets the node's adapter
/// for its protocol; the others (and a worker whose adapter cannot be built, such as an
/// Agora service with a malformed did) carry their discard reason.
pub fn to_slots(found: &[DiscoveredWorker], protocols: &ProtocolSet) -> Vec<WorkerSlot> {
    found
        .iter()
        .map(|w| WorkerSlot {
            address: w.address,
            target: match &w.endpoint {
                Ok(url) => {
                    let kind = w.protocol.unwrap_or(ProtocolKind::A2a);
                    protocols
                        .for_worker(kind, w.did.as_deref())
                        .map(|protocol| WorkerTarget {
                            endpoint: url.clone(),
                            protocol,
                        })
                }
                Err(reason) => Err(reason.to_string()),
            },
        })
        .collect()
}

// ─── Fetching the registration file ──────────────────────────────────────────────

/// The bytes a token URI points at: a `data:` URI (base64 or percent-encoded, any JSON
/// media type), an `https://` URL (`http://` only with `allow_private_endpoints`), or
/// `ipfs://CID[/path]` through the configured gateway. Bounded by `max_metadata_bytes`
/// and `fetch_timeout`; redirects are not followed.
pub async fn fetch_token_uri(
    uri: &str,
    cfg: &DiscoveryConfig,
    http: &reqwest::Client,
) -> Result<Vec<u8>, DiscardReason> {
    let scheme = uri
        .split_once(':')
        .map(|(s, _)| s.to_ascii_lowercase())
        .unwrap_or_default();
    match scheme.as_str() {
        "data" => decode_data_uri(uri, cfg.max_metadata_bytes),
        "ipfs" => {
            let url = ipfs_url(uri, &cfg.ipfs_gateway)?;
            fetch_http(url, cfg, http).await
        }
        "http" | "https" => {
            let url = Url::parse(uri).map_err(|e| fetch_failed(format!("bad URL: {e}")))?;
            fetch_http(url, cfg, http).await
        }
        _ => Err(fetch_failed(format!(
            "unsupported token URI scheme `{}` (data:, https:// and ipfs:// are)",
            shorten(&scheme)
        ))),
    }
}

/// Decodes `data:[<media type>][;params][;base64],<data>`.
pub fn decode_data_uri(uri: &str, max: usize) -> Result<Vec<u8>, DiscardReason> {
    let rest = match uri.get(.."data:".len()) {
        Some(scheme) if scheme.eq_ignore_ascii_case("data:") => &uri["data:".len()..],
        _ => return Err(invalid("not a data: URI")),
    };
    let (header, data) = rest
        .split_once(',')
        .ok_or_else(|| invalid("data URI without a comma"))?;
    let mut parts = header.split(';');
    let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let is_base64 = parts.any(|p| p.trim().eq_ignore_ascii_case("base64"));
    if !is_json_media_type(&media) {
        return Err(invalid(format!(
            "data URI media type `{}` is not JSON",
            shorten(if media.is_empty() {
                "text/plain"
            } else {
                &media
            })
        )));
    }
    // The decoded size is at most the encoded size; refuse early what cannot fit.
    let bound = if is_base64 { max * 2 + 16 } else { max * 3 };
    if data.len() > bound.max(max) {
        return Err(fetch_failed(format!("larger than {max} bytes")));
    }
    let unescaped = percent_decode(data);
    let bytes = if is_base64 {
        let text: Vec<u8> = unescaped
            .into_iter()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        base64_decode(&text).map_err(|e| invalid(format!("data URI is not valid base64: {e}")))?
    } else {
        unescaped
    };
    if bytes.len() > max {
        return Err(fetch_failed(format!("larger than {max} bytes")));
    }
    Ok(bytes)
}

fn is_json_media_type(media: &str) -> bool {
    media == "application/json"
        || media == "text/json"
        || (media.starts_with("application/") && media.ends_with("+json"))
}

fn base64_decode(text: &[u8]) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::alphabet;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    let cfg = GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let alphabet = if text.iter().any(|b| *b == b'-' || *b == b'_') {
        &alphabet::URL_SAFE
    } else {
        &alphabet::STANDARD
    };
    GeneralPurpose::new(alphabet, cfg).decode(text)
}

/// `%XY` → byte; malformed escapes are kept as they are.
fn percent_decode(s: &str) -> Vec<u8> {
    percent_encoding::percent_decode_str(s).collect()
}

/// `ipfs://CID[/path]` (also `ipfs://ipfs/CID/…`) → a URL under the gateway.
fn ipfs_url(uri: &str, gateway: &Url) -> Result<Url, DiscardReason> {
    let rest = &uri["ipfs:".len()..];
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let rest = rest.strip_prefix("ipfs/").unwrap_or(rest);
    let rest = rest.split('#').next().unwrap_or("");
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let mut segments = path.split('/');
    let cid = segments.next().unwrap_or("");
    if cid.is_empty() || !cid.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(fetch_failed(format!("bad IPFS CID in `{}`", shorten(uri))));
    }
    let mut url = gateway.clone();
    {
        let mut p = url
            .path_segments_mut()
            .map_err(|_| fetch_failed("the IPFS gateway URL cannot take a path"))?;
        p.pop_if_empty().push(cid);
        for seg in segments {
            let seg = String::from_utf8_lossy(&percent_decode(seg)).into_owned();
            if seg == "." || seg == ".." || seg.contains(['/', '\\']) {
                return Err(fetch_failed(format!("bad IPFS path in `{}`", shorten(uri))));
            }
            p.push(&seg);
        }
    }
    // the gateway's own query (an access key) is kept; the URI's goes after it
    let merged = match (gateway.query(), query) {
        (Some(g), Some(q)) => Some(format!("{g}&{q}")),
        (Some(g), None) => Some(g.to_string()),
        (None, q) => q.map(str::to_string),
    };
    url.set_query(merged.as_deref());
    Ok(url)
}

/// GET over http(s), bounded; the URL must pass the same host rules as endpoints.
async fn fetch_http(
    url: Url,
    cfg: &DiscoveryConfig,
    http: &reqwest::Client,
) -> Result<Vec<u8>, DiscardReason> {
    match url.scheme() {
        "https" => {}
        "http" if cfg.allow_private_endpoints => {}
        "http" => {
            // (shown without its query: a gateway's access key may be in it)
            let mut shown = url.clone();
            shown.set_query(None);
            return Err(fetch_failed(format!(
                "refusing plain http:// metadata URL {} (https only unless private endpoints are allowed)",
                shorten(shown.as_str())
            )));
        }
        other => return Err(fetch_failed(format!("unsupported scheme `{other}`"))),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(fetch_failed("metadata URL refused: credentials in the URL"));
    }
    check_url(&url, &cfg.net_policy())
        .await
        .map_err(|e| fetch_failed(format!("metadata URL refused: {e}")))?;
    let max = cfg.max_metadata_bytes;
    // (reqwest's errors are told without their URL: the IPFS gateway's URL is the
    // operator's, and may carry its access key; the round's transcript is public)
    let fetch = async {
        let mut resp = http
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| fetch_failed(error_chain(&e.without_url())))?;
        let status = resp.status();
        if status.is_redirection() {
            return Err(fetch_failed(format!(
                "HTTP {status}: redirects are not followed"
            )));
        }
        if resp.url() != &url {
            return Err(fetch_failed(format!(
                "redirected to {}: redirects are not followed",
                shorten(resp.url().as_str())
            )));
        }
        if !status.is_success() {
            return Err(fetch_failed(format!("HTTP {status}")));
        }
        if let Some(len) = resp.content_length()
            && len > max as u64
        {
            return Err(fetch_failed(format!(
                "larger than {max} bytes (content-length {len})"
            )));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| fetch_failed(error_chain(&e.without_url())))?
        {
            if body.len() + chunk.len() > max {
                return Err(fetch_failed(format!("larger than {max} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    tokio::time::timeout(cfg.fetch_timeout, fetch)
        .await
        .map_err(|_| fetch_failed(format!("timed out after {:?}", cfg.fetch_timeout)))?
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s
}

/// At most 120 characters of untrusted text for messages.
fn shorten(s: &str) -> String {
    if s.chars().count() <= 120 {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(117).collect();
        t.push_str("...");
        t
    }
}

// ─── Reading the registration file ───────────────────────────────────────────────

/// Parses a registration file leniently: `services` or the legacy `endpoints` array,
/// `active` defaulting to `true`, unknown fields and malformed service entries ignored.
/// Not JSON, or not a JSON object → [`DiscardReason::InvalidMetadata`].
pub fn parse_registration(bytes: &[u8]) -> Result<Registration, DiscardReason> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("not JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(invalid(format!(
            "expected a JSON object, got {}",
            kind(&value)
        )));
    };
    let text = |key: &str| {
        obj.get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let active = match obj.get("active") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => false,
        Some(other) => {
            return Err(invalid(format!(
                "`active` must be a boolean, got {}",
                kind(other)
            )));
        }
    };
    let list = match (obj.get("services"), obj.get("endpoints")) {
        (Some(Value::Array(a)), _) => a.as_slice(),
        (_, Some(Value::Array(a))) => a.as_slice(),
        _ => &[],
    };
    let services = list
        .iter()
        .filter_map(|entry| {
            let e = entry.as_object()?;
            let field = |k: &str| {
                e.get(k)
                    .and_then(Value::as_str)
                    .map(|s| s.trim().to_string())
            };
            Some(Service {
                name: field("name")?,
                endpoint: field("endpoint"),
                protocol: field("protocol").filter(|p| !p.is_empty()),
                did: field("did").filter(|d| !d.is_empty()),
            })
        })
        .collect();
    Ok(Registration {
        name: text("name"),
        description: text("description"),
        active,
        services,
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The service a worker is called through: among the services with a non-empty
/// endpoint whose `protocol` (or else `name`) names a protocol this node speaks
/// ([`ProtocolKind::of_service`]), the first A2A one, else the first in registration
/// order. Services of other kinds (MCP, ENS, wallets, …) are skipped.
pub fn worker_service(reg: &Registration) -> Option<WorkerService> {
    let all: Vec<WorkerService> = reg
        .services
        .iter()
        .filter_map(|s| {
            let endpoint = s.endpoint.as_deref().filter(|e| !e.is_empty())?;
            let kind = ProtocolKind::of_service(&s.name, s.protocol.as_deref())?;
            Some(WorkerService {
                kind,
                endpoint: endpoint.to_string(),
                did: s.did.clone(),
            })
        })
        .collect();
    let a2a = all.iter().position(|s| s.kind == ProtocolKind::A2a);
    all.into_iter().nth(a2a.unwrap_or(0))
}

// ─── Endpoint validation ──────────────────────────────────────────────────────────

/// Accepts an http(s) URL with a host and no credentials. Unless `allow_private`, the
/// host must not be a local name (`localhost`, cloud metadata names) and every address
/// it resolves to must be public (see [`is_public_ip`]).
pub async fn validate_endpoint(endpoint: &str, allow_private: bool) -> Result<Url, DiscardReason> {
    let policy = if allow_private {
        cresolver_workers::netguard::NetPolicy::allow_private()
    } else {
        cresolver_workers::netguard::NetPolicy::public_only()
    };
    validate_endpoint_with(endpoint, &policy).await
}

/// [`validate_endpoint`] under an address policy (and its resolver).
pub async fn validate_endpoint_with(
    endpoint: &str,
    policy: &cresolver_workers::netguard::NetPolicy,
) -> Result<Url, DiscardReason> {
    let url = Url::parse(endpoint.trim())
        .map_err(|e| refused(format!("`{}` is not a URL: {e}", shorten(endpoint))))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refused(format!(
            "scheme `{}` (only http and https)",
            url.scheme()
        )));
    }
    if url.host().is_none() {
        return Err(refused("no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refused("credentials in the URL"));
    }
    check_url(&url, policy)
        .await
        .map_err(|e| refused(e.to_string()))?;
    Ok(url)
}

#[cfg(test)]
mod tests;
