//! The `[store]` section: where the node keeps its rounds (the embedded SQLite file, or a
//! PostgreSQL database a cluster shares) and the cluster's leases. The URL's password is
//! never shown.

use super::duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use validator::{Validate, ValidationError};

/// Where the node keeps its rounds. Empty `url`: the embedded SQLite file in
/// `node.data_dir` (one node). A `postgres://` URL: a database that any number of nodes
/// share; they split the rounds between them with leases (see `store::pg`). The URL's
/// password is never shown; it can also come from `CRESOLVER__STORE__URL`.
#[derive(Clone, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields, default)]
#[schemars(transform = duration::legacy_keys)]
pub struct StoreSection {
    /// Empty: the embedded SQLite file in `node.data_dir`; `postgres://user:password@host/db`
    /// (with `?sslmode=verify-full` for TLS): a database shared by a cluster.
    #[validate(custom(function = "store_url"))]
    pub url: String,
    /// This node's name in the cluster (lease holder). Empty: the host name and a random
    /// suffix, new at every start. A fixed name lets a restarted node take back its own
    /// rounds at once instead of after their leases expire; two running nodes must never
    /// share one.
    pub node_id: String,
    /// How long a node's claim on a round lasts without a renewal (`"15s"`; renewed
    /// every third).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "secs"))]
    #[validate(custom(function = "at_least_2s"))]
    pub lease: Duration,
    /// Connections to PostgreSQL per node.
    pub max_connections: usize,
    /// With `?sslmode=require` (or `verify-full`) in the URL, a PEM file of the CA that
    /// signed the server's certificate, trusted besides the system's roots. The
    /// certificate and the host name are always verified when TLS is used.
    #[schemars(extend("x-path" = true))]
    pub ca_file: Option<PathBuf>,
}

impl Default for StoreSection {
    fn default() -> Self {
        Self {
            url: String::new(),
            node_id: String::new(),
            lease: Duration::from_secs(15),
            max_connections: 16,
            ca_file: None,
        }
    }
}

impl std::fmt::Debug for StoreSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSection")
            .field("url", &cresolver_store::pg::redact_url(&self.url))
            .field("node_id", &self.node_id)
            .field("lease", &self.lease)
            .field("max_connections", &self.max_connections)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl StoreSection {
    /// Whether the store is a shared PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        is_postgres(&self.url)
    }
}

fn is_postgres(url: &str) -> bool {
    let u = url.trim();
    u.starts_with("postgres://") || u.starts_with("postgresql://")
}

/// Empty (SQLite) or a PostgreSQL URL.
fn store_url(url: &str) -> Result<(), ValidationError> {
    if url.trim().is_empty() || is_postgres(url) {
        Ok(())
    } else {
        Err(ValidationError::new("scheme").with_message(
            "must be a postgres:// URL, or empty for the embedded SQLite store".into(),
        ))
    }
}

/// A lease renewed every third of it: at least two seconds.
fn at_least_2s(d: &Duration) -> Result<(), ValidationError> {
    if *d >= Duration::from_secs(2) {
        Ok(())
    } else {
        Err(ValidationError::new("range").with_message("must be at least 2s".into()))
    }
}
