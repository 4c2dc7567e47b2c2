//! The `[node]` section: where the node keeps its data, which workflows it runs and how
//! many rounds at once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use validator::Validate;

/// The node itself: where it keeps its data, which workflows it runs, how many rounds
/// at once.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// Where the node keeps its SQLite store (and a DON member its `don.sqlite`).
    #[schemars(extend("x-path" = true))]
    pub data_dir: PathBuf,
    /// Workflow files to run (the first one drives rounds of the configured market).
    #[schemars(extend("x-path" = true))]
    #[validate(length(min = 1, message = "must list at least one workflow file"))]
    pub workflows: Vec<PathBuf>,
    /// Rounds running at once, across markets.
    #[validate(range(min = 1, message = "must be at least 1"))]
    pub max_concurrent_rounds: usize,
}

impl Default for NodeSection {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./cresolver-data"),
            workflows: vec![PathBuf::from("workflows/cresolver-resolution.toml")],
            max_concurrent_rounds: 8,
        }
    }
}
