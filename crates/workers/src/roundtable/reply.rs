//! A round-table agent's replies, parsed and bounded field by field (analysis, vote,
//! challenge remarks), and composed into a round's answer with its evidence levels.

use super::*;

// ---------------------------------------------------------------------------------
// Validation helpers: `path` is the object's own field path ("" for the root).

pub(super) fn field(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

pub(super) fn as_object<'a>(
    v: &'a Value,
    path: &str,
) -> Result<&'a Map<String, Value>, WorkerFailure> {
    v.as_object().ok_or_else(|| {
        if path.is_empty() {
            WorkerFailure::schema(format!("reply is {}, not a JSON object", type_name(v)))
        } else {
            WorkerFailure::schema(format!("`{path}` must be an object, got {}", type_name(v)))
        }
    })
}

pub(super) fn check_len(s: &str, name: &str) -> Result<(), WorkerFailure> {
    if s.len() > MAX_FIELD_CHARS {
        let n = s.chars().count();
        if n > MAX_FIELD_CHARS {
            return Err(WorkerFailure::schema(format!(
                "`{name}` is {n} characters; the limit is {MAX_FIELD_CHARS}"
            )));
        }
    }
    Ok(())
}

pub(super) fn string_value(v: &Value, name: &str) -> Result<String, WorkerFailure> {
    match v {
        Value::String(s) => {
            check_len(s, name)?;
            Ok(s.clone())
        }
        other => Err(WorkerFailure::schema(format!(
            "`{name}` must be a string, got {}",
            type_name(other)
        ))),
    }
}

/// A required string; `non_blank` also rejects an empty or whitespace-only one.
pub(super) fn req_str(
    m: &Map<String, Value>,
    path: &str,
    key: &str,
    non_blank: bool,
) -> Result<String, WorkerFailure> {
    let name = field(path, key);
    match m.get(key) {
        None | Some(Value::Null) => Err(WorkerFailure::schema(format!("`{name}` is missing"))),
        Some(v) => {
            let s = string_value(v, &name)?;
            if non_blank && s.trim().is_empty() {
                return Err(WorkerFailure::schema(format!("`{name}` is empty")));
            }
            Ok(s)
        }
    }
}

/// An optional string (`null` counts as absent).
pub(super) fn opt_str(
    m: &Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<Option<String>, WorkerFailure> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => string_value(v, &field(path, key)).map(Some),
    }
}

/// An optional number in [0, 1] (`null` counts as absent).
pub(super) fn opt_unit(
    m: &Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<Option<f64>, WorkerFailure> {
    let name = field(path, key);
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x.is_finite() && (0.0..=1.0).contains(&x) {
                Ok(Some(x))
            } else {
                Err(WorkerFailure::schema(format!(
                    "`{name}` = {n} is outside [0, 1]"
                )))
            }
        }
        Some(other) => Err(WorkerFailure::schema(format!(
            "`{name}` must be a number, got {}",
            type_name(other)
        ))),
    }
}

/// An array field; `required` makes absence (or `null`) a violation.
pub(super) fn array<'a>(
    m: &'a Map<String, Value>,
    path: &str,
    key: &str,
    required: bool,
) -> Result<&'a [Value], WorkerFailure> {
    let name = field(path, key);
    match m.get(key) {
        None | Some(Value::Null) if required => {
            Err(WorkerFailure::schema(format!("`{name}` is missing")))
        }
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(WorkerFailure::schema(format!(
            "`{name}` must be an array, got {}",
            type_name(other)
        ))),
    }
}

pub(super) fn quote(s: &str) -> String {
    format!("{:?}", excerpt(s, QUOTE_CHARS))
}

// ---------------------------------------------------------------------------------
// AgentAnalysis

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Observation {
    pub(super) finding: String,
    pub(super) evidence: String,
    pub(super) severity: &'static str,
    pub(super) confidence: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Recommendation {
    pub(super) action: Option<String>,
    pub(super) rationale: Option<String>,
    pub(super) priority: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Analysis {
    pub(super) agent_name: String,
    pub(super) domain: String,
    pub(super) observations: Vec<Observation>,
    pub(super) recommendations: Vec<Recommendation>,
    pub(super) confidence: Option<f64>,
}

pub(super) fn parse_analysis(v: &Value) -> Result<Analysis, WorkerFailure> {
    let m = as_object(v, "")?;
    let agent_name = req_str(m, "", "agent_name", true)?;
    let domain = req_str(m, "", "domain", false)?;
    let items = array(m, "", "observations", true)?;
    if items.is_empty() {
        return Err(WorkerFailure::schema(
            "`observations` has 0 entries; at least 1",
        ));
    }
    let mut observations = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("observations[{i}]");
        let o = as_object(item, &path)?;
        let finding = req_str(o, &path, "finding", true)?;
        let evidence = req_str(o, &path, "evidence", true)?;
        let sev = req_str(o, &path, "severity", false)?;
        let severity = SEVERITIES
            .iter()
            .find(|s| **s == sev)
            .copied()
            .ok_or_else(|| {
                WorkerFailure::schema(format!(
                    "`{path}.severity` = {} is not one of critical, warning, info",
                    quote(&sev)
                ))
            })?;
        let confidence = opt_unit(o, &path, "confidence")?;
        observations.push(Observation {
            finding,
            evidence,
            severity,
            confidence,
        });
    }
    let mut recommendations = Vec::new();
    for (i, item) in array(m, "", "recommendations", false)?.iter().enumerate() {
        let path = format!("recommendations[{i}]");
        let r = as_object(item, &path)?;
        recommendations.push(Recommendation {
            action: opt_str(r, &path, "action")?,
            rationale: opt_str(r, &path, "rationale")?,
            priority: opt_str(r, &path, "priority")?,
        });
    }
    let confidence = opt_unit(m, "", "confidence")?;
    Ok(Analysis {
        agent_name,
        domain,
        observations,
        recommendations,
        confidence,
    })
}

// ---------------------------------------------------------------------------------
// AgentVote

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Vote {
    pub(super) agent_name: String,
    pub(super) approve: bool,
    pub(super) conditions: Vec<String>,
    pub(super) dissent_reason: Option<String>,
}

pub(super) fn parse_vote(v: &Value) -> Result<Vote, WorkerFailure> {
    let m = as_object(v, "")?;
    let agent_name = req_str(m, "", "agent_name", true)?;
    let approve = match m.get("approve") {
        Some(Value::Bool(b)) => *b,
        None | Some(Value::Null) => return Err(WorkerFailure::schema("`approve` is missing")),
        Some(other) => {
            return Err(WorkerFailure::schema(format!(
                "`approve` must be a boolean, got {}",
                type_name(other)
            )));
        }
    };
    let mut conditions = Vec::new();
    for (i, c) in array(m, "", "conditions", false)?.iter().enumerate() {
        let s = string_value(c, &format!("conditions[{i}]"))?;
        if !s.trim().is_empty() {
            conditions.push(s);
        }
    }
    let dissent_reason = opt_str(m, "", "dissent_reason")?.filter(|s| !s.trim().is_empty());
    if !approve && dissent_reason.is_none() {
        return Err(WorkerFailure::schema(
            "`dissent_reason` is missing; it is required when `approve` is false",
        ));
    }
    Ok(Vote {
        agent_name,
        approve,
        conditions,
        dissent_reason,
    })
}

// ---------------------------------------------------------------------------------
// AgentChallenge

/// What the agent said about one peer, in reply order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Remark {
    Challenge { finding: String, counter: String },
    Concession { finding: String, reason: String },
}

/// Validates an `AgentChallenge`; returns the remarks per label (aligned with `labels`).
pub(super) fn parse_challenge(
    v: &Value,
    labels: &[&str],
) -> Result<Vec<Vec<Remark>>, WorkerFailure> {
    let m = as_object(v, "")?;
    req_str(m, "", "agent_name", true)?;
    let mut per_peer: Vec<Vec<Remark>> = vec![Vec::new(); labels.len()];
    for (key, fields) in [
        ("challenges", ["finding_challenged", "counter_evidence"]),
        ("concessions", ["finding_accepted", "reason"]),
    ] {
        for (i, item) in array(m, "", key, false)?.iter().enumerate() {
            let path = format!("{key}[{i}]");
            let o = as_object(item, &path)?;
            let target = req_str(o, &path, "target_agent", true)?;
            let finding = req_str(o, &path, fields[0], false)?;
            let text = req_str(o, &path, fields[1], true)?;
            let wanted = target.trim();
            let Some(k) = labels.iter().position(|l| l.eq_ignore_ascii_case(wanted)) else {
                return Err(WorkerFailure::schema(format!(
                    "`{path}.target_agent` = {} is not one of the agents sent ({})",
                    quote(&target),
                    if labels.is_empty() {
                        "none".to_string()
                    } else {
                        labels.join(", ")
                    }
                )));
            };
            per_peer[k].push(if key == "challenges" {
                Remark::Challenge {
                    finding,
                    counter: text,
                }
            } else {
                Remark::Concession {
                    finding,
                    reason: text,
                }
            });
        }
    }
    Ok(per_peer)
}

/// The response text recorded for one peer.
pub(super) fn response_for(remarks: &[Remark]) -> String {
    if remarks.is_empty() {
        return "no challenge or concession".to_string();
    }
    let mut s = remarks
        .iter()
        .map(|r| match r {
            Remark::Challenge { finding, counter } => {
                format!("Challenged {}: {}", quote(finding), counter.trim())
            }
            Remark::Concession { finding, reason } => {
                format!("Conceded {}: {}", quote(finding), reason.trim())
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    truncate_bytes(&mut s, MAX_RESPONSE_BYTES);
    s
}

// ---------------------------------------------------------------------------------
// Evidence levels

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Verified,
    Corroborated,
    Indicated,
    Possible,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Tag {
    pub(super) level: Level,
    pub(super) refs: Vec<String>,
}

/// The evidence-level tags of `text`, in order. Brackets that are not a level tag
/// (`[1]`, `[sic]`) are ignored.
pub(super) fn evidence_tags(text: &str) -> Vec<Tag> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        let inner = &after[..close];
        if let Some(nested) = inner.rfind('[') {
            rest = &after[nested..];
            continue;
        }
        rest = &after[close + 1..];
        let (name, body) = match inner.split_once(':') {
            Some((n, b)) => (n.trim(), b.trim()),
            None => (inner.trim(), ""),
        };
        let level = if name.eq_ignore_ascii_case("VERIFIED") {
            Level::Verified
        } else if name.eq_ignore_ascii_case("CORROBORATED") {
            Level::Corroborated
        } else if name.eq_ignore_ascii_case("INDICATED") {
            Level::Indicated
        } else if name.eq_ignore_ascii_case("POSSIBLE") {
            Level::Possible
        } else {
            continue;
        };
        let refs: Vec<String> = match level {
            Level::Possible => Vec::new(),
            Level::Corroborated if body.contains(" + ") => body
                .split(" + ")
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_string)
                .collect(),
            Level::Corroborated if !body.contains("://") => body
                .split('+')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_string)
                .collect(),
            _ if body.is_empty() => Vec::new(),
            _ => vec![body.to_string()],
        };
        out.push(Tag { level, refs });
    }
    out
}

/// Sources from the tags of every observation, evidence-level notes.
pub(super) fn sources_and_level_notes(
    observations: &[Observation],
    notes: &mut Vec<String>,
) -> Vec<String> {
    let mut counts = [0usize; 4];
    let mut untagged = Vec::new();
    let mut possible_only = Vec::new();
    let mut sources = Vec::new();
    let mut seen = HashSet::new();
    let (mut too_long, mut over) = (0usize, 0usize);
    for (i, o) in observations.iter().enumerate() {
        let tags = evidence_tags(&o.evidence);
        if tags.is_empty() {
            untagged.push(i);
        } else if tags.iter().all(|t| t.level == Level::Possible) {
            possible_only.push(i);
        }
        for t in tags {
            counts[t.level as usize] += 1;
            for r in t.refs {
                if r.len() > MAX_SOURCE_BYTES {
                    too_long += 1;
                } else if seen.insert(r.clone()) {
                    if sources.len() < MAX_SOURCES {
                        sources.push(r);
                    } else {
                        over += 1;
                    }
                }
            }
        }
    }
    notes.push(format!(
        "evidence levels: {} VERIFIED, {} CORROBORATED, {} INDICATED, {} POSSIBLE",
        counts[0], counts[1], counts[2], counts[3]
    ));
    let list = |ix: &[usize]| {
        let mut s = ix
            .iter()
            .take(10)
            .map(|i| format!("observations[{i}]"))
            .collect::<Vec<_>>()
            .join(", ");
        if ix.len() > 10 {
            s.push_str(&format!(" and {} more", ix.len() - 10));
        }
        s
    };
    if !possible_only.is_empty() {
        notes.push(format!(
            "evidence only [POSSIBLE] (speculative): {}",
            list(&possible_only)
        ));
    }
    if !untagged.is_empty() {
        notes.push(format!(
            "evidence without an evidence-level tag: {}",
            list(&untagged)
        ));
    }
    if too_long > 0 {
        notes.push(format!(
            "{too_long} tagged reference(s) longer than {MAX_SOURCE_BYTES} bytes left out of sources"
        ));
    }
    if over > 0 {
        notes.push(format!(
            "{over} tagged reference(s) beyond the first {MAX_SOURCES} left out of sources"
        ));
    }
    sources
}

// ---------------------------------------------------------------------------------
// The resolve answer

/// The resolve answer of an agent: its `/vote` on the proposition as the determination,
/// its analysis and vote composed into the evidence text, the references of its level
/// tags as the sources; `notes` (what the calls noticed) follow the agent's name.
pub(super) fn compose_answer(
    analysis: &Analysis,
    vote: &Vote,
    proposition: &str,
    mut notes: Vec<String>,
) -> Result<ResolveAnswer, WorkerFailure> {
    notes.insert(
        0,
        format!(
            "round-table agent {} (domain {})",
            quote(&analysis.agent_name),
            quote(&analysis.domain)
        ),
    );
    if vote.agent_name != analysis.agent_name {
        notes.push(format!(
            "/vote answered as {} but /analyze as {}",
            quote(&vote.agent_name),
            quote(&analysis.agent_name)
        ));
    }
    let confidence = overall_confidence(analysis, &mut notes);
    let mut text = analysis_text(analysis);
    push_vote_text(&mut text, vote, proposition, &mut notes);
    let before = text.len();
    if truncate_bytes(&mut text, MAX_EVIDENCE_BYTES) {
        notes.push(format!(
            "evidence text cut from {before} to {MAX_EVIDENCE_BYTES} bytes"
        ));
    }
    let sources = sources_and_level_notes(&analysis.observations, &mut notes);
    let mut answer = validate_resolve_answer(&json!({
        "determination": vote.approve,
        "confidence": confidence,
        "evidence": text,
        "sources": sources,
    }))?;
    answer.notes = notes;
    Ok(answer)
}

/// The analysis' overall confidence; when it gives none, the mean of its observations'
/// confidences, else 0.5 (either noted).
fn overall_confidence(analysis: &Analysis, notes: &mut Vec<String>) -> f64 {
    match analysis.confidence {
        Some(c) => c,
        None => {
            let given: Vec<f64> = analysis
                .observations
                .iter()
                .filter_map(|o| o.confidence)
                .collect();
            if given.is_empty() {
                notes.push("confidence not given; 0.5 assumed".into());
                0.5
            } else {
                notes.push(format!(
                    "overall confidence not given; the mean of {} observation confidence(s) used",
                    given.len()
                ));
                given.iter().sum::<f64>() / given.len() as f64
            }
        }
    }
}

/// The analysis as readable text: each finding with its severity, confidence and
/// evidence, then the recommendations with their priority and rationale.
fn analysis_text(analysis: &Analysis) -> String {
    let mut text = String::from("Findings:\n");
    for (i, o) in analysis.observations.iter().enumerate() {
        text.push_str(&format!(
            "{}. [{}] {}",
            i + 1,
            o.severity.to_uppercase(),
            o.finding.trim()
        ));
        if let Some(c) = o.confidence {
            text.push_str(&format!(" (confidence {}%)", pct(c)));
        }
        text.push_str(&format!("\n   Evidence: {}\n", o.evidence.trim()));
    }
    let recs: Vec<String> = analysis
        .recommendations
        .iter()
        .filter_map(|r| {
            let mut s = r.action.as_deref().map(str::trim).unwrap_or("").to_string();
            if let Some(p) = r
                .priority
                .as_deref()
                .map(str::trim)
                .filter(|p| !p.is_empty())
            {
                s.push_str(&format!(" (priority {p})"));
            }
            if let Some(why) = r
                .rationale
                .as_deref()
                .map(str::trim)
                .filter(|w| !w.is_empty())
            {
                s.push_str(&format!(". Rationale: {why}"));
            }
            let s = s.trim().to_string();
            (!s.is_empty()).then_some(s)
        })
        .collect();
    if !recs.is_empty() {
        text.push_str("\nRecommendations:\n");
        for r in &recs {
            text.push_str(&format!("- {r}\n"));
        }
    }
    text
}

/// Appends the vote on `proposition` to `text`: approved or dissented, its conditions
/// and its dissent reason (noted when it comes with an approval).
fn push_vote_text(text: &mut String, vote: &Vote, proposition: &str, notes: &mut Vec<String>) {
    text.push_str(&format!(
        "\nVote on the proposition {proposition:?}: {}.\n",
        if vote.approve {
            "approved"
        } else {
            "dissented"
        }
    ));
    if !vote.conditions.is_empty() {
        text.push_str("Conditions:\n");
        for c in &vote.conditions {
            text.push_str(&format!("- {}\n", c.trim()));
        }
    }
    if let Some(reason) = &vote.dissent_reason {
        if vote.approve {
            notes.push("`dissent_reason` given with `approve` = true; recorded".into());
        }
        text.push_str(&format!("Dissent reason: {}\n", reason.trim()));
    }
}
