//! The DON's types for Malachite's Tendermint state machine
//! (`informalsystems-malachitebft-core-driver`): one consensus instance per execution
//! (height 1), whose value is a set of signed observations, whose members each have one
//! vote, and whose proposer of round `r` is the leader [`crate::config::leader_of`] names.
//! Signatures are the members' secp256k1 keys over the digests of [`crate::wire`]; they are
//! checked before anything reaches the driver, so the driver's own signing traits are only
//! type-level here.

use crate::wire::SignedObservation;
use alloy::primitives::{Address, B256, keccak256};
use malachitebft_core_types as mt;
use mt::{NilOrVal, Round, SignedExtension, VoteType};
use std::fmt;
use std::sync::Arc;

/// The consensus context: the types the driver is generic over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DonContext;

/// A member, as the driver names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(pub Address);

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl mt::Address for MemberId {}

/// The height: one instance per execution, always [`Height::ONE`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Height(pub u64);

impl Height {
    /// The one height of an execution's instance.
    pub const ONE: Self = Self(1);
}

impl fmt::Display for Height {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl mt::Height for Height {
    const ZERO: Self = Self(0);
    const INITIAL: Self = Self(1);
    fn increment_by(&self, n: u64) -> Self {
        Self(self.0.saturating_add(n))
    }
    fn decrement_by(&self, n: u64) -> Option<Self> {
        self.0.checked_sub(n).map(Self)
    }
    fn as_u64(&self) -> u64 {
        self.0
    }
}

/// The id of a set: [`set_id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetId(pub B256);

impl fmt::Display for SetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// `keccak256` of the observations' digests, sorted by observer: the same set in any
/// order, with any signature encoding, has one id.
pub fn set_id(observations: &[SignedObservation]) -> B256 {
    let mut sorted: Vec<&SignedObservation> = observations.iter().collect();
    sorted.sort_by_key(|o| o.observation.observer);
    let mut buf = Vec::with_capacity(32 * sorted.len());
    for o in sorted {
        buf.extend_from_slice(o.observation.digest().as_slice());
    }
    keccak256(buf)
}

/// The value the members agree on: a set of signed observations (sorted by observer).
#[derive(Debug, Clone)]
pub struct SetValue {
    /// [`set_id`] of the observations.
    pub id: B256,
    /// The observations, sorted by observer.
    pub observations: Arc<Vec<SignedObservation>>,
}

impl SetValue {
    /// The value of a set (sorted by observer).
    pub fn new(mut observations: Vec<SignedObservation>) -> Self {
        observations.sort_by_key(|o| o.observation.observer);
        Self {
            id: set_id(&observations),
            observations: Arc::new(observations),
        }
    }
}

impl PartialEq for SetValue {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for SetValue {}
impl PartialOrd for SetValue {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for SetValue {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.id.cmp(&other.id)
    }
}

impl mt::Value for SetValue {
    type Id = SetId;
    fn id(&self) -> SetId {
        SetId(self.id)
    }
}

/// A proposal of a round: its proposer, the set, and the round of the polka it carries
/// (`Round::Nil` for a fresh set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// The proposal's round.
    pub round: Round,
    /// The set.
    pub value: SetValue,
    /// The round in which the proposer saw 2f+1 prevotes for the set, if any.
    pub pol_round: Round,
    /// The proposer.
    pub proposer: MemberId,
}

impl mt::Proposal<DonContext> for Proposal {
    fn height(&self) -> Height {
        Height::ONE
    }
    fn round(&self) -> Round {
        self.round
    }
    fn value(&self) -> &SetValue {
        &self.value
    }
    fn take_value(self) -> SetValue {
        self.value
    }
    fn pol_round(&self) -> Round {
        self.pol_round
    }
    fn validator_address(&self) -> &MemberId {
        &self.proposer
    }
}

/// A prevote or precommit for a set id, or nil.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Vote {
    /// Prevote or precommit.
    pub kind: VoteType,
    /// The vote's round.
    pub round: Round,
    /// The set voted for, or nil.
    pub value: NilOrVal<SetId>,
    /// The voter.
    pub voter: MemberId,
}

impl mt::Vote<DonContext> for Vote {
    fn height(&self) -> Height {
        Height::ONE
    }
    fn round(&self) -> Round {
        self.round
    }
    fn value(&self) -> &NilOrVal<SetId> {
        &self.value
    }
    fn take_value(self) -> NilOrVal<SetId> {
        self.value
    }
    fn vote_type(&self) -> VoteType {
        self.kind
    }
    fn validator_address(&self) -> &MemberId {
        &self.voter
    }
    fn extension(&self) -> Option<&SignedExtension<DonContext>> {
        None
    }
    fn take_extension(&mut self) -> Option<SignedExtension<DonContext>> {
        None
    }
    fn extend(self, _extension: SignedExtension<DonContext>) -> Self {
        self
    }
}

/// Proposals travel whole (a set is at most a few hundred KiB): no parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoParts;

impl mt::ProposalPart<DonContext> for NoParts {
    fn is_first(&self) -> bool {
        true
    }
    fn is_last(&self) -> bool {
        true
    }
}

/// A member with one vote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validator {
    /// Its signer address (also its "public key": signatures are checked by recovery).
    pub address: MemberId,
}

impl mt::Validator<DonContext> for Validator {
    fn address(&self) -> &MemberId {
        &self.address
    }
    fn public_key(&self) -> &MemberId {
        &self.address
    }
    fn voting_power(&self) -> mt::VotingPower {
        1
    }
}

/// The members, in configuration order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators(pub Vec<Validator>);

impl mt::ValidatorSet<DonContext> for Validators {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn total_voting_power(&self) -> mt::VotingPower {
        self.0.len() as u64
    }
    fn get_by_address(&self, address: &MemberId) -> Option<&Validator> {
        self.0.iter().find(|v| v.address == *address)
    }
    fn get_by_index(&self, index: usize) -> Option<&Validator> {
        self.0.get(index)
    }
}

/// secp256k1 recoverable signatures (65 bytes `r ‖ s ‖ v`), checked by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secp256k1;

/// A 65-byte `r ‖ s ‖ v` signature.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sig(pub Vec<u8>);

impl mt::SigningScheme for Secp256k1 {
    type DecodingError = &'static str;
    type Signature = Sig;
    type PublicKey = MemberId;
    type PrivateKey = ();
    fn decode_signature(bytes: &[u8]) -> Result<Sig, &'static str> {
        if bytes.len() == 65 {
            Ok(Sig(bytes.to_vec()))
        } else {
            Err("a signature is 65 bytes")
        }
    }
    fn encode_signature(signature: &Sig) -> Vec<u8> {
        signature.0.clone()
    }
}

impl mt::Context for DonContext {
    type Address = MemberId;
    type Height = Height;
    type ProposalPart = NoParts;
    type Proposal = Proposal;
    type Validator = Validator;
    type ValidatorSet = Validators;
    type Value = SetValue;
    type Vote = Vote;
    type Extension = ();
    type SigningScheme = Secp256k1;

    fn select_proposer<'a>(
        &self,
        validator_set: &'a Validators,
        _height: Height,
        _round: Round,
    ) -> &'a Validator {
        // the host names the proposer of every round itself (`Input::NewRound`); this is
        // only reached by the driver's helpers, never with an empty set
        &validator_set.0[0]
    }

    fn new_proposal(
        &self,
        _height: Height,
        round: Round,
        value: SetValue,
        pol_round: Round,
        address: MemberId,
    ) -> Proposal {
        Proposal {
            round,
            value,
            pol_round,
            proposer: address,
        }
    }

    fn new_prevote(
        &self,
        _height: Height,
        round: Round,
        value_id: NilOrVal<SetId>,
        address: MemberId,
    ) -> Vote {
        Vote {
            kind: VoteType::Prevote,
            round,
            value: value_id,
            voter: address,
        }
    }

    fn new_precommit(
        &self,
        _height: Height,
        round: Round,
        value_id: NilOrVal<SetId>,
        address: MemberId,
    ) -> Vote {
        Vote {
            kind: VoteType::Precommit,
            round,
            value: value_id,
            voter: address,
        }
    }
}
