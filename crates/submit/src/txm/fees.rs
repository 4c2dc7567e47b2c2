//! Fee arithmetic of the transaction manager (pure): the first attempt's EIP-1559 fees,
//! when an attempt needs replacing, and the replacement's fees — both fees raised by at
//! least the configured bump (nodes refuse a replacement below their minimum, geth +10%),
//! at least what the chain asks now, and never above the operator's cap.

use serde::Serialize;

/// EIP-1559 fees of one attempt, in wei per gas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fees {
    /// The most paid per gas, base fee and tip together, in wei.
    pub max_fee_per_gas: u128,
    /// The tip to the block's producer per gas, in wei.
    pub max_priority_fee_per_gas: u128,
}

/// The operator's fee policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeePolicy {
    /// Minimum raise of both fees for a replacement, in percent.
    pub bump_percent: u64,
    /// Highest max fee per gas ever signed.
    pub max_fee_cap: u128,
    /// Replace an attempt that is not mined after this many blocks.
    pub bump_after_blocks: u64,
}

/// Why an attempt is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BumpReason {
    /// Its max fee is below the next block's base fee: it cannot be mined.
    Underpriced,
    /// Not mined after `blocks` blocks.
    NotMined {
        /// How many blocks it has waited since its broadcast.
        blocks: u64,
    },
    /// A node refused it as underpriced when it was broadcast.
    Refused,
}

/// What the policy decides for a replacement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bump {
    /// Replace the attempt with one signed at these fees.
    Replace(Fees),
    /// The cap leaves no room for a replacement the network would accept.
    AtCap,
}

fn raised(v: u128, percent: u64) -> u128 {
    // ceil(v * (100 + p) / 100), and strictly more than v
    let num = v.saturating_mul(100 + percent as u128);
    let up = num / 100 + u128::from(!num.is_multiple_of(100));
    up.max(v.saturating_add(1))
}

/// Fees of a first attempt: the chain's estimate, with room for the next block's base
/// fee, capped. `None` when the cap is below what the next block needs.
pub fn initial(estimate: Fees, next_base_fee: u128, policy: &FeePolicy) -> Option<Fees> {
    let prio = estimate.max_priority_fee_per_gas;
    let max = estimate
        .max_fee_per_gas
        .max(next_base_fee.saturating_add(prio));
    let max = max.min(policy.max_fee_cap);
    if max < next_base_fee {
        return None;
    }
    Some(Fees {
        max_fee_per_gas: max,
        max_priority_fee_per_gas: prio.min(max),
    })
}

/// Whether the newest attempt needs replacing: its max fee is below the next base fee,
/// or it has waited `bump_after_blocks` blocks since it was broadcast at `sent_block`.
pub fn needs_bump(
    current: Fees,
    next_base_fee: u128,
    sent_block: u64,
    head: u64,
    policy: &FeePolicy,
) -> Option<BumpReason> {
    if current.max_fee_per_gas < next_base_fee {
        return Some(BumpReason::Underpriced);
    }
    let waited = head.saturating_sub(sent_block);
    (policy.bump_after_blocks > 0 && waited >= policy.bump_after_blocks)
        .then_some(BumpReason::NotMined { blocks: waited })
}

/// The replacement of an attempt with `current` fees: both fees raised by at least the
/// bump, at least the chain's `estimate`, a max fee that covers twice the next base fee
/// plus the tip, and within the cap.
pub fn bump(current: Fees, estimate: Fees, next_base_fee: u128, policy: &FeePolicy) -> Bump {
    let min_prio = raised(current.max_priority_fee_per_gas, policy.bump_percent);
    let min_max = raised(current.max_fee_per_gas, policy.bump_percent);
    let prio = min_prio.max(estimate.max_priority_fee_per_gas);
    let wanted = min_max
        .max(estimate.max_fee_per_gas)
        .max(next_base_fee.saturating_mul(2).saturating_add(prio));
    let max = wanted.min(policy.max_fee_cap);
    if max < min_max || max < min_prio {
        return Bump::AtCap;
    }
    Bump::Replace(Fees {
        max_fee_per_gas: max,
        max_priority_fee_per_gas: prio.min(max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GWEI: u128 = 1_000_000_000;

    fn policy() -> FeePolicy {
        FeePolicy {
            bump_percent: 20,
            max_fee_cap: 500 * GWEI,
            bump_after_blocks: 3,
        }
    }

    fn fees(max: u128, prio: u128) -> Fees {
        Fees {
            max_fee_per_gas: max,
            max_priority_fee_per_gas: prio,
        }
    }

    #[test]
    fn initial_covers_the_next_base_fee_and_respects_the_cap() {
        let f = initial(fees(2 * GWEI, GWEI), 3 * GWEI, &policy()).unwrap();
        assert_eq!(f, fees(4 * GWEI, GWEI));
        let f = initial(fees(900 * GWEI, GWEI), GWEI, &policy()).unwrap();
        assert_eq!(f.max_fee_per_gas, 500 * GWEI);
        assert_eq!(initial(fees(GWEI, GWEI), 600 * GWEI, &policy()), None);
    }

    #[test]
    fn bump_triggers() {
        let p = policy();
        let f = fees(2 * GWEI, GWEI);
        assert_eq!(
            needs_bump(f, 3 * GWEI, 10, 10, &p),
            Some(BumpReason::Underpriced)
        );
        assert_eq!(needs_bump(f, GWEI, 10, 12, &p), None);
        assert_eq!(
            needs_bump(f, GWEI, 10, 13, &p),
            Some(BumpReason::NotMined { blocks: 3 })
        );
    }

    #[test]
    fn replacement_far_above_a_jumped_base_fee() {
        // base fee jumped to 100 gwei after signing at 2 gwei: one replacement suffices
        let b = bump(
            fees(2 * GWEI, GWEI),
            fees(GWEI, GWEI),
            100 * GWEI,
            &policy(),
        );
        let Bump::Replace(r) = b else { panic!("{b:?}") };
        assert!(r.max_fee_per_gas >= 200 * GWEI);
        assert_eq!(r.max_priority_fee_per_gas, 1_200_000_000);
    }

    #[test]
    fn at_cap_when_no_room_is_left() {
        let p = policy();
        assert_eq!(
            bump(fees(450 * GWEI, GWEI), fees(GWEI, GWEI), GWEI, &p),
            Bump::AtCap
        );
        // below the cap but not by a whole bump: capped replacement is still accepted
        let Bump::Replace(r) = bump(fees(400 * GWEI, GWEI), fees(GWEI, GWEI), 300 * GWEI, &p)
        else {
            panic!()
        };
        assert_eq!(r.max_fee_per_gas, 500 * GWEI);
    }

    proptest! {
        #[test]
        fn a_replacement_raises_both_fees_by_the_bump_within_the_cap(
            max in 1u128..1_000 * GWEI,
            prio_frac in 0u128..=100,
            est_max in 0u128..1_000 * GWEI,
            est_prio in 0u128..10 * GWEI,
            base in 0u128..1_000 * GWEI,
            pct in 10u64..100,
            cap in 1u128..2_000 * GWEI,
        ) {
            let prio = max * prio_frac / 100;
            let p = FeePolicy { bump_percent: pct, max_fee_cap: cap, bump_after_blocks: 3 };
            let cur = fees(max, prio);
            match bump(cur, fees(est_max, est_prio), base, &p) {
                Bump::Replace(r) => {
                    prop_assert!(r.max_fee_per_gas <= cap);
                    prop_assert!(r.max_priority_fee_per_gas <= r.max_fee_per_gas);
                    prop_assert!(r.max_fee_per_gas * 100 >= max * (100 + pct as u128));
                    prop_assert!(r.max_priority_fee_per_gas * 100 >= prio * (100 + pct as u128));
                    prop_assert!(r.max_fee_per_gas > max);
                }
                Bump::AtCap => prop_assert!(max * (100 + pct as u128) > cap * 100 || prio > cap),
            }
        }
    }
}
