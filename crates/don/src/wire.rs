//! The messages between members. Each is a JSON [`Envelope`] bound to (don id, config
//! version, execution, market), signed by its sender over
//! `keccak256(MESSAGE_DOMAIN ‖ body bytes)` in the [`SIGNATURE_HEADER`], and opened only
//! when the signature recovers to the member the envelope names. Observations and report
//! signatures carry signatures of their own (over their canonical digests), so that a
//! leader can forward them and every member can check them.

use alloy::primitives::{Address, B256, Bytes, Signature, keccak256};
use alloy::signers::local::PrivateKeySigner;
use cresolver_core::MarketId;
use cresolver_core::don::Observation;
use cresolver_metrics::RefuseReason;
use serde::{Deserialize, Serialize};

/// Domain tag of a message signature.
pub const MESSAGE_DOMAIN: &[u8] = b"cresolver-don-message-v1";
/// The header holding the sender's signature of the body (`0x` + 65 bytes hex).
pub const SIGNATURE_HEADER: &str = "x-cresolver-don-signature";
/// The largest message a member accepts.
pub const MAX_MESSAGE_BYTES: usize = 2 * 1024 * 1024;
/// The most observations one message may carry (the most members a DON may have).
pub const MAX_SET: usize = crate::config::MAX_MEMBERS;
/// The most workers one observation may list.
pub const MAX_WORKERS: usize = 256;
/// The largest raw report a message may carry (a 109-byte header and the report body
/// of at most [`MAX_WORKERS`] workers need about 42 KiB).
pub const MAX_REPORT_BYTES: usize = 64 * 1024;
/// The endpoint path of the member API.
pub const PATH: &str = "/don/v1/message";

/// An observation with its observer's signature over [`Observation::digest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedObservation {
    /// The observation.
    pub observation: Observation,
    /// Its observer's signature over [`Observation::digest`].
    pub signature: Bytes,
}

/// Prevote or precommit, as the wire names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VoteKind {
    /// Tendermint's first vote of a round.
    Prevote,
    /// The second: 2f+1 precommits for one set decide it.
    Precommit,
}

/// One vote of a certificate (a precommit of a commit certificate, a prevote of a polka):
/// its voter and its vote signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitVote {
    /// The voter.
    pub voter: Address,
    /// Its signature over [`vote_digest`] of (the certificate's vote kind, round, the
    /// set's id).
    pub signature: Bytes,
}

/// What a message says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Body {
    /// The sender's own signed observation.
    Observation {
        /// The observation.
        observation: SignedObservation,
    },
    /// The round's leader puts this set forward: the only message that proposes a set.
    Proposal {
        /// The consensus round.
        round: u32,
        /// The round of the 2f+1 prevotes the leader carries the set from, if any.
        pol_round: Option<u32>,
        /// The set.
        observations: Vec<SignedObservation>,
        /// The leader's signature over [`proposal_digest`].
        signature: Bytes,
    },
    /// A prevote or a precommit of a round, for a set id or nil.
    Vote {
        /// The consensus round.
        round: u32,
        /// Prevote or precommit.
        kind: VoteKind,
        /// The set's id, or `None` for nil.
        value: Option<B256>,
        /// The voter's signature over [`vote_digest`].
        signature: Bytes,
    },
    /// A set decided in `round`, proven by 2f+1 precommits, and the sender's signature of
    /// the report it makes (the forwarder digest with the DON's report context).
    Decided {
        /// The round whose precommits decided the set.
        round: u32,
        /// The decided set.
        observations: Vec<SignedObservation>,
        /// 2f+1 precommits for the set's id in `round`.
        commits: Vec<CommitVote>,
        /// The sender's signature of the report, once it built and signed it.
        report_signature: Option<Bytes>,
        /// The sender already holds f+1 report signatures: a member that also does need
        /// not answer (one that does not answers any message with its own decision).
        #[serde(default)]
        agreed: bool,
    },
    /// 2f+1 prevotes of distinct members for one set in one round (a polka), relayed: a
    /// member that holds another prevote of one of these voters in that round (an
    /// equivocator's) cannot count the polka itself, and needs it to follow a leader that
    /// carries the set from that round. The previous version refuses this message.
    Polka {
        /// The round of the prevotes.
        round: u32,
        /// The set's id.
        value: B256,
        /// At least 2f+1 prevotes for `value` in `round`, one per member.
        prevotes: Vec<CommitVote>,
    },
}

/// A message between members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The DON id, as on the forwarder.
    pub don_id: u32,
    /// The DON's config version, as on the forwarder.
    pub config_version: u32,
    /// The execution the message is about.
    pub execution_id: B256,
    /// Its market contract.
    pub market: Address,
    /// Its market id.
    pub market_id: MarketId,
    /// The member that sent (and signed) it.
    pub sender: Address,
    /// What it says.
    pub body: Body,
}

impl Envelope {
    /// The message's kind, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self.body {
            Body::Observation { .. } => "observation",
            Body::Proposal { .. } => "proposal",
            Body::Vote {
                kind: VoteKind::Prevote,
                ..
            } => "prevote",
            Body::Vote {
                kind: VoteKind::Precommit,
                ..
            } => "precommit",
            Body::Decided { .. } => "decided",
            Body::Polka { .. } => "polka",
        }
    }
}

/// Domain tag of a vote signature.
pub const VOTE_DOMAIN: &[u8] = b"cresolver-don-vote-v1";
/// Domain tag of a proposal signature.
pub const PROPOSAL_DOMAIN: &[u8] = b"cresolver-don-proposal-v1";

/// What a vote signature covers: the DON, the execution, the kind, the round and the set
/// id (or nil). A precommit's signature can be forwarded in a commit certificate.
pub fn vote_digest(
    don_id: u32,
    config_version: u32,
    exec: &B256,
    kind: VoteKind,
    round: u32,
    value: Option<&B256>,
) -> B256 {
    let mut buf = Vec::with_capacity(VOTE_DOMAIN.len() + 78);
    buf.extend_from_slice(VOTE_DOMAIN);
    buf.extend_from_slice(&don_id.to_be_bytes());
    buf.extend_from_slice(&config_version.to_be_bytes());
    buf.extend_from_slice(exec.as_slice());
    buf.push(match kind {
        VoteKind::Prevote => 1,
        VoteKind::Precommit => 2,
    });
    buf.extend_from_slice(&round.to_be_bytes());
    match value {
        Some(v) => {
            buf.push(1);
            buf.extend_from_slice(v.as_slice());
        }
        None => buf.push(0),
    }
    keccak256(buf)
}

/// What a proposal signature covers: the DON, the execution, the round, the polka round
/// and the set id.
pub fn proposal_digest(
    don_id: u32,
    config_version: u32,
    exec: &B256,
    round: u32,
    pol_round: Option<u32>,
    value: &B256,
) -> B256 {
    let mut buf = Vec::with_capacity(PROPOSAL_DOMAIN.len() + 81);
    buf.extend_from_slice(PROPOSAL_DOMAIN);
    buf.extend_from_slice(&don_id.to_be_bytes());
    buf.extend_from_slice(&config_version.to_be_bytes());
    buf.extend_from_slice(exec.as_slice());
    buf.extend_from_slice(&round.to_be_bytes());
    match pol_round {
        Some(r) => {
            buf.push(1);
            buf.extend_from_slice(&r.to_be_bytes());
        }
        None => buf.push(0),
    }
    buf.extend_from_slice(value.as_slice());
    keccak256(buf)
}

/// Why a message or a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The message or the report it carries is over its size bound.
    #[error("message over {MAX_MESSAGE_BYTES} bytes, or a report over {MAX_REPORT_BYTES}")]
    TooLarge,
    /// The message's signature header is missing or malformed.
    #[error("no {SIGNATURE_HEADER} header, or not 0x + 65 bytes hex")]
    NoSignature,
    /// A signature has the wrong shape.
    #[error(
        "a signature is not 65 bytes r ‖ s ‖ v (v = 0 or 1 for a report signature), or has a high s"
    )]
    BadSignature,
    /// The signer, the sender or an observer is not a member of this DON.
    #[error("the signature does not recover to a member")]
    NotAMember,
    /// The message is signed by another member than the sender it names.
    #[error("signed by {signer}, but the message names {named}")]
    WrongSender {
        /// The member the signature recovers to.
        signer: Address,
        /// The sender the message names.
        named: Address,
    },
    /// The body does not parse as a DON message.
    #[error("the message is not JSON of a DON message: {0}")]
    Json(String),
    /// The message is bound to another DON or configuration version.
    #[error(
        "bound to don {don_id} version {config_version}, this DON is {ours_id} version {ours_version}"
    )]
    OtherDon {
        /// The DON id the message names.
        don_id: u32,
        /// The configuration version the message names.
        config_version: u32,
        /// This DON's id.
        ours_id: u32,
        /// This DON's configuration version.
        ours_version: u32,
    },
    /// A carried observation does not match its message's DON, execution, market or
    /// sender.
    #[error("observation of {observer} does not match its message: {field} differs")]
    Unbound {
        /// The member that made the observation.
        observer: Address,
        /// What differs (`don`, `execution_id`, `market`, `observer`).
        field: &'static str,
    },
    /// A carried observation's signature is not its observer's, or a value is out of
    /// range.
    #[error("observation of {observer}: {detail}")]
    Invalid {
        /// The member that made the observation.
        observer: Address,
        /// What is wrong with it.
        detail: String,
    },
    /// A set holds two observations of one member.
    #[error("the set holds two observations of {0}")]
    DuplicateObserver(Address),
    /// A message carries more observations, or an observation more workers, than the
    /// bounds allow.
    #[error("too many observations or workers in one message")]
    TooMany,
    /// This member's key could not sign.
    #[error("could not sign: {0}")]
    Sign(String),
    /// A certificate holds two votes of one member.
    #[error("the certificate holds two votes of {0}")]
    DuplicateVoter(Address),
    /// A certificate's vote is not signed by the member it names (or not over the
    /// certificate's round and set).
    #[error("a vote of the certificate is not signed by {0}, the voter it names")]
    NotTheVoter(Address),
    /// A certificate holds fewer votes than a quorum.
    #[error("the certificate holds {got} votes, a quorum is {need}")]
    TooFewVotes {
        /// The distinct valid votes it holds.
        got: usize,
        /// A quorum of the DON.
        need: usize,
    },
}

/// 65 bytes `r ‖ s ‖ v` with v = 0 or 1, as every signature inside a message is (the
/// forwarder takes exactly that for a report signature).
fn check_signature_shape(signature: &[u8]) -> Result<(), WireError> {
    if signature.len() != 65 || signature[64] > 1 {
        return Err(WireError::BadSignature);
    }
    Ok(())
}

impl WireError {
    /// A short label for metrics.
    pub fn label(&self) -> RefuseReason {
        match self {
            WireError::TooLarge => RefuseReason::TooLarge,
            WireError::NoSignature => RefuseReason::NoSignature,
            WireError::BadSignature => RefuseReason::BadSignature,
            WireError::NotAMember => RefuseReason::NotAMember,
            WireError::WrongSender { .. } => RefuseReason::WrongSender,
            WireError::Json(_) => RefuseReason::NotAMessage,
            WireError::OtherDon { .. } => RefuseReason::OtherDon,
            WireError::Unbound { .. } => RefuseReason::UnboundObservation,
            WireError::Invalid { .. } => RefuseReason::InvalidObservation,
            WireError::DuplicateObserver(_) => RefuseReason::DuplicateObserver,
            WireError::TooMany => RefuseReason::TooMany,
            WireError::Sign(_) => RefuseReason::Sign,
            WireError::DuplicateVoter(_) => RefuseReason::DuplicateVoter,
            WireError::NotTheVoter(_) => RefuseReason::NotTheVoter,
            WireError::TooFewVotes { .. } => RefuseReason::TooFewVotes,
        }
    }
}

/// Signs `digest` as the forwarder and every member check it: 65 bytes `r ‖ s ‖ v`
/// with v = 0 or 1 (the forwarder adds 27 itself), no EIP-191 prefix.
/// Signed through libsecp256k1 (RFC 6979 nonces and low-s, as alloy's signer: the same
/// bytes).
pub fn sign_digest(signer: &PrivateKeySigner, digest: &B256) -> Result<Bytes, WireError> {
    let key = secp256k1::SecretKey::from_byte_array(signer.to_bytes().0)
        .map_err(|e| WireError::Sign(e.to_string()))?;
    let (id, rs) = secp256k1::SECP256K1
        .sign_ecdsa_recoverable(secp256k1::Message::from_digest(digest.0), &key)
        .serialize_compact();
    let v = u8::try_from(i32::from(id)).map_err(|e| WireError::Sign(e.to_string()))?;
    let mut out = Vec::with_capacity(65);
    out.extend_from_slice(&rs);
    out.push(v);
    Ok(Bytes::from(out))
}

/// The address that signed `digest`, from a 65-byte `r ‖ s ‖ v` (v 0/1 or 27/28).
pub fn recover(digest: &B256, signature: &[u8]) -> Result<Address, WireError> {
    if signature.len() != 65 {
        return Err(WireError::BadSignature);
    }
    let sig = Signature::from_raw(signature).map_err(|_| WireError::BadSignature)?;
    // one signature, one form: a high-s twin of a valid signature is refused
    if sig.normalize_s().is_some() {
        return Err(WireError::BadSignature);
    }
    sig.recover_address_from_prehash(digest)
        .map_err(|_| WireError::BadSignature)
}

/// The digest a message body is signed over.
pub fn message_digest(body: &[u8]) -> B256 {
    let mut buf = MESSAGE_DOMAIN.to_vec();
    buf.extend_from_slice(body);
    keccak256(buf)
}

/// Serializes and signs an envelope: `(body bytes, signature header value)`.
pub fn seal(env: &Envelope, signer: &PrivateKeySigner) -> Result<(Vec<u8>, String), WireError> {
    let body = serde_json::to_vec(env).map_err(|e| WireError::Json(e.to_string()))?;
    let sig = sign_digest(signer, &message_digest(&body))?;
    Ok((body, alloy::primitives::hex::encode_prefixed(sig)))
}

/// Checks a received message: [`precheck`] (cheap: size, JSON, DON, a member named,
/// bounds and shapes), then [`authenticate`] (signature recovery). Returns the envelope;
/// nothing is changed by a refused message.
pub fn open(
    body: &[u8],
    signature_header: Option<&str>,
    members: &[Address],
    don_id: u32,
    config_version: u32,
) -> Result<Envelope, WireError> {
    let env = precheck(body, members, don_id, config_version)?;
    authenticate(&env, body, signature_header, members, recover)?;
    Ok(env)
}

/// The checks that cost no signature recovery: the size, the JSON, the DON and version,
/// a member named as sender, a set of at most one observation per member, signature
/// shapes, and each observation's binding to the message.
pub fn precheck(
    body: &[u8],
    members: &[Address],
    don_id: u32,
    config_version: u32,
) -> Result<Envelope, WireError> {
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLarge);
    }
    let env: Envelope = serde_json::from_slice(body).map_err(|e| WireError::Json(e.to_string()))?;
    check_shape(&env, members, don_id, config_version)?;
    Ok(env)
}

/// The checks of a parsed message that cost no signature recovery: the DON and
/// version, a member named as sender, a set of at most one observation per member,
/// signature shapes, and each observation's binding to the message.
pub fn check_shape(
    env: &Envelope,
    members: &[Address],
    don_id: u32,
    config_version: u32,
) -> Result<(), WireError> {
    if env.don_id != don_id || env.config_version != config_version {
        return Err(WireError::OtherDon {
            don_id: env.don_id,
            config_version: env.config_version,
            ours_id: don_id,
            ours_version: config_version,
        });
    }
    if !members.contains(&env.sender) {
        return Err(WireError::NotAMember);
    }
    let set: &[SignedObservation] = match &env.body {
        Body::Observation { observation } => {
            if observation.observation.observer != env.sender {
                return Err(WireError::Unbound {
                    observer: observation.observation.observer,
                    field: "observer",
                });
            }
            std::slice::from_ref(observation)
        }
        Body::Proposal {
            observations,
            signature,
            ..
        } => {
            check_signature_shape(signature)?;
            observations
        }
        Body::Vote { signature, .. } => {
            check_signature_shape(signature)?;
            &[]
        }
        Body::Decided {
            observations,
            commits,
            report_signature,
            ..
        } => {
            if commits.len() > members.len() {
                return Err(WireError::TooMany);
            }
            for c in commits {
                check_signature_shape(&c.signature)?;
            }
            if let Some(sig) = report_signature {
                // exactly what the forwarder takes: 65 bytes, v = 0 or 1 (it adds 27)
                check_signature_shape(sig)?;
            }
            observations
        }
        Body::Polka { prevotes, .. } => {
            if prevotes.len() > members.len() {
                return Err(WireError::TooMany);
            }
            for p in prevotes {
                check_signature_shape(&p.signature)?;
            }
            &[]
        }
    };
    // a set holds at most one observation of each member: a hostile member cannot pad
    // one with copies of its own (kept per proposal, they would cost memory)
    if set.len() > MAX_SET || set.len() > members.len() {
        return Err(WireError::TooMany);
    }
    let mut observers = std::collections::HashSet::with_capacity(set.len());
    for o in set {
        if !observers.insert(o.observation.observer) {
            return Err(WireError::DuplicateObserver(o.observation.observer));
        }
        check_binding(o, env, members)?;
    }
    Ok(())
}

/// The signature recoveries: the message's own (its sender's), then each carried
/// observation's (its observer's) and its ranges, through `carried` (a member's
/// remembered recoveries: a signature carried again is recovered once).
pub fn authenticate(
    env: &Envelope,
    body: &[u8],
    signature_header: Option<&str>,
    members: &[Address],
    carried: impl Fn(&B256, &[u8]) -> Result<Address, WireError>,
) -> Result<(), WireError> {
    let sig = signature_header
        .and_then(|h| alloy::primitives::hex::decode(h.trim()).ok())
        .ok_or(WireError::NoSignature)?;
    let signer = recover(&message_digest(body), &sig)?;
    if !members.contains(&signer) {
        return Err(WireError::NotAMember);
    }
    if env.sender != signer {
        return Err(WireError::WrongSender {
            signer,
            named: env.sender,
        });
    }
    check_carried(env, members, carried)
}

/// Each carried observation: bound to the message, from a member, signed by its observer
/// (as `recover` says: secp256k1 here, the simulator's scheme there), in range; and a
/// polka's prevotes ([`check_polka`]).
pub fn check_carried(
    env: &Envelope,
    members: &[Address],
    recover: impl Fn(&B256, &[u8]) -> Result<Address, WireError>,
) -> Result<(), WireError> {
    let set: &[SignedObservation] = match &env.body {
        Body::Observation { observation } => std::slice::from_ref(observation),
        Body::Proposal { observations, .. } | Body::Decided { observations, .. } => observations,
        Body::Vote { .. } => &[],
        Body::Polka {
            round,
            value,
            prevotes,
        } => {
            let digest = vote_digest(
                env.don_id,
                env.config_version,
                &env.execution_id,
                VoteKind::Prevote,
                *round,
                Some(value),
            );
            return check_polka(&digest, prevotes, members, recover);
        }
    };
    for o in set {
        check_binding(o, env, members)?;
        let obs = &o.observation;
        let observer = obs.observer;
        if recover(&obs.digest(), &o.signature)? != observer {
            return Err(WireError::Invalid {
                observer,
                detail: "its signature is not the observer's".into(),
            });
        }
        obs.check_ranges()
            .map_err(|detail| WireError::Invalid { observer, detail })?;
    }
    Ok(())
}

/// Votes that decide among `members` members: more than two thirds (2f+1 when
/// n = 3f+1).
pub fn quorum_of(members: usize) -> usize {
    members * 2 / 3 + 1
}

/// A polka's prevotes (each signature over `digest`): each from a member, one per member,
/// each signed by the voter it names, and a quorum of them (more than two thirds of the
/// members: 2f+1 when n = 3f+1).
pub fn check_polka(
    digest: &B256,
    prevotes: &[CommitVote],
    members: &[Address],
    recover: impl Fn(&B256, &[u8]) -> Result<Address, WireError>,
) -> Result<(), WireError> {
    let mut voters = std::collections::HashSet::with_capacity(prevotes.len());
    for p in prevotes {
        if !members.contains(&p.voter) {
            return Err(WireError::NotAMember);
        }
        if !voters.insert(p.voter) {
            return Err(WireError::DuplicateVoter(p.voter));
        }
        if recover(digest, &p.signature).ok() != Some(p.voter) {
            return Err(WireError::NotTheVoter(p.voter));
        }
    }
    let need = quorum_of(members.len());
    if voters.len() < need {
        return Err(WireError::TooFewVotes {
            got: voters.len(),
            need,
        });
    }
    Ok(())
}

/// A carried observation's binding to its message and its size (no recovery).
fn check_binding(
    o: &SignedObservation,
    env: &Envelope,
    members: &[Address],
) -> Result<(), WireError> {
    let obs = &o.observation;
    let observer = obs.observer;
    let unbound = |field| WireError::Unbound { observer, field };
    if obs.don_id != env.don_id || obs.config_version != env.config_version {
        return Err(unbound("don"));
    }
    if obs.execution_id != env.execution_id {
        return Err(unbound("execution_id"));
    }
    if obs.market != env.market || obs.market_id != env.market_id {
        return Err(unbound("market"));
    }
    if obs.workers.len() > MAX_WORKERS {
        return Err(WireError::TooMany);
    }
    if !members.contains(&observer) {
        return Err(WireError::NotAMember);
    }
    if o.signature.len() != 65 {
        return Err(WireError::BadSignature);
    }
    Ok(())
}

/// Signs one's own observation.
pub fn sign_observation(
    obs: Observation,
    signer: &PrivateKeySigner,
) -> Result<SignedObservation, WireError> {
    let signature = sign_digest(signer, &obs.digest())?;
    Ok(SignedObservation {
        observation: obs,
        signature,
    })
}

#[cfg(test)]
mod tests;
