//! cresolver-workers: the protocol a worker speaks (typed, strictly validated messages
//! behind the [`WorkerProtocol`] trait; A2A and four neighbouring protocols), the bounded
//! HTTP client that carries it, the network guard and the rule of which addresses are
//! public (`ipclass`), the challenge texts, and the concurrent fan-out of a round's two
//! worker stages under a quorum. It knows no chain and no store.

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
pub use client::{StageClient, StageConfig};
pub use protocol::{
    ChallengeOutcome, ChallengeRequest, ListCut, PeerAnswer, Ratification, RatifyRequest,
    ResolveAnswer, ResolveRequest, WorkerFailure, WorkerProtocol,
};
