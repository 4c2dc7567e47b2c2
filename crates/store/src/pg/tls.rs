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

/// Why TLS to the server cannot be set up (the URL's `sslmode`, `store.ca_file`).
#[derive(Debug, thiserror::Error)]
pub(super) enum TlsSetupError {
    /// The URL's `sslmode` is none PostgreSQL knows; holds it.
    #[error("unknown sslmode {0:?}")]
    SslMode(String),
    /// `store.ca_file` cannot be read, or holds a PEM section that does not parse.
    #[error("store.ca_file {}: {source}", .path.display())]
    CaFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A certificate of `store.ca_file` is refused as a root.
    #[error("store.ca_file {}: {source}", .path.display())]
    CaCertificate {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: rustls::Error,
    },
    /// `store.ca_file` holds no PEM certificate.
    #[error("store.ca_file {} holds no PEM certificate", .0.display())]
    NoCertificate(std::path::PathBuf),
    /// The TLS provider supports none of the safe default protocol versions.
    #[error("{0}")]
    Provider(#[source] rustls::Error),
}

/// Splits `sslmode` off a URL (tokio-postgres knows only disable/prefer/require).
pub(super) fn split_sslmode(url: &str) -> Result<(String, Tls), TlsSetupError> {
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
                other => return Err(TlsSetupError::SslMode(other.to_string())),
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
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, TlsSetupError> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let pem = |source| TlsSetupError::CaFile {
            path: path.to_path_buf(),
            source,
        };
        let certs = CertificateDer::pem_file_iter(path).map_err(pem)?;
        let mut n = 0;
        for cert in certs {
            roots
                .add(cert.map_err(pem)?)
                .map_err(|source| TlsSetupError::CaCertificate {
                    path: path.to_path_buf(),
                    source,
                })?;
            n += 1;
        }
        if n == 0 {
            return Err(TlsSetupError::NoCertificate(path.to_path_buf()));
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsSetupError::Provider)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
