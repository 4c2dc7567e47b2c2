//! Workflow definitions: the declarative TOML files under `workflows/` that say how a
//! round runs (trigger, stage limits, quorum, challenge texts, evaluator, tie rule,
//! submission mode). Unknown keys and bad values are errors naming the key.

use alloy::primitives::{Address, B256};
use cresolver_core::{QuorumRule, TieRule};
use cresolver_evaluate::Fallback;
use cresolver_submit::SubmitMode;
use cresolver_workers::challenge::{self, ChallengeTemplates};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A loaded, validated workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workflow {
    /// Shown in logs; also the CRE workflow name of report metadata unless overridden.
    pub name: String,
    /// `[trigger]`: the event that starts a round.
    #[serde(default)]
    pub trigger: Trigger,
    /// `[resolve]`: the limits of the resolve stage.
    #[serde(default)]
    pub resolve: ResolveStageSection,
    /// `[quorum]`: how many answers a round needs.
    #[serde(default)]
    pub quorum: QuorumSection,
    /// `[challenge]`: the challenge stage and the ratifying vote.
    #[serde(default)]
    pub challenge: ChallengeSection,
    /// `[evaluator]`: how the answers are scored.
    #[serde(default)]
    pub evaluator: EvaluatorSection,
    /// `[tally]`: how a tie is resolved.
    #[serde(default)]
    pub tally: TallySection,
    /// `[submit]`: how the resolution goes on chain.
    #[serde(default)]
    pub submit: SubmitSection,
}

/// The event that starts a round: the market's `ResolutionRequested`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Trigger {
    /// Which configured contract emits the trigger; only `market` exists today.
    pub contract: String,
    /// The trigger event's signature.
    pub event: String,
    /// The market contract this workflow watches; defaults to the node's
    /// `chain.market_address`. Two workflows of one node must not watch the same market.
    #[schemars(with = "Option<cresolver_core::schema::HexAddress>")]
    pub address: Option<Address>,
}

impl Default for Trigger {
    fn default() -> Self {
        Self {
            contract: "market".into(),
            event: "ResolutionRequested(uint256,string)".into(),
            address: None,
        }
    }
}

/// The resolve stage's limits: its timeout, body size, retries and concurrency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ResolveStageSection {
    /// How long a worker has to answer the resolve call, in ms.
    pub timeout_ms: u64,
    /// The largest answer body read from a worker; a larger one is the typed failure `too_large`.
    pub max_body_bytes: usize,
    /// Retries of a worker call whose connection failed (not of one that answered).
    pub connect_retries: usize,
    /// Pause before such a retry, in ms.
    pub retry_backoff_ms: u64,
    /// Worker calls in flight at once, across every round of the engine.
    pub concurrency: usize,
}

impl Default for ResolveStageSection {
    fn default() -> Self {
        Self {
            timeout_ms: 30_000,
            max_body_bytes: 256 * 1024,
            connect_retries: 1,
            retry_backoff_ms: 250,
            concurrency: 64,
        }
    }
}

/// How many valid answers a round needs, and how long it waits for the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QuorumSection {
    /// Answers needed: `bft` (ceil(2n/3) of the registered workers), `majority`, `all`, or a number.
    pub rule: QuorumRule,
    /// After quorum is met, wait at most this long for the rest; 0 waits for every
    /// worker up to the stage timeout.
    pub grace_ms: u64,
}

impl Default for QuorumSection {
    fn default() -> Self {
        Self {
            rule: QuorumRule::Bft,
            grace_ms: 0,
        }
    }
}

/// The challenge stage (its texts and limits) and the ratifying vote after the tally.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ChallengeSection {
    /// Challenge every responder with the others' answers (`POST /a2a/challenge`).
    pub enabled: bool,
    /// After the tally, put the outcome to a ratifying vote of the workers whose protocol
    /// has one (round-table `/vote`); dissent is recorded in the transcript, not counted.
    pub ratify: bool,
    /// How long a worker has to defend its answer, in ms.
    pub timeout_ms: u64,
    /// The largest defence body read from a worker.
    pub max_body_bytes: usize,
    /// The challenge texts sent when the responders disagree (templates).
    pub disagreement: Vec<String>,
    /// The challenge texts sent when they all agree (templates).
    pub unanimity: Vec<String>,
}

impl Default for ChallengeSection {
    fn default() -> Self {
        let t = ChallengeTemplates::default();
        Self {
            enabled: true,
            ratify: false,
            timeout_ms: 15_000,
            max_body_bytes: 256 * 1024,
            disagreement: t.disagreement,
            unanimity: t.unanimity,
        }
    }
}

impl ChallengeSection {
    /// The challenge texts as the challenge stage takes them.
    pub fn templates(&self) -> ChallengeTemplates {
        ChallengeTemplates {
            disagreement: self.disagreement.clone(),
            unanimity: self.unanimity.clone(),
        }
    }
}

/// Which evaluator scores the answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EvaluatorKind {
    /// An OpenAI-compatible chat completions API (`[evaluator.llm]`).
    Llm,
    /// The offline, deterministic rubric.
    #[default]
    Rubric,
}

/// The evaluator: its kind, its fallback and the LLM's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EvaluatorSection {
    /// `rubric` (offline, deterministic) or `llm` (an OpenAI-compatible API).
    pub kind: EvaluatorKind,
    /// What the LLM evaluator falls back to after its retries: `rubric`, `neutral` or `fail`.
    pub fallback: Fallback,
    /// `[evaluator.llm]`: the LLM's endpoint and limits (required when `kind = "llm"`).
    pub llm: Option<LlmSection>,
}

/// The LLM evaluator's endpoint, model and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LlmSection {
    /// The API's base URL; `/chat/completions` is appended.
    pub base_url: String,
    /// The model asked.
    pub model: String,
    /// Name of the environment variable holding the API key (none: no auth header).
    pub api_key_env: Option<String>,
    /// How long one call may take, in ms.
    pub timeout_ms: u64,
    /// Extra attempts after a failed call (timeouts, 429, 5xx, bad replies).
    pub retries: u32,
    /// Pause before the first retry, in ms; it doubles per attempt.
    pub retry_backoff_ms: u64,
    /// The reply's token limit (`max_tokens` of the request).
    pub max_tokens: u32,
    /// The largest reply body read, in bytes.
    pub max_reply_bytes: usize,
    /// The prompt budget, in characters of worker text (the model's context, less the
    /// instructions and the reply): each worker's text is cut to an equal share of it
    /// (evidence first, two thirds; then its defences, then its sources), the cut marked
    /// in the prompt and recorded in the transcript.
    pub max_prompt_chars: usize,
}

impl Default for LlmSection {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: Some("OPENAI_API_KEY".into()),
            timeout_ms: 60_000,
            retries: 2,
            retry_backoff_ms: 1_000,
            max_tokens: 4_096,
            max_reply_bytes: 1024 * 1024,
            max_prompt_chars: 200_000,
        }
    }
}

/// The tally's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TallySection {
    /// The resolution when the weighted vote ties: `yes` (as the reference), `no`, or `fail`.
    pub tie: TieRule,
}

/// How a resolution goes on chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SubmitSection {
    /// `direct` (`resolveMarket` from the node's key) or `report` (a CRE report through the
    /// forwarder to the receiver).
    pub mode: SubmitMode,
    /// `[submit.report]`: the report's metadata in `report` mode.
    pub report: ReportSection,
}

/// Report metadata for the `report` mode (what the receiver sees as metadata).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ReportSection {
    /// Defaults to the workflow's name.
    pub workflow_name: Option<String>,
    /// The workflow id the report's metadata carries.
    #[schemars(with = "cresolver_core::schema::HexB256")]
    pub workflow_id: B256,
    /// The workflow owner the report's metadata carries (a receiver may check it).
    #[schemars(with = "cresolver_core::schema::HexAddress")]
    pub workflow_owner: Address,
}

/// A workflow file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// The file could not be read.
    #[error("cannot read workflow file {path}: {error}")]
    Read {
        /// The workflow file.
        path: PathBuf,
        /// The I/O error (shown in the message, so not a `source`: printed once).
        error: std::io::Error,
    },
    /// The file is not a workflow (bad TOML, an unknown key, a value of the wrong type).
    #[error("workflow file {path}: {message}")]
    Parse {
        /// The workflow file.
        path: PathBuf,
        /// The parser's message, naming the key.
        message: String,
    },
    /// A key holds a value a round cannot run with.
    #[error("workflow file {path}: `{key}` {message}")]
    Invalid {
        /// The workflow file.
        path: PathBuf,
        /// The dotted key (`resolve.timeout_ms`, `challenge.unanimity[0]`).
        key: String,
        /// What is wrong with its value.
        message: String,
    },
}

/// A validation failure of `key`: `Err((key, message))`.
fn bad(key: &str, message: &str) -> Result<(), (String, String)> {
    Err((key.to_string(), message.to_string()))
}

impl LlmSection {
    /// The LLM evaluator's settings: an http(s) endpoint, a model, and bounded
    /// timeout, retries, prompt and reply sizes.
    fn validate(&self) -> Result<(), (String, String)> {
        match url::Url::parse(&self.base_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => {
                return bad(
                    "evaluator.llm.base_url",
                    "must be an http(s) URL such as https://api.openai.com/v1",
                );
            }
        }
        if self.model.trim().is_empty() {
            return bad("evaluator.llm.model", "must not be empty");
        }
        if self.timeout_ms == 0 || self.timeout_ms > 600_000 {
            return bad(
                "evaluator.llm.timeout_ms",
                "must be between 1 and 600000 ms",
            );
        }
        if self.retries > 10 {
            return bad("evaluator.llm.retries", "must be at most 10");
        }
        if self.max_prompt_chars < 4_000 {
            return bad("evaluator.llm.max_prompt_chars", "must be at least 4000");
        }
        if self.max_reply_bytes < 1024 {
            return bad("evaluator.llm.max_reply_bytes", "must be at least 1024");
        }
        Ok(())
    }
}

impl Workflow {
    /// The JSON Schema of a workflow file, derived from these types.
    pub fn schema() -> &'static serde_json::Value {
        static SCHEMA: std::sync::LazyLock<serde_json::Value> =
            std::sync::LazyLock::new(crate::schema::generate::<Workflow>);
        &SCHEMA
    }

    /// Whether the workflow delivers a report through a forwarder (`[submit] mode =
    /// "report"`), as a DON member's must.
    pub fn submits_reports(&self) -> bool {
        self.submit.mode == SubmitMode::Report
    }

    /// Reads and validates a workflow file.
    pub fn load(path: &Path) -> Result<Self, WorkflowError> {
        let text = std::fs::read_to_string(path).map_err(|error| WorkflowError::Read {
            path: path.into(),
            error,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates workflow text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, WorkflowError> {
        let parse_error = |message: String| WorkflowError::Parse {
            path: path.into(),
            message,
        };
        let value = crate::schema::toml_to_json(text)
            .map_err(|m| parse_error(format!("not valid TOML: {m}")))?;
        let root = Self::schema();
        crate::schema::check(&value, root, root).map_err(|m| {
            parse_error(format!(
                "`{}` {}",
                crate::schema::dotted(&m.path),
                m.message()
            ))
        })?;
        let wf: Workflow = serde_path_to_error::deserialize(value).map_err(|e| {
            let key = e.path().to_string();
            parse_error(format!("`{key}` {}", e.into_inner()))
        })?;
        wf.validate()
            .map_err(|(key, message)| WorkflowError::Invalid {
                path: path.into(),
                key,
                message,
            })?;
        Ok(wf)
    }

    /// The built-in defaults (what `workflows/cresolver-resolution.toml` spells out).
    pub fn default_named(name: &str) -> Self {
        Self {
            name: name.into(),
            trigger: Trigger::default(),
            resolve: ResolveStageSection::default(),
            quorum: QuorumSection::default(),
            challenge: ChallengeSection::default(),
            evaluator: EvaluatorSection::default(),
            tally: TallySection::default(),
            submit: SubmitSection::default(),
        }
    }

    /// Checks the values serde cannot: `Err((key, message))` for the first bad one.
    fn validate(&self) -> Result<(), (String, String)> {
        self.validate_trigger()?;
        self.validate_limits()?;
        self.validate_challenges()?;
        if self.evaluator.kind == EvaluatorKind::Llm {
            let Some(llm) = &self.evaluator.llm else {
                return bad("evaluator.llm", "is required when evaluator.kind = \"llm\"");
            };
            llm.validate()?;
        }
        Ok(())
    }

    /// The name and the trigger: the market's `ResolutionRequested` is the only one.
    fn validate_trigger(&self) -> Result<(), (String, String)> {
        if self.name.trim().is_empty() {
            return bad("name", "must not be empty");
        }
        if self.trigger.contract != "market" {
            return bad(
                "trigger.contract",
                "must be \"market\" (the only trigger contract)",
            );
        }
        if self.trigger.event.replace(' ', "") != "ResolutionRequested(uint256,string)" {
            return bad(
                "trigger.event",
                "must be \"ResolutionRequested(uint256,string)\"",
            );
        }
        Ok(())
    }

    /// The stages' timeouts, body limits, concurrency and retries, and the quorum.
    fn validate_limits(&self) -> Result<(), (String, String)> {
        for (key, ms) in [
            ("resolve.timeout_ms", self.resolve.timeout_ms),
            ("challenge.timeout_ms", self.challenge.timeout_ms),
        ] {
            if ms == 0 || ms > 600_000 {
                return bad(key, "must be between 1 and 600000 ms");
            }
        }
        for (key, n) in [
            ("resolve.max_body_bytes", self.resolve.max_body_bytes),
            ("challenge.max_body_bytes", self.challenge.max_body_bytes),
        ] {
            if !(1024..=64 * 1024 * 1024).contains(&n) {
                return bad(key, "must be between 1024 and 67108864 bytes");
            }
        }
        if self.resolve.concurrency == 0 {
            return bad("resolve.concurrency", "must be at least 1");
        }
        if self.resolve.connect_retries > 10 {
            return bad("resolve.connect_retries", "must be at most 10");
        }
        if let QuorumRule::Fixed(0) = self.quorum.rule {
            return bad("quorum.rule", "a fixed quorum must be at least 1");
        }
        if self.quorum.grace_ms > 600_000 {
            return bad("quorum.grace_ms", "must be at most 600000 ms");
        }
        Ok(())
    }

    /// The challenge texts: some of each kind when challenges are on, none empty, and
    /// only known placeholders.
    fn validate_challenges(&self) -> Result<(), (String, String)> {
        for (key, set) in [
            ("challenge.disagreement", &self.challenge.disagreement),
            ("challenge.unanimity", &self.challenge.unanimity),
        ] {
            if self.challenge.enabled && set.is_empty() {
                return bad(
                    key,
                    "must list at least one challenge when challenges are enabled",
                );
            }
            for (i, t) in set.iter().enumerate() {
                if t.trim().is_empty() {
                    return Err((format!("{key}[{i}]"), "must not be empty".into()));
                }
                if let Some(p) = challenge::unknown_placeholder(t) {
                    return Err((
                        format!("{key}[{i}]"),
                        format!(
                            "uses unknown placeholder {{{p}}}; known: {}",
                            challenge::PLACEHOLDERS.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// How long a worker has to answer the resolve call.
    pub fn resolve_timeout(&self) -> Duration {
        Duration::from_millis(self.resolve.timeout_ms)
    }

    /// How long the resolve stage waits for the rest once quorum is met (`None`: up to
    /// the stage timeout).
    pub fn grace(&self) -> Option<Duration> {
        (self.quorum.grace_ms > 0).then(|| Duration::from_millis(self.quorum.grace_ms))
    }

    /// The workflow name used in report metadata.
    pub fn report_workflow_name(&self) -> &str {
        self.submit
            .report
            .workflow_name
            .as_deref()
            .unwrap_or(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Workflow, WorkflowError> {
        Workflow::parse(s, Path::new("t.toml"))
    }

    #[test]
    fn minimal_gets_defaults() {
        let w = parse("name = \"x\"").unwrap();
        assert_eq!(w.resolve.timeout_ms, 30_000);
        assert_eq!(w.challenge.timeout_ms, 15_000);
        assert_eq!(w.quorum.rule, QuorumRule::Bft);
        assert_eq!(w.tally.tie, TieRule::Yes);
    }

    #[test]
    fn quorum_forms() {
        assert_eq!(
            parse("name='x'\n[quorum]\nrule = 4").unwrap().quorum.rule,
            QuorumRule::Fixed(4)
        );
        assert_eq!(
            parse("name='x'\n[quorum]\nrule = 'majority'")
                .unwrap()
                .quorum
                .rule,
            QuorumRule::Majority
        );
        let e = parse("name='x'\n[quorum]\nrule = 'most'")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "workflow file t.toml: `quorum.rule` must be one of: bft, majority, all, or a whole number of at least 1, not \"most\""
        );
        let e = parse("name='x'\n[quorum]\nrule = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("quorum.rule"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse("name='x'\n[resolve]\ntimeout_sec = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("timeout_sec"), "{e}");
        let e = parse("name='x'\n[resolve]\ntimeout_ms = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("resolve.timeout_ms"), "{e}");
        let e = parse("name='x'\n[challenge]\nunanimity = ['what {nope}?']")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("challenge.unanimity[0]") && e.contains("nope"),
            "{e}"
        );
        let e = parse("name='x'\n[tally]\ntie = 'maybe'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("maybe"), "{e}");
        let e = parse("name='x'\n[evaluator]\nkind = 'llm'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("evaluator.llm"), "{e}");
    }

    #[test]
    fn messages_name_the_key_and_a_valid_value() {
        let e = parse("[quorum]\nrule = 'all'").unwrap_err().to_string();
        assert_eq!(e, "workflow file t.toml: `name` is required");
        let e = parse("name='x'\n[challenge]\nenabled = 'true'")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`challenge.enabled` must be a boolean: true or false, not \"true\""),
            "{e}"
        );
        let e = parse("name='x'\n[resolve]\ntimeout_ms = 2.5")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`resolve.timeout_ms` must be a whole number"),
            "{e}"
        );
        let e = parse("name='x'\n[evaluator]\nkind = 'gpt'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("one of: llm, rubric, not \"gpt\""), "{e}");
        let e = parse("name='x'\n[trigger]\naddress = '0x12'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`trigger.address` must be an address"), "{e}");
        let e = parse("name='x'\n[evaluator.llm]\nmodel = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`evaluator.llm.model` must be text"), "{e}");
    }

    #[test]
    fn the_quorum_rule_is_described_with_its_words() {
        let root = Workflow::schema();
        let rule = crate::schema::at(root, &["quorum", "rule"]).unwrap();
        assert_eq!(
            crate::schema::expected(rule, root),
            "one of: bft, majority, all, or a whole number of at least 1"
        );
    }

    #[test]
    fn a_missing_file_is_named_with_its_cause_once() {
        use std::error::Error as _;
        let dir = tempfile::tempdir().unwrap();
        let w = Workflow::load(&dir.path().join("nope.toml")).unwrap_err();
        assert!(w.source().is_none(), "the cause is in the message already");
        assert_eq!(w.to_string().matches("os error").count(), 1, "{w}");
    }
}
