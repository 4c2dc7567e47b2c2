//! Challenge texts: the workflow's templates rendered for one worker. A worker whose
//! determination differs from any other valid responder's gets the disagreement set,
//! otherwise the unanimity set (the reference's rule). An abstaining worker (no
//! position) differs from every voter: it gets the disagreement set when anyone voted,
//! with `{determination}` = `NEUTRAL` and `{opposite}` = `YES or NO`.

use super::protocol::ResolveAnswer;
use cresolver_core::jsmath::js_round;

/// Placeholders a template may use.
pub const PLACEHOLDERS: [&str; 4] = ["determination", "opposite", "confidence_pct", "question"];

/// The reference workflow's texts (the defaults of the workflow file): those put to a
/// worker that disagrees with another responder.
pub const DEFAULT_DISAGREEMENT: [&str; 3] = [
    "Other workers reached the opposite conclusion. What specific evidence makes you confident that the answer is {determination}?",
    "Your confidence is {confidence_pct}%. What would need to change for you to reverse your determination?",
    "Identify the weakest point in your analysis and defend it.",
];
/// The reference workflow's texts put to a worker that no other responder disagrees
/// with.
pub const DEFAULT_UNANIMITY: [&str; 3] = [
    "All workers agree with your determination. Play devil's advocate \u{2014} what's the strongest argument for the opposite conclusion?",
    "What assumptions in your analysis could be wrong?",
    "How would you respond to someone who says your sources are biased or incomplete?",
];

/// Challenge templates of a workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeTemplates {
    /// Put to a worker whose position differs from another valid responder's.
    pub disagreement: Vec<String>,
    /// Put to a worker when no other valid responder's position differs from its own.
    pub unanimity: Vec<String>,
}

impl Default for ChallengeTemplates {
    fn default() -> Self {
        Self {
            disagreement: DEFAULT_DISAGREEMENT.iter().map(|s| s.to_string()).collect(),
            unanimity: DEFAULT_UNANIMITY.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Returns the first `{name}` in `template` that is not a known placeholder.
pub fn unknown_placeholder(template: &str) -> Option<String> {
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let end = after.find('}')?;
        let name = &after[..end];
        if !PLACEHOLDERS.contains(&name) {
            return Some(name.to_string());
        }
        rest = &after[end + 1..];
    }
    None
}

fn yes_no(b: bool) -> &'static str {
    if b { "YES" } else { "NO" }
}

/// Every valid responder's vote (abstentions left out), the input of [`challenges_for`].
pub fn votes<'a>(answers: impl IntoIterator<Item = &'a ResolveAnswer>) -> Vec<bool> {
    answers
        .into_iter()
        .filter(|a| !a.abstain)
        .map(|a| a.determination)
        .collect()
}

/// Renders the challenges for `answer`, given every valid responder's vote ([`votes`]).
pub fn challenges_for(
    templates: &ChallengeTemplates,
    question: &str,
    answer: &ResolveAnswer,
    all_determinations: &[bool],
) -> Vec<String> {
    let disagreement = if answer.abstain {
        !all_determinations.is_empty()
    } else {
        all_determinations
            .iter()
            .any(|d| *d != answer.determination)
    };
    let set = if disagreement {
        &templates.disagreement
    } else {
        &templates.unanimity
    };
    // `(confidence * 100).toFixed(0)` in the reference: round half up on the f64 product.
    let pct = format!("{}", js_round(answer.confidence * 100.0) as i64);
    let (determination, opposite) = if answer.abstain {
        ("NEUTRAL", "YES or NO")
    } else {
        (yes_no(answer.determination), yes_no(!answer.determination))
    };
    set.iter()
        .map(|t| {
            t.replace("{determination}", determination)
                .replace("{opposite}", opposite)
                .replace("{confidence_pct}", &pct)
                .replace("{question}", question)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ans(d: bool, c: f64) -> ResolveAnswer {
        ResolveAnswer {
            determination: d,
            confidence: c,
            evidence: "e".into(),
            sources: vec![],
            abstain: false,
            notes: vec![],
            cuts: vec![],
        }
    }

    #[test]
    fn disagreement_variant_with_percentage() {
        let t = ChallengeTemplates::default();
        let c = challenges_for(&t, "q", &ans(true, 0.825), &[true, false]);
        assert_eq!(
            c[0],
            "Other workers reached the opposite conclusion. What specific evidence makes you confident that the answer is YES?"
        );
        // 0.825 * 100 is exactly 82.5 in f64: JavaScript's toFixed(0) gives 83
        assert_eq!(
            c[1],
            "Your confidence is 83%. What would need to change for you to reverse your determination?"
        );
        // 0.145 * 100 = 14.499999999999998 in f64: 14, as in JavaScript
        let c = challenges_for(&t, "q", &ans(true, 0.145), &[true, false]);
        assert!(c[1].contains(" 14%"), "{}", c[1]);
        let c = challenges_for(&t, "q", &ans(false, 0.5), &[false, false]);
        assert!(c[0].starts_with("All workers agree"));
        assert_eq!(c.len(), 3);
        // an abstainer among voters: disagreement set, NEUTRAL position
        let mut neutral = ans(false, 0.5);
        neutral.abstain = true;
        let c = challenges_for(&t, "q", &neutral, &votes([&ans(true, 0.9), &neutral]));
        assert!(c[0].ends_with("the answer is NEUTRAL?"), "{}", c[0]);
        // only abstainers: unanimity set
        let c = challenges_for(&t, "q", &neutral, &votes([&neutral]));
        assert!(c[0].starts_with("All workers agree"));
    }

    #[test]
    fn placeholder_check() {
        assert_eq!(
            unknown_placeholder("a {determination} {confidence_pct}"),
            None
        );
        assert_eq!(unknown_placeholder("a {nope}"), Some("nope".into()));
    }
}
