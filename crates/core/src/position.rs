//! A worker's position on a market: YES, NO, or an answer that takes no side. One type
//! for every stage — a worker's answer, the tally's vote, a DON member's observation —
//! with the conversions to the wire forms (the worker protocol's `determination` and
//! `abstain`, a neighbouring protocol's words) at the edges.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a worker answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    /// The market resolves YES.
    Yes,
    /// The market resolves NO.
    No,
    /// An answer that takes no side: the worker is a responder (scored and rewarded)
    /// with no vote weight.
    Abstain,
}

impl Position {
    /// The position of the worker protocol's answer: `abstain` wins over
    /// `determination`.
    pub fn from_answer(determination: bool, abstain: bool) -> Self {
        match (abstain, determination) {
            (true, _) => Position::Abstain,
            (false, true) => Position::Yes,
            (false, false) => Position::No,
        }
    }

    /// The side taken (`Some(true)`: YES), `None` for an abstention.
    pub fn side(self) -> Option<bool> {
        match self {
            Position::Yes => Some(true),
            Position::No => Some(false),
            Position::Abstain => None,
        }
    }

    /// Whether the worker took no side.
    pub fn is_abstain(self) -> bool {
        self == Position::Abstain
    }

    /// The word shown to operators: `YES`, `NO` or `abstain`.
    pub fn as_str(self) -> &'static str {
        match self {
            Position::Yes => "YES",
            Position::No => "NO",
            Position::Abstain => "abstain",
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abstention_takes_no_side_whatever_its_determination() {
        assert_eq!(Position::from_answer(true, true), Position::Abstain);
        assert_eq!(Position::from_answer(false, true), Position::Abstain);
        assert_eq!(Position::from_answer(true, false).side(), Some(true));
        assert_eq!(Position::from_answer(false, false).side(), Some(false));
        assert_eq!(Position::Abstain.side(), None);
    }
}
