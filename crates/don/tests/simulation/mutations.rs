//! The simulator can fail: for each rule the core breaks on purpose
//! ([`Mutation`]), honest members run with it, and seeds run until an invariant breaks.
//! Each must be found within its stated number of seeds.

use crate::run_seed;
use crate::scenario::Bias;
use cresolver_don::consensus::Mutation;

/// Every mutation, with the most seeds its hunt may take.
pub const ALL: [(Mutation, u64); 5] = [
    (Mutation::SkipLockCheck, 20_000),
    (Mutation::FVotesQuorum, 1_000),
    (Mutation::SignBeforeDecision, 1_000),
    (Mutation::AcceptNonLeaderProposal, 20_000),
    (Mutation::DuplicateSigners, 20_000),
];

/// The draw a mutation's hunt uses.
pub fn bias(m: Mutation) -> Bias {
    let _ = m;
    Bias::default()
}

/// Runs seeds until the mutation breaks an invariant the same seed holds without it;
/// returns the seed and the violation.
fn hunt(m: Mutation, bias: Bias, limit: u64) -> Option<(u64, String)> {
    (0..limit).find_map(|seed| {
        let v = run_seed(seed, Some(m), bias, false).err()?;
        match run_seed(seed, None, bias, false) {
            Ok(_) => Some((seed, v)),
            Err(w) => {
                println!("{m:?}: seed {seed} fails without the mutation too ({w}): not counted");
                None
            }
        }
    })
}

fn caught(m: Mutation, bias: Bias, limit: u64) {
    match hunt(m, bias, limit) {
        Some((seed, v)) => {
            println!("{m:?}: caught at seed {seed} ({} seeds): {v}", seed + 1);
            println!(
                "replay with: CRESOLVER_SIM_MUTATION={m:?} CRESOLVER_SIM_SEED={seed} cargo test -p cresolver-don --test simulation replay_one_seed -- --nocapture"
            );
        }
        None => panic!("{m:?}: no violation in {limit} seeds"),
    }
}

#[test]
fn skip_lock_check_is_caught() {
    caught(Mutation::SkipLockCheck, Bias::default(), 20_000);
}

#[test]
fn f_votes_quorum_is_caught() {
    caught(Mutation::FVotesQuorum, Bias::default(), 1_000);
}

#[test]
fn sign_before_decision_is_caught() {
    caught(Mutation::SignBeforeDecision, Bias::default(), 1_000);
}

#[test]
fn accept_non_leader_proposal_is_caught() {
    caught(Mutation::AcceptNonLeaderProposal, Bias::default(), 20_000);
}

#[test]
fn duplicate_signers_is_caught() {
    caught(Mutation::DuplicateSigners, Bias::default(), 20_000);
}
