//! The address policy at connect time: every outbound call to a host that a stranger
//! chose (a worker's endpoint, a token URI) resolves its name through [`GuardedResolver`],
//! which refuses loopback, private, link-local, metadata, unspecified, multicast and
//! reserved addresses (and their IPv4-mapped, 6to4, NAT64 forms: [`is_public_ip`]) unless
//! `allow_private_endpoints`. Discovery checks a name once; the HTTP client resolves it
//! again for every connection, so a name whose DNS answer changes in between (DNS
//! rebinding) is caught here, where the connection is made. Literal IP hosts cannot change
//! and are checked at discovery. The lookup itself is a [`Lookup`] (the system's by
//! default), so tests can play a resolver whose answer flips.

use crate::ipclass::is_public_ip;
use futures::future::BoxFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long one name resolution may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves a host name to addresses.
pub trait Lookup: Send + Sync + 'static {
    /// The addresses of `host`, each with `port`.
    fn lookup(
        &self,
        host: String,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>>;
}

impl std::fmt::Debug for dyn Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lookup")
    }
}

/// The system's resolver (`getaddrinfo` through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(
        &self,
        host: String,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    }
}

/// The address policy of the calls a stranger chose.
#[derive(Clone)]
pub struct NetPolicy {
    /// Let calls reach non-public addresses (local tests and demos only).
    pub allow_private: bool,
    /// The resolver whose answers are checked.
    pub lookup: Arc<dyn Lookup>,
}

impl std::fmt::Debug for NetPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetPolicy")
            .field("allow_private", &self.allow_private)
            .finish()
    }
}

impl NetPolicy {
    /// Public addresses only, resolved by the system.
    pub fn public_only() -> Self {
        Self {
            allow_private: false,
            lookup: Arc::new(SystemLookup),
        }
    }

    /// Any address (local tests and demos), resolved by the system.
    pub fn allow_private() -> Self {
        Self {
            allow_private: true,
            lookup: Arc::new(SystemLookup),
        }
    }

    /// Resolves `host` and applies the policy to every address.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, AddressRefused> {
        let addrs =
            tokio::time::timeout(RESOLVE_TIMEOUT, self.lookup.lookup(host.to_string(), port))
                .await
                .map_err(|_| AddressRefused::Unresolved {
                    host: host.to_string(),
                    detail: "timed out".into(),
                })?
                .map_err(|e| AddressRefused::Unresolved {
                    host: host.to_string(),
                    detail: e.to_string(),
                })?;
        if addrs.is_empty() {
            return Err(AddressRefused::Unresolved {
                host: host.to_string(),
                detail: "no address".into(),
            });
        }
        if !self.allow_private
            && let Some(bad) = addrs.iter().find(|a| !is_public_ip(a.ip()))
        {
            return Err(AddressRefused::NonPublic {
                host: host.to_string(),
                ip: bad.ip().to_string(),
            });
        }
        Ok(addrs)
    }

    /// A reqwest client for such calls: the policy applied at every connection, no
    /// redirects followed, a connect timeout, and no proxy from the environment
    /// (`HTTP(S)_PROXY`, `ALL_PROXY`): a proxy would resolve the worker's host itself,
    /// past this check.
    pub fn http_client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("cresolver/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(GuardedResolver(self.clone()))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    }
}

/// Why a host's addresses were refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AddressRefused {
    /// The host resolves to an address that is not public.
    #[error("`{host}` resolves to non-public address {ip} (refused at connect time)")]
    NonPublic {
        /// The host name looked up.
        host: String,
        /// The refused address.
        ip: String,
    },
    /// The host name could not be resolved.
    #[error("cannot resolve `{host}`: {detail}")]
    Unresolved {
        /// The host name looked up.
        host: String,
        /// Why the lookup failed.
        detail: String,
    },
}

/// The resolver hook of the HTTP client (see the module doc).
pub struct GuardedResolver(pub NetPolicy);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = policy.resolve(&host, 0).await?;
            let it: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

/// The refusal inside an HTTP client error, if the address policy caused it.
pub fn refusal_in(e: &(dyn std::error::Error + 'static)) -> Option<AddressRefused> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<AddressRefused>() {
            return Some(r.clone());
        }
        cur = err.source();
    }
    None
}
