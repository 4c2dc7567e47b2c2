//! Label values that are enums, not free strings: each variant is one value of a
//! series' label, spelled once here (`as_str`), so a call site cannot invent a value.
//! Labels that are open (endpoint names, signer addresses) stay strings.

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// Declares a label enum: its variants with their label values, `as_str`, `ALL` (every
/// variant, in order) and the `EncodeLabelValue` that writes `as_str` (prometheus-client's
/// derive would write the variant's name instead).
macro_rules! label_enum {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $value:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $value, )+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.as_str(), encoder)
            }
        }
    };
}

label_enum! {
    /// What kind of failure an RPC call or head probe had (label `kind` of
    /// `cresolver_rpc_errors_total`).
    RpcErrorKind {
        /// No answer within the call's deadline.
        Timeout => "timeout",
        /// The connection could not be made, or broke.
        Connect => "connect",
        /// The endpoint refused the call for its rate limit (HTTP 429, JSON-RPC -32005).
        RateLimited => "rate_limited",
        /// Anything else.
        Other => "other",
    }
}

label_enum! {
    /// A lease event of this node (label `event` of `cresolver_lease_events_total`).
    LeaseEvent {
        /// This node claimed a round's lease.
        Claimed => "claimed",
        /// The claim took over a lease another node let expire.
        Takeover => "takeover",
        /// Another node took the lease, or it could not be renewed in time.
        Lost => "lost",
    }
}

label_enum! {
    /// What the finality watch saw of a confirmed resolution (label `event` of
    /// `cresolver_finality_events_total`).
    FinalityEvent {
        /// Its block is final.
        Finalized => "finalized",
        /// Its block left the canonical chain before it was final.
        Reorged => "reorged",
    }
}

label_enum! {
    /// Why a transaction was signed and broadcast (label `kind` of
    /// `cresolver_tx_attempts_total`).
    TxAttemptKind {
        /// The first attempt of a nonce.
        First => "first",
        /// A replacement with higher fees.
        Replacement => "replacement",
        /// The same signed transaction sent again.
        Rebroadcast => "rebroadcast",
    }
}

label_enum! {
    /// A transaction's outcome (label `kind` of `cresolver_tx_events_total`).
    TxEventKind {
        /// It was mined.
        Mined => "mined",
        /// Its nonce was used by another transaction.
        Lost => "lost",
        /// Its block was reorged away.
        Reorged => "reorged",
    }
}

label_enum! {
    /// A round's state in the store (label `state` of `cresolver_rounds_by_state`, and
    /// `stage` of `cresolver_rounds_stopped_total`); the store's stages, spelled alike.
    RoundState {
        /// A request is recorded.
        Requested => "requested",
        /// The market was read and its workers discovered.
        Discovered => "discovered",
        /// The resolve stage met its quorum.
        Answered => "answered",
        /// Every responder was challenged.
        Challenged => "challenged",
        /// The responders were scored.
        Evaluated => "evaluated",
        /// A nonce is reserved for the round's transaction.
        Submitted => "submitted",
        /// The transaction resolved the market and is deep enough.
        Confirmed => "confirmed",
        /// The transaction's block is final.
        Finalized => "finalized",
        /// The round ended without resolving the market.
        Failed => "failed",
        /// The market was already resolved by someone else.
        Skipped => "skipped",
    }
}

label_enum! {
    /// How a round's drive ended (label `outcome` of `cresolver_rounds_total`).
    RoundOutcome {
        /// Our transaction resolved the market.
        Confirmed => "confirmed",
        /// Our transaction's block is final.
        Finalized => "finalized",
        /// The round ended without resolving the market.
        Failed => "failed",
        /// The market was already resolved by someone else.
        Skipped => "skipped",
    }
}

label_enum! {
    /// Why a round stopped short of confirmed (label `reason` of
    /// `cresolver_rounds_stopped_total`).
    StopReason {
        /// The round failed.
        Failed => "failed",
        /// The round was skipped.
        Skipped => "skipped",
        /// A transient error paused it; it is retried.
        Retry => "retry",
    }
}

label_enum! {
    /// The stage of a worker call (label `stage` of `cresolver_worker_calls_total`).
    WorkerStage {
        /// The resolve request.
        Resolve => "resolve",
        /// The challenge request.
        Challenge => "challenge",
    }
}

label_enum! {
    /// How a worker call ended (label `outcome` of `cresolver_worker_calls_total`): `ok`,
    /// or the kind of the worker's failure (the workers' `WorkerFailure::kind`).
    WorkerCallOutcome {
        /// A valid reply.
        Ok => "ok",
        /// No reply in time.
        Timeout => "timeout",
        /// The connection could not be made.
        Connect => "connect",
        /// The connection was refused.
        Refused => "refused",
        /// An HTTP error status.
        HttpStatus => "http_status",
        /// A reply that is not JSON.
        InvalidJson => "invalid_json",
        /// A reply that does not fit the schema.
        Schema => "schema",
        /// A reply over the size limit.
        Oversize => "oversize",
        /// The request could not be made.
        Request => "request",
        /// Cut off once the quorum was met.
        CutAfterQuorum => "cut_after_quorum",
        /// The worker was not discovered.
        NotDiscovered => "not_discovered",
        /// The worker rejected the request.
        Rejected => "rejected",
        /// The protocol's envelope was wrong.
        Envelope => "envelope",
    }
}

label_enum! {
    /// A timed part of a round (label `stage` of `cresolver_stage_duration_seconds`).
    TimedStage {
        /// Reading the market and discovering its workers.
        Discover => "discover",
        /// The resolve and challenge requests and the evaluation.
        ResolveEvaluate => "resolve+evaluate",
        /// The DON's agreement on a report.
        DonAgreement => "don_agreement",
        /// Submitting the transaction until it is confirmed.
        Submit => "submit",
        /// A whole round's drive.
        Round => "round",
    }
}

label_enum! {
    /// Whose signed observation a DON member received (detail of
    /// `observation_received`).
    ObservationSource {
        /// This member's own.
        Own => "own",
        /// Another member's.
        Peer => "peer",
    }
}

label_enum! {
    /// Why a DON round ended undecided (detail of `leader_change`).
    LeaderChangeCause {
        /// The round timed out.
        Timeout => "timeout",
        /// This member saw the round's leader propose two sets.
        Equivocation => "equivocation",
    }
}

label_enum! {
    /// What a DON member sent two different ones of for one round (detail of
    /// `equivocation_seen`).
    EquivocationKind {
        /// Two proposals.
        Proposal => "proposal",
        /// Two votes.
        Vote => "vote",
    }
}

label_enum! {
    /// Why a peer's DON message was dropped (detail of `message_refused`).
    RefuseReason {
        /// The source address sent too much.
        SourceRate => "source_rate",
        /// The member sent too much.
        MemberRate => "member_rate",
        /// The sender has too much waiting in the execution's book.
        BookFull => "book_full",
        /// The message is over the size limit.
        TooLarge => "too_large",
        /// The message carries no signature.
        NoSignature => "no_signature",
        /// A signature is malformed or does not verify.
        BadSignature => "bad_signature",
        /// The sender is not a member.
        NotAMember => "not_a_member",
        /// The message is signed by another than its sender.
        WrongSender => "wrong_sender",
        /// The body is not a DON message.
        NotAMessage => "not_a_message",
        /// The message is of another DON.
        OtherDon => "other_don",
        /// An observation is not bound to the execution.
        UnboundObservation => "unbound_observation",
        /// An observation is invalid.
        InvalidObservation => "invalid_observation",
        /// A set holds two observations of one member.
        DuplicateObserver => "duplicate_observer",
        /// More observations or workers than the bounds allow.
        TooMany => "too_many",
        /// This member's key could not sign.
        Sign => "sign",
        /// A certificate holds two votes of one member.
        DuplicateVoter => "duplicate_voter",
        /// A certificate's vote is not signed by the voter it names.
        NotTheVoter => "not_the_voter",
        /// A certificate holds fewer votes than a quorum.
        TooFewVotes => "too_few_votes",
        /// The message is about another market.
        WrongMarket => "wrong_market",
        /// An observation this member cannot use.
        UnusableObservation => "unusable_observation",
        /// A proposal from a member that does not lead its round.
        NotTheLeader => "not_the_leader",
        /// A message of a round too far ahead.
        RoundTooFarAhead => "round_too_far_ahead",
        /// A proposal with an impossible proof-of-lock round.
        BadPolRound => "bad_pol_round",
        /// A proposal whose signature does not verify.
        BadProposalSignature => "bad_proposal_signature",
        /// A second, different proposal of a round's leader.
        EquivocatingLeader => "equivocating_leader",
        /// A proposed set this member cannot accept.
        InvalidSet => "invalid_set",
        /// A second, different vote of a member.
        EquivocatingVoter => "equivocating_voter",
        /// A vote whose signature does not verify.
        BadVoteSignature => "bad_vote_signature",
        /// A decision that conflicts with the one this member holds.
        ConflictingDecision => "conflicting_decision",
        /// A decision whose commit certificate does not hold.
        BadCommitCertificate => "bad_commit_certificate",
        /// A relayed polka whose certificate does not hold.
        BadPolkaCertificate => "bad_polka_certificate",
        /// A decided set this member cannot build a report of.
        DecidedSetUnbuildable => "decided_set_unbuildable",
        /// A report signature over another report than this member's.
        SignedAnother => "signed_another",
        /// A report signature that does not verify.
        BadReportSignature => "bad_report_signature",
    }
}

label_enum! {
    /// The forwarder's transmission state a DON member saw or caused (detail of
    /// `transmission`).
    TransmissionEvent {
        /// This member sent the report.
        Sent => "sent",
        /// The forwarder's receiver is not a valid one.
        InvalidReceiver => "invalid_receiver",
        /// The forwarder delivered the report.
        Succeeded => "succeeded",
        /// The forwarder refused the report.
        Refused => "refused",
        /// The transmission failed at the receiver.
        Failed => "failed",
    }
}

/// A DON member's consensus event (labels `event` and `detail` of
/// `cresolver_don_events_total`): the variant is the event, its field the detail.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum DonEvent {
    /// A member's signed observation.
    ObservationReceived(ObservationSource),
    /// A decided set and f+1 signatures on its report (detail `reached`).
    Agreement,
    /// A round ended undecided and the next member leads.
    LeaderChange(LeaderChangeCause),
    /// A member sent two different proposals or votes for one round.
    EquivocationSeen(EquivocationKind),
    /// A peer's message was dropped.
    MessageRefused(RefuseReason),
    /// A polka another member relayed gave this member 2f+1 prevotes (detail `relayed`).
    PolkaTaken,
    /// The consensus driver voted for a set Tendermint's rules do not allow there; this
    /// member voted nil instead (detail `nil`).
    VoteGuarded,
    /// The forwarder's transmission state.
    Transmission(TransmissionEvent),
    /// The forwarder does not know a member's signing key (detail
    /// `forwarder_unknown_signer`).
    SignatureRefused,
}

impl DonEvent {
    /// The `event` label value.
    pub fn event(self) -> &'static str {
        match self {
            Self::ObservationReceived(_) => "observation_received",
            Self::Agreement => "agreement",
            Self::LeaderChange(_) => "leader_change",
            Self::EquivocationSeen(_) => "equivocation_seen",
            Self::MessageRefused(_) => "message_refused",
            Self::PolkaTaken => "polka_taken",
            Self::VoteGuarded => "vote_guarded",
            Self::Transmission(_) => "transmission",
            Self::SignatureRefused => "signature_refused",
        }
    }

    /// The `detail` label value.
    pub fn detail(self) -> &'static str {
        match self {
            Self::ObservationReceived(d) => d.as_str(),
            Self::Agreement => "reached",
            Self::LeaderChange(d) => d.as_str(),
            Self::EquivocationSeen(d) => d.as_str(),
            Self::MessageRefused(d) => d.as_str(),
            Self::PolkaTaken => "relayed",
            Self::VoteGuarded => "nil",
            Self::Transmission(d) => d.as_str(),
            Self::SignatureRefused => "forwarder_unknown_signer",
        }
    }

    /// Every event with every detail. A new variant is a compile error in the match
    /// until it is handled; list it in `kinds` too.
    pub fn all() -> Vec<Self> {
        let kinds = [
            Self::ObservationReceived(ObservationSource::Own),
            Self::Agreement,
            Self::LeaderChange(LeaderChangeCause::Timeout),
            Self::EquivocationSeen(EquivocationKind::Proposal),
            Self::MessageRefused(RefuseReason::SourceRate),
            Self::PolkaTaken,
            Self::VoteGuarded,
            Self::Transmission(TransmissionEvent::Sent),
            Self::SignatureRefused,
        ];
        let mut all = Vec::new();
        for kind in kinds {
            match kind {
                Self::ObservationReceived(_) => all.extend(
                    ObservationSource::ALL
                        .iter()
                        .map(|&d| Self::ObservationReceived(d)),
                ),
                Self::LeaderChange(_) => all.extend(
                    LeaderChangeCause::ALL
                        .iter()
                        .map(|&d| Self::LeaderChange(d)),
                ),
                Self::EquivocationSeen(_) => all.extend(
                    EquivocationKind::ALL
                        .iter()
                        .map(|&d| Self::EquivocationSeen(d)),
                ),
                Self::MessageRefused(_) => {
                    all.extend(RefuseReason::ALL.iter().map(|&d| Self::MessageRefused(d)))
                }
                Self::Transmission(_) => all.extend(
                    TransmissionEvent::ALL
                        .iter()
                        .map(|&d| Self::Transmission(d)),
                ),
                Self::Agreement | Self::PolkaTaken | Self::VoteGuarded | Self::SignatureRefused => {
                    all.push(kind)
                }
            }
        }
        all
    }
}

#[cfg(test)]
mod tests;
