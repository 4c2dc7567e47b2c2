//! The host rule shared by worker endpoints and metadata URLs: unless private endpoints
//! are allowed, a host that is, names or resolves to a non-public address is refused.

use super::shorten;
use cresolver_workers::ipclass::is_public_ip;
use cresolver_workers::netguard::{AddressRefused, NetPolicy};
use std::net::IpAddr;
use url::{Host, Url};

/// Host names refused without resolving them (unless private endpoints are allowed).
const REFUSED_HOSTS: &[&str] = &[
    "localhost",
    "metadata",
    "metadata.google.internal",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Why a URL's host is refused. The `Display` text is the detail a discarded worker's
/// [`super::DiscardReason`] records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRefused {
    /// The URL has no host.
    #[error("no host")]
    NoHost,
    /// The host is an IP address that is not public.
    #[error("non-public address {0}")]
    NonPublicIp(IpAddr),
    /// The host name is a local one (`localhost`, `*.internal`, a metadata service);
    /// holds it (lowercased, shortened).
    #[error("host `{0}` is local")]
    Local(String),
    /// The host name resolves to an address that is not public.
    #[error("`{host}` resolves to non-public address {ip}")]
    ResolvesNonPublic {
        /// The host name (shortened).
        host: String,
        /// The refused address.
        ip: String,
    },
    /// The host name could not be resolved.
    #[error("cannot resolve `{host}`: {detail}")]
    Unresolved {
        /// The host name (shortened).
        host: String,
        /// Why the lookup failed.
        detail: String,
    },
}

/// Checks `url`'s host under `policy` (resolving a host name once).
pub(super) async fn check_url(url: &Url, policy: &NetPolicy) -> Result<(), HostRefused> {
    if policy.allow_private {
        return Ok(());
    }
    match url.host() {
        None => Err(HostRefused::NoHost),
        Some(Host::Ipv4(ip)) => check_ip(IpAddr::V4(ip)),
        Some(Host::Ipv6(ip)) => check_ip(IpAddr::V6(ip)),
        Some(Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if REFUSED_HOSTS.contains(&name.as_str())
                || name.ends_with(".localhost")
                || name.ends_with(".internal")
            {
                return Err(HostRefused::Local(shorten(&name)));
            }
            let port = url.port_or_known_default().unwrap_or(443);
            let host = shorten(&name);
            policy
                .resolve(&name, port)
                .await
                .map(|_| ())
                .map_err(|e| match e {
                    AddressRefused::NonPublic { ip, .. } => {
                        HostRefused::ResolvesNonPublic { host, ip }
                    }
                    AddressRefused::Unresolved { detail, .. } => {
                        HostRefused::Unresolved { host, detail }
                    }
                })
        }
    }
}

fn check_ip(ip: IpAddr) -> Result<(), HostRefused> {
    if is_public_ip(ip) {
        Ok(())
    } else {
        Err(HostRefused::NonPublicIp(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refusals_keep_their_text() {
        let policy = NetPolicy::public_only();
        let check = |u: &str| {
            let url = Url::parse(u).unwrap();
            let policy = policy.clone();
            async move { check_url(&url, &policy).await }
        };
        let err = check("https://127.0.0.1/x").await.unwrap_err();
        assert_eq!(err, HostRefused::NonPublicIp("127.0.0.1".parse().unwrap()));
        assert_eq!(err.to_string(), "non-public address 127.0.0.1");
        assert_eq!(
            check("https://Metadata.Google.Internal./x")
                .await
                .unwrap_err()
                .to_string(),
            "host `metadata.google.internal` is local"
        );
        assert!(check("https://[::1]/").await.is_err());
        assert!(check("https://1.1.1.1/").await.is_ok());
        assert!(
            check_url(
                &Url::parse("https://127.0.0.1/").unwrap(),
                &NetPolicy::allow_private()
            )
            .await
            .is_ok()
        );
    }
}
