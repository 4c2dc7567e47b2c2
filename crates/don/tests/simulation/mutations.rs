//! The simulator can fail: for each rule the core breaks on purpose
//! ([`Mutation`]), honest members run with it, and seeds run until an invariant breaks.
//! Each must be found within its stated number of seeds.

use crate::run_seed;
use crate::scenario::{Bias, Strategy};
use cresolver_don::consensus::Mutation;

/// Every mutation, with the most seeds its hunt may take.
/// Measured (seeds to the first violation, with each hunt's bias): SkipLockCheck 1,009,
/// FVotesQuorum 1, SignBeforeDecision 1, AcceptNonLeaderProposal 1, DuplicateSigners 1,
/// NoSyncBeforeVote 3.
pub const ALL: [(Mutation, u64); 6] = [
    (Mutation::SkipLockCheck, 5_000),
    (Mutation::FVotesQuorum, 50),
    (Mutation::SignBeforeDecision, 50),
    (Mutation::AcceptNonLeaderProposal, 200),
    (Mutation::DuplicateSigners, 200),
    (Mutation::NoSyncBeforeVote, 200),
];

/// The draw a mutation's hunt uses: towards the Byzantine behaviour that exposes it.
pub fn bias(m: Mutation) -> Bias {
    let byzantine = |strategy| Bias {
        min_byzantine: 1,
        strategy: Some(strategy),
        ..Bias::default()
    };
    match m {
        // a locked member must meet a later leader's different set: leaders that
        // equivocate, and partitions and crashes that keep a decision from the others
        Mutation::SkipLockCheck => Bias {
            partition: true,
            crashes: true,
            ..byzantine(Strategy::SplitProposer)
        },
        Mutation::AcceptNonLeaderProposal => byzantine(Strategy::Usurper),
        Mutation::DuplicateSigners => byzantine(Strategy::Forger),
        Mutation::FVotesQuorum | Mutation::SignBeforeDecision => Bias::default(),
        // a vote forgotten in a power cut is voted again, maybe differently
        Mutation::NoSyncBeforeVote => Bias {
            crashes: true,
            ..Bias::default()
        },
    }
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

fn caught(m: Mutation) {
    let limit = ALL.iter().find(|(x, _)| *x == m).map_or(0, |(_, l)| *l);
    match hunt(m, bias(m), limit) {
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
    caught(Mutation::SkipLockCheck);
}

#[test]
fn f_votes_quorum_is_caught() {
    caught(Mutation::FVotesQuorum);
}

#[test]
fn sign_before_decision_is_caught() {
    caught(Mutation::SignBeforeDecision);
}

#[test]
fn accept_non_leader_proposal_is_caught() {
    caught(Mutation::AcceptNonLeaderProposal);
}

#[test]
fn duplicate_signers_is_caught() {
    caught(Mutation::DuplicateSigners);
}

#[test]
fn no_sync_before_vote_is_caught() {
    caught(Mutation::NoSyncBeforeVote);
}
