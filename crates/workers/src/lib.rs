//! Workers: the protocol a worker speaks (typed, strictly validated messages behind the
//! [`WorkerProtocol`] trait), the bounded HTTP client that carries it, the challenge
//! texts, and the concurrent fan-out of a round's two worker stages under a quorum.

pub mod a2a;
pub mod agora;
pub mod challenge;
pub mod chorus;
pub mod client;
pub mod credential;
pub mod factagora;
pub mod fanout;
pub mod ipclass;
pub mod netguard;
pub mod protocol;
pub mod registry;
pub mod roundtable;

pub use a2a::A2aProtocol;
pub use client::{StageClient, StageLimits};
pub use protocol::{
    ChallengeOutcome, ChallengeRequest, ListCut, PeerAnswer, Ratification, RatifyRequest,
    ResolveAnswer, ResolveRequest, WorkerFailure, WorkerProtocol,
};
