//! TLS to PostgreSQL from the URL's `sslmode`: rustls trusting the system's roots and an
//! optional CA file (`verify-full`), or no TLS (`disable`).

/// How the connection is protected, from the URL's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tls {
    /// No `sslmode`, or `disable`: plain TCP.
    Off,
    /// `prefer`: TLS (verified) when the server offers it.
    Prefer,
    /// `require`, `verify-ca`, `verify-full`: TLS, the certificate verified against the
    /// roots and the host name, or no connection.
    Require,
}

/// Splits `sslmode` off a URL (tokio-postgres knows only disable/prefer/require).
pub(super) fn split_sslmode(url: &str) -> Result<(String, Tls), String> {
    let Ok(mut u) = url::Url::parse(url) else {
        return Ok((url.to_string(), Tls::Off));
    };
    let mut mode = Tls::Off;
    let mut kept = Vec::new();
    for (k, v) in u.query_pairs() {
        if k == "sslmode" {
            mode = match v.as_ref() {
                "disable" => Tls::Off,
                "prefer" | "allow" => Tls::Prefer,
                "require" | "verify-ca" | "verify-full" => Tls::Require,
                other => return Err(format!("unknown sslmode {other:?}")),
            };
        } else {
            kept.push((k.into_owned(), v.into_owned()));
        }
    }
    if kept.is_empty() {
        u.set_query(None);
    } else {
        u.query_pairs_mut().clear().extend_pairs(kept);
    }
    Ok((u.to_string(), mode))
}

/// A rustls client trusting the system's roots and `ca_file`.
pub(super) fn tls_connector(
    ca_file: Option<&std::path::Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("store.ca_file {}: {e}", path.display()))?;
        let mut n = 0;
        for cert in certs {
            let cert = cert.map_err(|e| format!("store.ca_file {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("store.ca_file {}: {e}", path.display()))?;
            n += 1;
        }
        if n == 0 {
            return Err(format!(
                "store.ca_file {} holds no PEM certificate",
                path.display()
            ));
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
