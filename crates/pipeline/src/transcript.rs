#![doc = include_str!("../../../docs/transcript.md")]

mod transactions;
pub use transactions::{AttemptState, AttemptView, TransactionRecord};

use crate::workflow::Workflow;
use alloy::primitives::{Address, B256, Bytes};
use cresolver_chain::reader::MarketSnapshot;
use cresolver_core::tally::TallyOutcome;
use cresolver_core::{MarketId, RoundKey};
use cresolver_store::RoundRecord;
use cresolver_submit::SubmitMode;
use cresolver_workers::fanout::ResolveStage;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Version written by this build (see the schema above).
pub const TRANSCRIPT_VERSION: u32 = 2;
/// Oldest version this build reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;

/// A round's transcript (see the module documentation for the schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    /// The schema version ([`OLDEST_READABLE_VERSION`] to [`TRANSCRIPT_VERSION`]).
    pub version: u32,
    /// The chain id of the RPC the round ran against (absent in version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<u64>,
    /// The request that started the round (absent in version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestRecord>,
    /// The workflow in effect, every default filled in.
    pub workflow: Workflow,
    /// The market as read at the request's block.
    pub market: MarketSnapshot,
    /// Discovery of each registered worker, in registration order.
    pub discovery: Vec<DiscoveryRecord>,
    /// The question put to the workers.
    pub question: String,
    /// Unix seconds the round is judged at (the time of the block the market was read at).
    pub reference_time: u64,
    /// The resolve stage, only when quorum was not met (and so no `outcome`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve: Option<ResolveStage>,
    /// The finished round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<OutcomeRecord>,
    /// The prepared submission transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission: Option<SubmissionRecord>,
    /// How the submission ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<ConfirmationRecord>,
    /// Every nonce and attempt of the round's submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions: Option<Vec<TransactionRecord>>,
    /// What the finality watch saw after `confirmed`: final, or reorged away (and
    /// re-sent), with every reorg it met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finality: Option<FinalityRecord>,
    /// The store record, added by `rounds show --json` and `rounds export` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<RoundInfo>,
    /// A DON member's round: its own observation, every member's (or that it was
    /// missing), the set the report was built from, the agreed report, its signers and
    /// the transmitter (see `cresolver_node::don`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub don: Option<DonRecord>,
}

/// A DON member's round, as its transcript records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DonRecord {
    /// The execution id (the forwarder's `workflowExecutionId`).
    pub execution_id: B256,
    /// This member's signer address.
    pub member: Address,
    /// This member's own observation.
    pub own_observation: cresolver_core::don::Observation,
    /// Every member, in configuration order, with its observation if it is in the set.
    pub members: Vec<DonMemberRecord>,
    /// The observers of the decided set.
    pub set: Vec<Address>,
    /// The consensus round that decided the set (`round` below, kept for older readers).
    pub attempt: u32,
    /// The consensus round that decided the set (absent in older transcripts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// The leader of that round.
    pub leader: Address,
    /// The members whose precommits decided the set (its commit certificate).
    #[serde(default)]
    pub precommits: Vec<Address>,
    /// The agreed raw report.
    pub report: Bytes,
    /// The report context the signatures cover.
    pub report_context: Bytes,
    /// The forwarder digest.
    pub digest: B256,
    /// The f+1 signers of the agreed report.
    pub signers: Vec<Address>,
    /// This member rebuilt the report from the set itself.
    pub recomputed: bool,
    /// The member whose transmission delivered (or is delivering) the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transmitter: Option<Address>,
}

/// One member in a [`DonRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DonMemberRecord {
    /// The member's signer address.
    pub member: Address,
    /// Whether its observation is in the decided set.
    pub in_set: bool,
    /// Its observation, when in the set.
    pub observation: Option<cresolver_core::don::Observation>,
}

/// How a round's submission ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConfirmationStatus {
    /// The market was resolved by our transaction (or, in a DON, by the report this
    /// member agreed, delivered by a member).
    Confirmed,
    /// The transaction was mined and did not resolve the market.
    Failed,
    /// The market was resolved by someone else; no transaction of ours to name.
    Skipped,
}

impl ConfirmationStatus {
    /// The status as transcripts write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfirmationStatus::Confirmed => "confirmed",
            ConfirmationStatus::Failed => "failed",
            ConfirmationStatus::Skipped => "skipped",
        }
    }
}

impl std::fmt::Display for ConfirmationStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The request that started the round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The transaction of the `ResolutionRequested` log (`None`: a manual request).
    pub tx: Option<B256>,
    /// The log's block (`None`: a manual request).
    pub block: Option<u64>,
}

/// Discovery of one worker as a transcript records it: the domain type itself.
pub type DiscoveryRecord = cresolver_chain::discovery::DiscoveredWorker;

/// A finished round as a transcript records it: the domain type itself.
pub type OutcomeRecord = crate::round::RoundOutcome;

/// The tally as a transcript records it: the domain type itself.
pub type TallyRecord = TallyOutcome;

/// The prepared submission transaction. A node stores the transcript while the
/// pre-flight runs and fills this in when the round ends, from the reserved nonce's
/// payload (a DON member when it transmits; a node without a key when it fails).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmissionRecord {
    /// The contract called: the market (`direct`) or the forwarder (`report`).
    pub to: Address,
    /// The call's data.
    pub calldata: Bytes,
    /// The gas limit the transaction is signed with.
    pub gas_limit: u64,
    /// The sender: the resolver's key.
    pub from: Address,
    /// `direct` or `report`.
    pub mode: SubmitMode,
}

impl From<&cresolver_submit::Prepared> for SubmissionRecord {
    fn from(p: &cresolver_submit::Prepared) -> Self {
        Self {
            to: p.to,
            calldata: p.calldata.clone(),
            gas_limit: p.gas_limit,
            from: p.from,
            mode: p.mode,
        }
    }
}

/// The receipt outcome of the submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmationRecord {
    /// `confirmed` (the market was resolved by our transaction), `failed`, or `skipped`
    /// (resolved by someone else; no transaction of ours to name).
    pub status: ConfirmationStatus,
    /// Our transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_hash: Option<B256>,
    /// The block it was mined in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_number: Option<u64>,
    /// The resolution on chain, when confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<bool>,
    /// The resolver the market recorded, when confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolver: Option<Address>,
    /// Gas the transaction used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gas_used: Option<u64>,
    /// Why the submission failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The finality watch's record of a confirmed round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalityRecord {
    /// `final` (the block holding our transaction is final), or `reorged` (it left the
    /// canonical chain; the round went back to `submitted` and re-sent it).
    pub status: String,
    /// Our transaction, when final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_hash: Option<B256>,
    /// The block holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_number: Option<u64>,
    /// That block's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_hash: Option<B256>,
    /// The newest final block when the round was found final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalized_block: Option<u64>,
    /// `tag` (the endpoint's `finalized` block) or `depth` (`chain.finality_depth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Every time our resolution was seen reorged away, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reorgs: Vec<ReorgRecord>,
}

/// One resolution of ours that left the canonical chain before it was final.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReorgRecord {
    /// The transaction that left the canonical chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_hash: Option<B256>,
    /// The block it had been mined in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_number: Option<u64>,
    /// That block's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_hash: Option<B256>,
    /// The head when the reorg was seen.
    pub seen_at_head: u64,
    /// What was seen.
    pub detail: String,
}

/// The store record of the round, added to exported transcripts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundInfo {
    /// The market contract.
    pub market: Address,
    /// The market's id.
    pub market_id: MarketId,
    /// A [`cresolver_store::Stage`] name (`confirmed`, `failed`, …).
    pub state: String,
    /// Why the round is in that state (a failure, a skip).
    pub reason: Option<String>,
    /// 1 for the first round of a market; a new request after a failure adds one.
    pub attempt: u32,
    /// The workflow that ran it.
    pub workflow: String,
    /// The transaction of the request.
    pub request_tx: Option<B256>,
    /// The block of the request.
    pub request_block: Option<u64>,
    /// The round's submitted transaction.
    pub submit_tx: Option<B256>,
    /// Unix seconds the round was created.
    pub created_at: u64,
    /// Unix seconds the round last changed.
    pub updated_at: u64,
}

impl From<&RoundRecord> for RoundInfo {
    fn from(r: &RoundRecord) -> Self {
        Self {
            market: r.market,
            market_id: r.market_id,
            state: r.state.as_str().to_string(),
            reason: r.reason.clone(),
            attempt: r.attempt,
            workflow: r.workflow.clone(),
            request_tx: r.request_tx,
            request_block: r.request_block,
            submit_tx: r.submit_tx,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A transcript that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// The file could not be read.
    #[error("cannot read transcript {}: {error}", path.display())]
    Read {
        /// The transcript's source.
        path: PathBuf,
        /// The I/O error (shown in the message, so not a `source`: printed once).
        error: std::io::Error,
    },
    /// The text is not JSON.
    #[error("transcript {}: not valid JSON: {message}", path.display())]
    Json {
        /// The transcript's source.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A field is missing, of the wrong type, or inconsistent with the others.
    #[error("transcript {}: field `{field}`: {message}", path.display())]
    Field {
        /// The transcript's source.
        path: PathBuf,
        /// The field's path (`resolve.results[0].elapsed_ms`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The schema version is one this build does not read.
    #[error(
        "transcript {}: field `version`: {found} is not supported (this build reads versions {OLDEST_READABLE_VERSION} to {TRANSCRIPT_VERSION})",
        path.display()
    )]
    Version {
        /// The transcript's source.
        path: PathBuf,
        /// The version it declares.
        found: u64,
    },
    /// A stored round has no transcript yet.
    #[error(
        "round {market_id} of market {market} has no transcript (state {state}: the round did not reach discovery)"
    )]
    NoTranscript {
        /// The market contract.
        market: Address,
        /// The market's id.
        market_id: MarketId,
        /// The round's state.
        state: String,
    },
}

impl Transcript {
    /// Reads and checks a transcript file.
    pub fn load(path: &Path) -> Result<Self, TranscriptError> {
        let text = std::fs::read_to_string(path).map_err(|error| TranscriptError::Read {
            path: path.into(),
            error,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks transcript text; `path` names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, TranscriptError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| TranscriptError::Json {
                path: path.into(),
                message: e.to_string(),
            })?;
        Self::from_value(value, path)
    }

    /// Reads a transcript from JSON already parsed (e.g. the store's column).
    pub fn from_value(value: serde_json::Value, path: &Path) -> Result<Self, TranscriptError> {
        // The version first: a newer schema gets a version error, not a confusing field one.
        match value.get("version") {
            Some(v) => match v.as_u64() {
                Some(n)
                    if (OLDEST_READABLE_VERSION as u64..=TRANSCRIPT_VERSION as u64)
                        .contains(&n) => {}
                Some(n) => {
                    return Err(TranscriptError::Version {
                        path: path.into(),
                        found: n,
                    });
                }
                None => {
                    return Err(TranscriptError::Field {
                        path: path.into(),
                        field: "version".into(),
                        message: format!("must be a whole number, got {v}"),
                    });
                }
            },
            None => {
                return Err(TranscriptError::Field {
                    path: path.into(),
                    field: "version".into(),
                    message: "is missing (is this a cresolver transcript?)".into(),
                });
            }
        }
        let t: Transcript = serde_path_to_error::deserialize(value).map_err(|e| {
            let field = e.path().to_string();
            TranscriptError::Field {
                path: path.into(),
                field: if field == "." {
                    "(top level)".into()
                } else {
                    field
                },
                message: e.into_inner().to_string(),
            }
        })?;
        t.check()
            .map_err(|(field, message)| TranscriptError::Field {
                path: path.into(),
                field,
                message,
            })?;
        Ok(t)
    }

    /// Consistency checks serde cannot express: per-worker lists align with the market's
    /// registered workers.
    fn check(&self) -> Result<(), (String, String)> {
        let n = self.market.workers.len();
        let addresses: Vec<Address> = self.market.workers.iter().map(|w| w.address).collect();
        let aligned = |field: &str, got: Vec<Address>| -> Result<(), (String, String)> {
            if got.len() != n {
                return Err((
                    field.to_string(),
                    format!("has {} entries but `market.workers` has {n}", got.len()),
                ));
            }
            if let Some(i) = (0..n).find(|&i| got[i] != addresses[i]) {
                return Err((
                    format!("{field}[{i}].address"),
                    format!(
                        "is {} but `market.workers[{i}].address` is {}",
                        got[i], addresses[i]
                    ),
                ));
            }
            Ok(())
        };
        aligned(
            "discovery",
            self.discovery.iter().map(|d| d.address).collect(),
        )?;
        if let Some(r) = &self.resolve {
            aligned(
                "resolve.results",
                r.results.iter().map(|r| r.address).collect(),
            )?;
        }
        if let Some(o) = &self.outcome {
            aligned(
                "outcome.resolve.results",
                o.resolve.results.iter().map(|r| r.address).collect(),
            )?;
            aligned(
                "outcome.tally.workers",
                o.tally.workers.iter().map(|w| w.address).collect(),
            )?;
            for (field, len) in [
                ("outcome.challenges", o.challenges.len()),
                ("outcome.scores", o.scores.len()),
            ] {
                if len != n {
                    return Err((
                        field.into(),
                        format!("has {len} entries but `market.workers` has {n}"),
                    ));
                }
            }
            if o.tally.market_id != self.market.market_id {
                return Err((
                    "outcome.tally.marketId".into(),
                    format!(
                        "is {} but `market.market_id` is {}",
                        o.tally.market_id, self.market.market_id
                    ),
                ));
            }
        }
        if self.outcome.is_none() && self.resolve.is_none() {
            return Err((
                "outcome".into(),
                "is missing (and so is `resolve`): the transcript records no resolve stage".into(),
            ));
        }
        Ok(())
    }

    /// The resolve stage, from the outcome or (quorum not met) the top level.
    pub fn resolve_stage(&self) -> Option<&ResolveStage> {
        self.outcome
            .as_ref()
            .map(|o| &o.resolve)
            .or(self.resolve.as_ref())
    }

    /// The request's block, when the round came from a log.
    pub fn request_block(&self) -> Option<u64> {
        self.request
            .as_ref()
            .and_then(|r| r.block)
            .or(self.round.as_ref().and_then(|r| r.request_block))
    }
}

/// The export document of a stored round: its transcript JSON with `round` (the store
/// record) added. Unknown fields of the stored JSON are kept as they are.
pub fn export_document(rec: &RoundRecord) -> Result<serde_json::Value, TranscriptError> {
    let Some(mut doc) = rec.outcome.clone().filter(|v| v.is_object()) else {
        return Err(TranscriptError::NoTranscript {
            market: rec.market,
            market_id: rec.market_id,
            state: rec.state.as_str().into(),
        });
    };
    doc["round"] = serde_json::to_value(RoundInfo::from(rec)).unwrap_or_default();
    Ok(doc)
}

/// The file name `rounds export` gives a round: `<market>-<id>.json`.
pub fn export_file_name(round: RoundKey) -> String {
    format!("{:#x}-{}.json", round.market, round.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> serde_json::Value {
        let wf = Workflow::default_named("t");
        serde_json::json!({
            "version": 2,
            "chain_id": 31337,
            "request": {"tx": B256::repeat_byte(1), "block": 7},
            "workflow": wf,
            "market": {
                "market": Address::repeat_byte(9), "market_id": "0x1", "question": "q?",
                "reward_pool": "0x10", "deadline": "0x20", "creator": Address::ZERO,
                "resolved": false, "resolution": false, "identity_registry": Address::ZERO,
                "workers": [{"address": Address::repeat_byte(1), "agent_id": "0x1", "stake": "0x1",
                    "reputation": {"resQuality": 0.0, "srcQuality": 0.0, "analysisDepth": 0.0, "count": 0},
                    "market_is_operator": false}],
                "block": 7
            },
            "discovery": [{"address": Address::repeat_byte(1), "agent_id": "0x1", "name": "w",
                "endpoint": {"Ok": "http://127.0.0.1:1/"}, "protocol": "a2a"}],
            "question": "q?",
            "reference_time": 1_700_000_000u64,
            "resolve": {"results": [{"address": Address::repeat_byte(1),
                "outcome": {"Err": {"kind": "timeout", "after_ms": 5}}, "elapsed_ms": 5}],
                "registered": 1, "required": 1, "valid": 0, "quorum_met": false}
        })
    }

    #[test]
    fn reads_a_quorum_failure_transcript() {
        let t = Transcript::from_value(sample(), Path::new("t.json")).unwrap();
        assert_eq!(t.request_block(), Some(7));
        assert!(t.resolve_stage().is_some());
        // and writes it back unchanged
        let again = serde_json::to_value(&t).unwrap();
        assert_eq!(
            Transcript::from_value(again, Path::new("t.json")).unwrap(),
            t
        );
    }

    #[test]
    fn reads_version_1() {
        let mut v = sample();
        v["version"] = serde_json::json!(1);
        let o = v.as_object_mut().unwrap();
        o.remove("chain_id");
        o.remove("request");
        let t = Transcript::from_value(v, Path::new("v1.json")).unwrap();
        assert_eq!((t.version, t.request_block()), (1, None));
    }

    #[test]
    fn errors_name_file_and_field() {
        let mut v = sample();
        v["resolve"]["results"][0]["elapsed_ms"] = serde_json::json!("soon");
        let e = Transcript::from_value(v, Path::new("x/t.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x/t.json") && e.contains("resolve.results[0].elapsed_ms"),
            "{e}"
        );

        let mut v = sample();
        v.as_object_mut().unwrap().remove("question");
        let e = Transcript::from_value(v, Path::new("t.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("question"), "{e}");

        let mut v = sample();
        v["version"] = serde_json::json!(99);
        let e = Transcript::from_value(v, Path::new("t.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("version") && e.contains("99"), "{e}");

        let mut v = sample();
        v["discovery"] = serde_json::json!([]);
        let e = Transcript::from_value(v, Path::new("t.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`discovery`"), "{e}");

        let e = Transcript::parse("{\"version\": 2,", Path::new("cut.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cut.json") && e.contains("not valid JSON"),
            "{e}"
        );
    }
}
