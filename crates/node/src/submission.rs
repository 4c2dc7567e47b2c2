//! How this node's outcomes reach the chain, decided once at start-up: simulated only
//! (no signing key), sent on its own key, or agreed with a DON and transmitted through
//! the forwarder. The round's steps take what their way needs from here.

use cresolver_don::Don;
use cresolver_submit::txm::TxManager;
use std::sync::Arc;

/// How this node's outcomes reach the chain.
pub enum Submission {
    /// No signing key: rounds run and their call is simulated, nothing is sent.
    Simulate,
    /// The node's own key sends each outcome (`resolveMarket`, or a report through the
    /// forwarder).
    Solo(Arc<TxManager>),
    /// A DON member (`[don]`): each round is agreed with the other members and the
    /// agreed report transmitted through the KeystoneForwarder on the member's key.
    Don {
        /// The membership.
        don: Arc<Don>,
        /// The transaction manager of the member's key.
        txm: Arc<TxManager>,
    },
}

impl Submission {
    /// The way the node's key and membership give: a DON member needs its key.
    pub fn new(txm: Option<Arc<TxManager>>, don: Option<Arc<Don>>) -> Option<Self> {
        match (txm, don) {
            (None, None) => Some(Self::Simulate),
            (Some(txm), None) => Some(Self::Solo(txm)),
            (Some(txm), Some(don)) => Some(Self::Don { don, txm }),
            (None, Some(_)) => None,
        }
    }

    /// The transaction manager of the node's key (`None`: it has none).
    pub fn txm(&self) -> Option<&Arc<TxManager>> {
        match self {
            Self::Simulate => None,
            Self::Solo(txm) | Self::Don { txm, .. } => Some(txm),
        }
    }

    /// The DON membership (`None`: not a member).
    pub fn don(&self) -> Option<&Arc<Don>> {
        match self {
            Self::Don { don, .. } => Some(don),
            _ => None,
        }
    }

    /// Whether the node is a DON member.
    pub fn is_don(&self) -> bool {
        matches!(self, Self::Don { .. })
    }
}
