//! A Factagora `AgentResponse` validated by every rule of the spec's "Response
//! Validation" section, and composed into a round's answer; soft quality checks become
//! notes, never rejections.

use super::*;
pub use cresolver_core::Position;

/// One `reactCycle.actions` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// What kind of action (`type`: `web_search`, `api_call`, …; others are noted).
    pub kind: String,
    /// What the agent asked or looked up.
    pub query: String,
    /// What it found.
    pub result: String,
    /// Where the result came from, if given (becomes a source of the answer).
    pub source: Option<String>,
}

/// One `reactCycle.evidence` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct EvidenceItem {
    /// `type`: `link`, `data` or `citation` (others are noted).
    pub kind: String,
    /// A short title of the evidence.
    pub title: String,
    /// Where it can be checked, if given (becomes a source of the answer).
    pub url: Option<String>,
    /// What it shows, if given.
    pub description: Option<String>,
    /// The agent's estimate of its reliability, 0–1; `None` when absent or out of range.
    pub reliability: Option<f64>,
}

/// A validated `AgentResponse`, with the soft warnings found while validating it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentResponse {
    /// The agent's position.
    pub position: Position,
    /// Its confidence in the position, 0–1.
    pub confidence: f64,
    /// `reactCycle.initialThought`: the first take on the question.
    pub initial_thought: String,
    /// `reactCycle.actions`: what the agent did to investigate.
    pub actions: Vec<Action>,
    /// `reactCycle.observations`: what it observed (blank ones left out).
    pub observations: Vec<String>,
    /// `reactCycle.synthesisThought`: its conclusion from the observations.
    pub synthesis_thought: String,
    /// `reactCycle.evidence`: the evidence it cites.
    pub evidence: Vec<EvidenceItem>,
    /// A summary of its reasoning, if given (at most [`MAX_REASONING_CHARS`]
    /// characters).
    pub reasoning: Option<String>,
    /// The limitations it names in its own analysis.
    pub limitations: Vec<String>,
    /// Soft quality warnings (never a rejection).
    pub notes: Vec<String>,
}

/// Validates an `AgentResponse` by every rule of the spec's "Response Validation"
/// section (and `reasoning` ≤ 1000 characters). Optional fields of the wrong JSON type
/// are violations too; the quality checks become [`AgentResponse::notes`].
pub fn validate_agent_response(v: &Value) -> Result<AgentResponse, WorkerFailure> {
    let obj = v
        .as_object()
        .ok_or_else(|| WorkerFailure::schema("response is not a JSON object"))?;
    let mut notes = Vec::new();
    let position = position_of(obj)?;
    let confidence = confidence_of(obj)?;
    let cycle = match obj.get("reactCycle") {
        Some(Value::Object(m)) => m,
        Some(other) => return Err(wrong_type("reactCycle", "an object", other)),
        None => return Err(missing("reactCycle")),
    };
    let initial_thought = thought(cycle, "initialThought")?;
    let actions = actions_of(cycle, &mut notes)?;
    let observations = observations_of(cycle, &mut notes)?;
    let synthesis_thought = thought(cycle, "synthesisThought")?;
    let evidence_raw = bounded_array(cycle, "evidence", "reactCycle.evidence", MAX_EVIDENCE_ITEMS)?;
    let mut evidence = Vec::with_capacity(evidence_raw.len());
    for (i, item) in evidence_raw.iter().enumerate() {
        let path = format!("reactCycle.evidence[{i}]");
        evidence.push(evidence_item(&path, item, &mut notes)?);
    }
    let reasoning = reasoning_of(obj)?;
    let limitations = limitations_of(obj)?;
    quality_notes(
        confidence,
        &actions,
        &synthesis_thought,
        &evidence,
        &mut notes,
    );

    Ok(AgentResponse {
        position,
        confidence,
        initial_thought,
        actions,
        observations,
        synthesis_thought,
        evidence,
        reasoning,
        limitations,
        notes,
    })
}

/// The required `position`: exactly `YES`, `NO` or `NEUTRAL`.
fn position_of(obj: &Map<String, Value>) -> Result<Position, WorkerFailure> {
    match obj.get("position") {
        Some(Value::String(s)) => match s.as_str() {
            "YES" => Ok(Position::Yes),
            "NO" => Ok(Position::No),
            "NEUTRAL" => Ok(Position::Abstain),
            other => Err(WorkerFailure::schema(format!(
                "`position` must be exactly \"YES\", \"NO\" or \"NEUTRAL\" \
                 (case-sensitive), got {:?}",
                clip_chars(other, ECHO_CHARS)
            ))),
        },
        Some(other) => Err(wrong_type("position", "a string", other)),
        None => Err(missing("position")),
    }
}

/// The required `confidence`: a number in [0, 1].
fn confidence_of(obj: &Map<String, Value>) -> Result<f64, WorkerFailure> {
    let confidence = match obj.get("confidence") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(other) => return Err(wrong_type("confidence", "a number", other)),
        None => return Err(missing("confidence")),
    };
    if !(confidence.is_finite() && (0.0..=1.0).contains(&confidence)) {
        return Err(WorkerFailure::schema(format!(
            "`confidence` = {confidence} is outside [0.0, 1.0]"
        )));
    }
    Ok(confidence)
}

/// `reactCycle.actions`: 1..=[`MAX_ACTIONS`] objects with a `type`, `query` and
/// `result`; a `type` the spec does not name is noted.
fn actions_of(
    cycle: &Map<String, Value>,
    notes: &mut Vec<String>,
) -> Result<Vec<Action>, WorkerFailure> {
    let actions_raw = bounded_array(cycle, "actions", "reactCycle.actions", MAX_ACTIONS)?;
    let mut actions = Vec::with_capacity(actions_raw.len());
    for (i, item) in actions_raw.iter().enumerate() {
        let path = format!("reactCycle.actions[{i}]");
        let m = item
            .as_object()
            .ok_or_else(|| wrong_type(&path, "an object", item))?;
        let kind = required_text(m, "type", &path)?;
        if !ACTION_TYPES.contains(&kind.as_str()) {
            notes.push(format!(
                "`{path}.type` {:?} is not one of the spec's action types",
                clip_chars(&kind, ECHO_CHARS)
            ));
        }
        actions.push(Action {
            kind,
            query: required_text(m, "query", &path)?,
            result: required_text(m, "result", &path)?,
            source: optional_text(m, "source", &path)?,
        });
        // `timestamp` is optional and unused; only its type is checked.
        optional_text(m, "timestamp", &path)?;
    }
    Ok(actions)
}

/// `reactCycle.observations`: 1..=[`MAX_OBSERVATIONS`] strings; blank ones are noted
/// and left out.
fn observations_of(
    cycle: &Map<String, Value>,
    notes: &mut Vec<String>,
) -> Result<Vec<String>, WorkerFailure> {
    let observations_raw = bounded_array(
        cycle,
        "observations",
        "reactCycle.observations",
        MAX_OBSERVATIONS,
    )?;
    let mut observations = Vec::with_capacity(observations_raw.len());
    for (i, item) in observations_raw.iter().enumerate() {
        let path = format!("reactCycle.observations[{i}]");
        match item {
            Value::String(s) if s.trim().is_empty() => {
                notes.push(format!("`{path}` is empty"));
            }
            Value::String(s) => observations.push(s.clone()),
            other => return Err(wrong_type(&path, "a string", other)),
        }
    }
    if observations.is_empty() {
        notes.push("every observation is empty".into());
    }
    Ok(observations)
}

/// One `reactCycle.evidence` entry at `path`: an unknown `type`, an over-long
/// `description` and a `reliability` outside [0, 1] (then ignored) are noted.
fn evidence_item(
    path: &str,
    item: &Value,
    notes: &mut Vec<String>,
) -> Result<EvidenceItem, WorkerFailure> {
    let m = item
        .as_object()
        .ok_or_else(|| wrong_type(path, "an object", item))?;
    let kind = required_text(m, "type", path)?;
    if !EVIDENCE_TYPES.contains(&kind.as_str()) {
        notes.push(format!(
            "`{path}.type` {:?} is not link, data or citation",
            clip_chars(&kind, ECHO_CHARS)
        ));
    }
    let title = required_text(m, "title", path)?;
    let url = optional_text(m, "url", path)?;
    let description = optional_text(m, "description", path)?;
    if let Some(d) = &description {
        let n = d.chars().count();
        if n > MAX_DESCRIPTION_CHARS {
            notes.push(format!(
                "`{path}.description` is {n} characters (the spec recommends at most \
                 {MAX_DESCRIPTION_CHARS})"
            ));
        }
    }
    let reliability = match m.get("reliability") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(r) if r.is_finite() && (0.0..=1.0).contains(&r) => Some(r),
            _ => {
                notes.push(format!(
                    "`{path}.reliability` = {n} is outside [0, 1]; ignored"
                ));
                None
            }
        },
        Some(other) => {
            return Err(wrong_type(
                &format!("{path}.reliability"),
                "a number",
                other,
            ));
        }
    };
    Ok(EvidenceItem {
        kind,
        title,
        url,
        description,
        reliability,
    })
}

/// The optional `reasoning`: at most [`MAX_REASONING_CHARS`] characters.
fn reasoning_of(obj: &Map<String, Value>) -> Result<Option<String>, WorkerFailure> {
    let reasoning = optional_text(obj, "reasoning", "")?;
    if let Some(r) = &reasoning {
        let n = r.chars().count();
        if n > MAX_REASONING_CHARS {
            return Err(WorkerFailure::schema(format!(
                "`reasoning` is {n} characters; at most {MAX_REASONING_CHARS}"
            )));
        }
    }
    Ok(reasoning)
}

/// The optional `limitations`: an array of strings (`null` counts as none).
fn limitations_of(obj: &Map<String, Value>) -> Result<Vec<String>, WorkerFailure> {
    match obj.get("limitations") {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len().min(MAX_LIMITATIONS));
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.push(s.clone()),
                    other => {
                        return Err(wrong_type(&format!("limitations[{i}]"), "a string", other));
                    }
                }
            }
            Ok(out)
        }
        Some(other) => Err(wrong_type("limitations", "an array of strings", other)),
    }
}

/// The spec's soft quality checks of a valid response, added to `notes`: high
/// confidence without high-reliability evidence, few evidence items, no web search, a
/// brief synthesis.
fn quality_notes(
    confidence: f64,
    actions: &[Action],
    synthesis_thought: &str,
    evidence: &[EvidenceItem],
    notes: &mut Vec<String>,
) {
    if confidence > HIGH_CONFIDENCE
        && !evidence
            .iter()
            .any(|e| e.reliability.is_some_and(|r| r >= HIGH_RELIABILITY))
    {
        notes.push(format!(
            "confidence {confidence} is above {HIGH_CONFIDENCE} without high-reliability \
             evidence (no item with reliability >= {HIGH_RELIABILITY})"
        ));
    }
    if evidence.len() < MIN_RECOMMENDED_EVIDENCE {
        notes.push(format!(
            "only {} evidence item(s); the spec recommends at least {MIN_RECOMMENDED_EVIDENCE}",
            evidence.len()
        ));
    }
    if !actions.iter().any(|a| a.kind == "web_search") {
        notes.push("no web_search action backs the external claims".into());
    }
    let synthesis_chars = synthesis_thought.chars().count();
    if synthesis_chars < BRIEF_SYNTHESIS_CHARS {
        notes.push(format!(
            "synthesisThought is too brief ({synthesis_chars} characters; under \
             {BRIEF_SYNTHESIS_CHARS})"
        ));
    }
}

impl AgentResponse {
    /// The resolve-stage answer: determination (or abstention for `NEUTRAL`), the
    /// composed evidence text, the sources, and the soft warnings as notes. The result
    /// passes [`validate_resolve_answer`]'s bounds.
    pub fn into_answer(self) -> Result<ResolveAnswer, WorkerFailure> {
        let mut notes = self.notes.clone();
        let mut evidence = self.compose_evidence();
        if evidence.len() > MAX_EVIDENCE_BYTES {
            evidence = clip_bytes(&evidence, MAX_EVIDENCE_BYTES);
            notes.push(format!(
                "composed evidence was cut to {MAX_EVIDENCE_BYTES} bytes"
            ));
        }
        let mut cuts = Vec::new();
        let sources = self.sources(&mut notes, &mut cuts);
        let mut answer = validate_resolve_answer(&json!({
            "determination": self.position == Position::Yes,
            "confidence": self.confidence,
            "evidence": evidence,
            "sources": sources,
        }))?;
        answer.abstain = self.position == Position::Abstain;
        answer.notes = notes;
        answer.cuts.extend(cuts);
        Ok(answer)
    }

    /// One readable text with labelled sections, each free-text item clipped.
    pub fn compose_evidence(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Position: {} (confidence {:.2})",
            crate::protocol::wire_word(self.position),
            self.confidence
        );
        if let Some(r) = self.reasoning.as_deref().filter(|r| !r.trim().is_empty()) {
            let _ = writeln!(s, "\nSummary: {}", r.trim());
        }
        let _ = writeln!(s, "\nInitial thought: {}", self.initial_thought.trim());
        s.push_str("\nActions:\n");
        for (i, a) in self.actions.iter().enumerate() {
            let _ = write!(
                s,
                "{}. {}: {:?} -> {}",
                i + 1,
                clip_chars(&a.kind, ECHO_CHARS),
                clip_chars(a.query.trim(), ITEM_CHARS / 2),
                clip_chars(a.result.trim(), ITEM_CHARS)
            );
            if let Some(src) = &a.source {
                let _ = write!(s, " ({})", clip_chars(src.trim(), ITEM_CHARS / 2));
            }
            s.push('\n');
        }
        s.push_str("\nObservations:\n");
        for o in &self.observations {
            let _ = writeln!(s, "- {}", clip_chars(o.trim(), ITEM_CHARS));
        }
        let _ = writeln!(s, "\nSynthesis: {}", self.synthesis_thought.trim());
        s.push_str("\nEvidence:\n");
        for e in &self.evidence {
            let _ = write!(
                s,
                "- [{}] {}",
                clip_chars(&e.kind, ECHO_CHARS),
                clip_chars(e.title.trim(), ITEM_CHARS / 2)
            );
            if let Some(d) = e.description.as_deref().filter(|d| !d.trim().is_empty()) {
                let _ = write!(s, ": {}", clip_chars(d.trim(), ITEM_CHARS / 2));
            }
            if let Some(r) = e.reliability {
                let _ = write!(s, " (reliability {r:.2})");
            }
            if let Some(u) = e.url.as_deref().filter(|u| !u.trim().is_empty()) {
                let _ = write!(s, " <{}>", clip_chars(u.trim(), ITEM_CHARS / 2));
            }
            s.push('\n');
        }
        let limitations: Vec<&String> = self
            .limitations
            .iter()
            .filter(|l| !l.trim().is_empty())
            .take(MAX_LIMITATIONS)
            .collect();
        if !limitations.is_empty() {
            s.push_str("\nLimitations:\n");
            for l in limitations {
                let _ = writeln!(s, "- {}", clip_chars(l.trim(), ITEM_CHARS));
            }
        }
        s.trim_end().to_string()
    }

    /// Evidence URLs then action sources, trimmed and deduplicated; over-long entries
    /// and entries past [`MAX_SOURCES`] are dropped with a note.
    pub(super) fn sources(&self, notes: &mut Vec<String>, cuts: &mut Vec<ListCut>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let (mut too_long, mut too_many) = (0usize, 0usize);
        let candidates = self
            .evidence
            .iter()
            .filter_map(|e| e.url.as_deref())
            .chain(self.actions.iter().filter_map(|a| a.source.as_deref()));
        for c in candidates {
            let c = c.trim();
            if c.is_empty() || out.iter().any(|s| s == c) {
                continue;
            }
            if c.len() > MAX_SOURCE_BYTES {
                too_long += 1;
            } else if out.len() >= MAX_SOURCES {
                too_many += 1;
            } else {
                out.push(c.to_string());
            }
        }
        if too_long > 0 {
            notes.push(format!(
                "{too_long} source(s) longer than {MAX_SOURCE_BYTES} bytes dropped"
            ));
        }
        if too_many > 0 {
            notes.push(format!(
                "{too_many} source(s) past the first {MAX_SOURCES} dropped"
            ));
        }
        if too_long + too_many > 0 {
            cuts.push(ListCut {
                field: "sources".into(),
                received: out.len() + too_long + too_many,
                kept: out.len(),
                oversize: too_long,
                max: MAX_SOURCES,
            });
        }
        out
    }

    /// The challenge response of round 2, noting a change from `own` (round 1).
    pub(super) fn round_two_text(&self, own: &ResolveAnswer) -> String {
        let before = crate::protocol::wire_word(own.position());
        let now = crate::protocol::wire_word(self.position);
        let change = if before == now {
            "unchanged from round 1".to_string()
        } else {
            format!("position changed from {before} in round 1")
        };
        let mut s = format!(
            "Round 2: {now} at {}% ({change}). Synthesis: {}",
            (self.confidence * 100.0).round(),
            self.synthesis_thought.trim()
        );
        if let Some(r) = self.reasoning.as_deref().filter(|r| !r.trim().is_empty()) {
            let _ = write!(s, " Reasoning: {}", r.trim());
        }
        clip_bytes(&s, MAX_RESPONSE_BYTES)
    }
}

/// A required ReAct thought: a non-empty string of 20..=2000 characters.
pub(super) fn thought(cycle: &Map<String, Value>, key: &str) -> Result<String, WorkerFailure> {
    let path = format!("reactCycle.{key}");
    let s = match cycle.get(key) {
        Some(Value::String(s)) => s,
        Some(other) => return Err(wrong_type(&path, "a string", other)),
        None => return Err(missing(&path)),
    };
    if s.trim().is_empty() {
        return Err(WorkerFailure::schema(format!("`{path}` is empty")));
    }
    let n = s.chars().count();
    if n < MIN_THOUGHT_CHARS {
        return Err(WorkerFailure::schema(format!(
            "`{path}` is {n} characters; at least {MIN_THOUGHT_CHARS}"
        )));
    }
    if n > MAX_THOUGHT_CHARS {
        return Err(WorkerFailure::schema(format!(
            "`{path}` is {n} characters; at most {MAX_THOUGHT_CHARS}"
        )));
    }
    Ok(s.clone())
}

/// A required array of 1..=`max` entries.
pub(super) fn bounded_array<'v>(
    obj: &'v Map<String, Value>,
    key: &str,
    path: &str,
    max: usize,
) -> Result<&'v Vec<Value>, WorkerFailure> {
    let items = match obj.get(key) {
        Some(Value::Array(items)) => items,
        Some(other) => return Err(wrong_type(path, "an array", other)),
        None => return Err(missing(path)),
    };
    if items.is_empty() {
        return Err(WorkerFailure::schema(format!(
            "`{path}` has 0 entries; at least 1"
        )));
    }
    if items.len() > max {
        return Err(WorkerFailure::schema(format!(
            "`{path}` has {} entries; at most {max}",
            items.len()
        )));
    }
    Ok(items)
}

/// A required, non-blank string field of an item at `path`.
pub(super) fn required_text(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<String, WorkerFailure> {
    let full = format!("{path}.{key}");
    match m.get(key) {
        Some(Value::String(s)) if s.trim().is_empty() => {
            Err(WorkerFailure::schema(format!("`{full}` is empty")))
        }
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(wrong_type(&full, "a string", other)),
        None => Err(missing(&full)),
    }
}

/// An optional string field (`null` counts as absent) of an item at `path` (`""` for
/// the top level).
pub(super) fn optional_text(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, WorkerFailure> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => {
            let full = if path.is_empty() {
                key.to_string()
            } else {
                format!("{path}.{key}")
            };
            Err(wrong_type(&full, "a string", other))
        }
    }
}

pub(super) fn missing(path: &str) -> WorkerFailure {
    WorkerFailure::schema(format!("`{path}` is missing"))
}

pub(super) fn wrong_type(path: &str, expected: &str, got: &Value) -> WorkerFailure {
    WorkerFailure::schema(format!(
        "`{path}` must be {expected}, got {}",
        type_name(got)
    ))
}

/// At most `max` characters of `s`, with `…` when cut.
pub(crate) fn clip_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// At most `max` bytes of `s` (cut on a character boundary, `…` included).
pub(crate) fn clip_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The current time in Unix seconds.
pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `YYYY-MM-DDTHH:MM:SSZ` (ISO 8601, UTC) of a Unix timestamp.
pub(crate) fn iso8601_utc(secs: u64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(FORMAT).ok())
        .unwrap_or_else(|| "9999-12-31T23:59:59Z".to_string())
}
