//! The capability around done rounds ([`Finality`]: the finality watch and new
//! attempts, no lease needed).

use crate::RoundKey;
use crate::{PastAttempt, Stage, StoreError, Watched};
use alloy_primitives::B256;

/// Done rounds: the finality watch over `confirmed` rounds, and new attempts of a done
/// round the chain says is unresolved. No lease is needed: each change is conditional
/// on the state it leaves. Used by the node's finality watch, and by the HTTP API and
/// the CLI (a round's earlier attempts).
#[async_trait::async_trait]
pub trait Finality: Send + Sync {
    /// Starts a new attempt of a round that is still in the done state `from`: the
    /// current attempt is archived ([`Self::past_attempts`]), the round is `requested`
    /// again with `request` (`None`: manual). `false` when the round left `from`.
    async fn renew_round(
        &self,
        round: RoundKey,
        workflow: &str,
        request: Option<(B256, u64)>,
        from: Stage,
    ) -> Result<bool, StoreError>;
    /// Reopens a `confirmed` round whose transaction left the canonical chain at the
    /// submission stage (its mined nonce pending again, its attempts to be re-sent).
    /// `false` when the round is not `confirmed` any more.
    async fn reopen_submission(
        &self,
        round: RoundKey,
        reason: &str,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError>;
    /// `confirmed` → `finalized`; `false` when the round is not `confirmed` any more.
    async fn set_finalized(
        &self,
        round: RoundKey,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError>;
    /// The `confirmed` rounds, with the nonce that resolved each.
    async fn awaiting_finality(&self, limit: usize) -> Result<Vec<Watched>, StoreError>;
    /// A round's earlier attempts, oldest first.
    async fn past_attempts(&self, round: RoundKey) -> Result<Vec<PastAttempt>, StoreError>;
}
