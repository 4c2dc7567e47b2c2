//! Which protocol a worker speaks, and the node's adapters for each. A registration's
//! service says it (`services[].protocol`, else the service's `name`); A2A is the default
//! for a service whose labels name no known protocol.

use super::{A2aProtocol, WorkerProtocol};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// The agent protocols a worker can speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolKind {
    /// `cre-agent-protocol.md`: `POST /a2a/resolve`, `POST /a2a/challenge`.
    A2a,
    /// Factagora BYOA: a prediction webhook answered with a ReAct cycle.
    Factagora,
    /// Round-table external agents: `/analyze`, `/challenge`, `/vote`.
    Roundtable,
    /// Chorus: `POST {endpoint}/jobs` with a skill name.
    Chorus,
    /// Agora: signed envelopes through a relay, negotiated REQUEST → OFFER → ACCEPT → RESULT.
    Agora,
}

/// Reads a recorded protocol leniently: the protocol's name, or (in version 1 and early
/// version 2 transcripts) the service's raw `protocol` label, read as [`ProtocolKind::from_label`]
/// does and as A2A when it names none.
pub fn lenient_protocol<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ProtocolKind>, D::Error> {
    let label: Option<String> = serde::Deserialize::deserialize(d)?;
    Ok(label.map(|l| ProtocolKind::from_label(&l).unwrap_or(ProtocolKind::A2a)))
}

impl ProtocolKind {
    /// Every protocol a worker can speak.
    pub const ALL: [ProtocolKind; 5] = [
        ProtocolKind::A2a,
        ProtocolKind::Factagora,
        ProtocolKind::Roundtable,
        ProtocolKind::Chorus,
        ProtocolKind::Agora,
    ];

    /// The stable name used in transcripts, metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            ProtocolKind::A2a => "a2a",
            ProtocolKind::Factagora => "factagora",
            ProtocolKind::Roundtable => "roundtable",
            ProtocolKind::Chorus => "chorus",
            ProtocolKind::Agora => "agora",
        }
    }

    /// Recognises a protocol from a service's `protocol` or `name` label:
    /// case-insensitive, ignoring `-`, `_`, spaces and a trailing version
    /// (`Factagora-BYOA`, `round_table`, `agora/1.0`, `A2A`).
    pub fn from_label(label: &str) -> Option<Self> {
        let norm: String = label
            .split(['/', '@'])
            .next()
            .unwrap_or("")
            .chars()
            .filter(|c| !matches!(c, '-' | '_' | ' ' | '.'))
            .flat_map(char::to_lowercase)
            .collect();
        let norm = norm.trim_end_matches(|c: char| c.is_ascii_digit() || c == 'v');
        match norm {
            "a2a" | "cre" | "creagent" | "cresolver" => Some(ProtocolKind::A2a),
            "factagora" | "factagorabyoa" | "byoa" => Some(ProtocolKind::Factagora),
            "roundtable" | "roundtableexternalagent" | "roundtableagent" => {
                Some(ProtocolKind::Roundtable)
            }
            "chorus" => Some(ProtocolKind::Chorus),
            "agora" => Some(ProtocolKind::Agora),
            _ => None,
        }
    }

    /// The protocol of a registration service: its `protocol` label when that names a
    /// known protocol, else its `name`. `None` when neither does (the service is not a
    /// worker endpoint, e.g. `MCP`, `ENS`, `web`).
    pub fn of_service(name: &str, protocol: Option<&str>) -> Option<Self> {
        protocol
            .and_then(Self::from_label)
            .or_else(|| Self::from_label(name))
    }
}

impl std::fmt::Display for ProtocolKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Builds the per-worker adapter of a protocol whose adapter depends on the worker
/// (Agora: the agent's did). Gets the service's `did`.
pub type AdapterFactory =
    Arc<dyn Fn(Option<&str>) -> Result<Arc<dyn WorkerProtocol>, String> + Send + Sync>;

/// The node's adapters, one per protocol it speaks.
#[derive(Clone)]
pub struct ProtocolSet {
    shared: HashMap<ProtocolKind, Arc<dyn WorkerProtocol>>,
    per_worker: HashMap<ProtocolKind, AdapterFactory>,
}

impl std::fmt::Debug for ProtocolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kinds: Vec<&str> = self
            .shared
            .keys()
            .chain(self.per_worker.keys())
            .map(|k| k.name())
            .collect();
        kinds.sort_unstable();
        f.debug_struct("ProtocolSet")
            .field("kinds", &kinds)
            .finish()
    }
}

impl ProtocolSet {
    /// Only A2A.
    pub fn a2a_only() -> Self {
        let mut shared: HashMap<ProtocolKind, Arc<dyn WorkerProtocol>> = HashMap::new();
        shared.insert(ProtocolKind::A2a, Arc::new(A2aProtocol));
        Self {
            shared,
            per_worker: HashMap::new(),
        }
    }

    /// Adds (or replaces) the adapter shared by every worker of `kind`.
    pub fn with(mut self, kind: ProtocolKind, adapter: Arc<dyn WorkerProtocol>) -> Self {
        self.per_worker.remove(&kind);
        self.shared.insert(kind, adapter);
        self
    }

    /// Adds (or replaces) a per-worker adapter factory for `kind`.
    pub fn with_factory(mut self, kind: ProtocolKind, factory: AdapterFactory) -> Self {
        self.shared.remove(&kind);
        self.per_worker.insert(kind, factory);
        self
    }

    /// Whether the node speaks `kind`.
    pub fn speaks(&self, kind: ProtocolKind) -> bool {
        self.shared.contains_key(&kind) || self.per_worker.contains_key(&kind)
    }

    /// The adapter for a worker of `kind` (with the service's `did`), or why there is none.
    pub fn for_worker(
        &self,
        kind: ProtocolKind,
        did: Option<&str>,
    ) -> Result<Arc<dyn WorkerProtocol>, String> {
        if let Some(a) = self.shared.get(&kind) {
            return Ok(a.clone());
        }
        match self.per_worker.get(&kind) {
            Some(factory) => factory(did).map_err(|e| format!("{kind} worker: {e}")),
            None => Err(format!(
                "the worker speaks {kind}, which this node has not enabled (see [protocols] in the node config)"
            )),
        }
    }
}

impl Default for ProtocolSet {
    fn default() -> Self {
        Self::a2a_only()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn recorded_protocols_read_leniently() {
        #[derive(serde::Deserialize)]
        struct R {
            #[serde(default, deserialize_with = "super::lenient_protocol")]
            protocol: Option<super::ProtocolKind>,
        }
        let read = |j: &str| serde_json::from_str::<R>(j).unwrap().protocol;
        assert_eq!(
            read(r#"{"protocol":"factagora"}"#),
            Some(super::ProtocolKind::Factagora)
        );
        // a raw service label of a version-1 transcript
        assert_eq!(
            read(r#"{"protocol":"cresolver"}"#),
            Some(super::ProtocolKind::A2a)
        );
        assert_eq!(
            read(r#"{"protocol":"something-else"}"#),
            Some(super::ProtocolKind::A2a)
        );
        assert_eq!(read(r#"{"protocol":null}"#), None);
        assert_eq!(read("{}"), None);
    }

    use super::*;

    #[test]
    fn labels() {
        for (label, kind) in [
            ("A2A", Some(ProtocolKind::A2a)),
            ("a2a", Some(ProtocolKind::A2a)),
            ("Factagora-BYOA", Some(ProtocolKind::Factagora)),
            ("factagora", Some(ProtocolKind::Factagora)),
            ("round_table", Some(ProtocolKind::Roundtable)),
            ("Round-Table", Some(ProtocolKind::Roundtable)),
            ("chorus/0.1", Some(ProtocolKind::Chorus)),
            ("Chorus v0.1", Some(ProtocolKind::Chorus)),
            ("agora@1.0", Some(ProtocolKind::Agora)),
            ("MCP", None),
            ("web", None),
            ("", None),
        ] {
            assert_eq!(ProtocolKind::from_label(label), kind, "{label}");
        }
    }

    #[test]
    fn protocol_label_wins_over_name_when_known() {
        assert_eq!(
            ProtocolKind::of_service("A2A", Some("factagora")),
            Some(ProtocolKind::Factagora)
        );
        // an unknown protocol label (the reference's "cresolver" is A2A; "x" is not) falls
        // back to the name
        assert_eq!(
            ProtocolKind::of_service("A2A", Some("x")),
            Some(ProtocolKind::A2a)
        );
        assert_eq!(ProtocolKind::of_service("MCP", None), None);
        let set = ProtocolSet::a2a_only();
        assert_eq!(
            set.for_worker(ProtocolKind::A2a, None).unwrap().name(),
            "a2a"
        );
        assert!(
            set.for_worker(ProtocolKind::Chorus, None)
                .unwrap_err()
                .contains("not enabled")
        );
        assert_eq!(
            ProtocolKind::of_service("agent", Some("agora")),
            Some(ProtocolKind::Agora)
        );
    }
}
