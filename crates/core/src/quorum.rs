//! Quorum rules: how many valid resolve responses a round needs, counted over the
//! market's *registered* worker set.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A quorum rule from the workflow file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QuorumRule {
    /// BFT supermajority, `ceil(2n/3)` (the reference's rule).
    Bft,
    /// Strict majority, `floor(n/2) + 1`.
    Majority,
    /// Every registered worker must answer.
    All,
    /// A fixed number of valid responses (at least 1).
    #[serde(untagged)]
    Fixed(#[schemars(range(min = 1))] usize),
}

impl QuorumRule {
    /// Valid responses required out of `n` registered workers.
    ///
    /// A fixed count larger than `n` is returned as is: such a round cannot reach
    /// quorum, and says so, rather than silently lowering the bar.
    pub fn required(self, n: usize) -> usize {
        match self {
            QuorumRule::Bft => (2 * n).div_ceil(3),
            QuorumRule::Majority => n / 2 + 1,
            QuorumRule::All => n,
            QuorumRule::Fixed(k) => k,
        }
    }

    /// Whether `valid` responses out of `n` registered workers meet the rule.
    /// A round needs at least one valid response whatever the rule says.
    pub fn is_met(self, valid: usize, n: usize) -> bool {
        valid >= 1 && valid >= self.required(n)
    }
}

impl fmt::Display for QuorumRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuorumRule::Bft => write!(f, "bft (ceil(2n/3))"),
            QuorumRule::Majority => write!(f, "majority (floor(n/2)+1)"),
            QuorumRule::All => write!(f, "all"),
            QuorumRule::Fixed(k) => write!(f, "fixed ({k})"),
        }
    }
}

/// Faults a BFT round tolerates out of `n`: `floor((n-1)/3)`.
pub fn bft_tolerated_faults(n: usize) -> usize {
    n.saturating_sub(1) / 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bft_table_from_spec() {
        let expected = [1, 2, 2, 3, 4, 4, 5, 6, 6, 7];
        for (i, want) in expected.iter().enumerate() {
            let n = i + 1;
            assert_eq!(QuorumRule::Bft.required(n), *want, "n={n}");
            // the boundary: exactly `want` is met, one fewer is not
            assert!(QuorumRule::Bft.is_met(*want, n));
            assert!(!QuorumRule::Bft.is_met(want - 1, n));
            // required + tolerated faults never exceed n
            assert!(QuorumRule::Bft.required(n) + bft_tolerated_faults(n) <= n);
        }
    }

    #[test]
    fn other_rules() {
        assert_eq!(QuorumRule::Majority.required(4), 3);
        assert_eq!(QuorumRule::Majority.required(3), 2);
        assert_eq!(QuorumRule::All.required(7), 7);
        assert_eq!(QuorumRule::Fixed(2).required(10), 2);
        assert!(!QuorumRule::Fixed(5).is_met(3, 3));
        assert!(!QuorumRule::Bft.is_met(0, 0));
    }
}
