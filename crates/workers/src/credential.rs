//! A protocol's secret (a bearer token, an API key) bound to the hosts the operator
//! listed for it: it is sent only to those, never to whatever endpoint a worker
//! registered on chain. A call to another host goes without it, and the worker's answer
//! carries a note saying so (it lands in the transcript).

use secrecy::{ExposeSecret, SecretString};
use url::Url;

/// A secret and the hosts it may be sent to.
#[derive(Clone, Default)]
pub struct Credential {
    secret: Option<SecretString>,
    /// Lower-case `host` or `host:port` entries.
    hosts: Vec<String>,
    /// The config key that lists the hosts (for the notes).
    key: &'static str,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("secret", &self.secret.as_ref().map(|_| "[REDACTED]"))
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// What a call to one URL gets.
#[derive(Debug, PartialEq, Eq)]
pub enum Grant<'a> {
    /// No secret is configured.
    None,
    /// The host is listed: send the secret.
    Send(&'a str),
    /// A secret is configured but the host is not listed: the call goes without it;
    /// the note says why.
    Withheld(String),
}

impl Credential {
    /// `secret` (blank counts as none) for `hosts`, which `key` names in the config.
    pub fn new(secret: Option<SecretString>, hosts: &[String], key: &'static str) -> Self {
        Self {
            secret: secret.filter(|s| !s.expose_secret().trim().is_empty()),
            hosts: hosts
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            key,
        }
    }

    /// Whether a (non-blank) secret is configured.
    pub fn is_set(&self) -> bool {
        self.secret.is_some()
    }

    /// Whether a secret is configured but no host may receive it.
    pub fn sent_nowhere(&self) -> bool {
        self.secret.is_some() && self.hosts.is_empty()
    }

    /// What a call to `url` gets.
    pub fn for_url(&self, url: &Url) -> Grant<'_> {
        let Some(secret) = &self.secret else {
            return Grant::None;
        };
        let host = url
            .host_str()
            .unwrap_or("")
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let with_port = url
            .port_or_known_default()
            .map(|p| format!("{host}:{p}"))
            .unwrap_or_else(|| host.clone());
        // A bare `host` entry takes `https` only (a worker that registered `http://` on
        // a listed host would have the secret cross the network in clear), but on
        // loopback; a `host:port` entry is the operator's own choice of that port.
        let tls = url.scheme() == "https" || is_loopback(&host);
        if self
            .hosts
            .iter()
            .any(|h| *h == with_port || (*h == host && tls))
        {
            Grant::Send(secret.expose_secret())
        } else {
            Grant::Withheld(format!(
                "no credential sent: host `{host}` is not listed in {}",
                self.key
            ))
        }
    }
}

/// Whether a URL host names this machine's loopback (traffic that never leaves it).
fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_goes_only_to_listed_hosts() {
        let c = Credential::new(
            Some("s3cret".into()),
            &["API.Factagora.example".into(), "127.0.0.1:8080".into()],
            "protocols.factagora.token_hosts",
        );
        let url = |u: &str| Url::parse(u).unwrap();
        assert_eq!(
            c.for_url(&url("https://api.factagora.example/hook")),
            Grant::Send("s3cret")
        );
        assert_eq!(
            c.for_url(&url("http://127.0.0.1:8080/")),
            Grant::Send("s3cret")
        );
        assert!(matches!(
            c.for_url(&url("http://127.0.0.1:9090/")),
            Grant::Withheld(_)
        ));
        assert!(
            matches!(c.for_url(&url("https://evil.example/")), Grant::Withheld(n) if n.contains("evil.example"))
        );
        assert!(matches!(
            c.for_url(&url("https://api.factagora.example.evil.example/")),
            Grant::Withheld(_)
        ));
        // a listed host over plain http, on a port the worker chose: not in clear
        assert!(matches!(
            c.for_url(&url("http://api.factagora.example:8080/hook")),
            Grant::Withheld(_)
        ));
        assert!(matches!(
            c.for_url(&url("http://api.factagora.example/hook")),
            Grant::Withheld(_)
        ));
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(
            Credential::new(Some("  ".into()), &[], "k").for_url(&url("https://x/")),
            Grant::None
        );
        assert!(Credential::new(Some("s".into()), &[], "k").sent_nowhere());
    }
}
