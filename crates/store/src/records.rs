//! The records the stores keep besides a round's own: the transaction manager's
//! reserved nonces ([`NonceRecord`], one per payload a key signs) and their signed
//! attempts ([`AttemptRecord`]), a round's earlier attempts ([`PastAttempt`]) and the
//! rounds the finality watch follows ([`Watched`]).

use crate::{MarketId, RoundKey, Stage};
use alloy_primitives::{Address, B256, Bytes};
use serde::Serialize;

/// Where a reserved nonce is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NonceState {
    /// Reserved for a payload; attempts may or may not exist yet.
    Pending,
    /// One of our attempts was mined and is `confirmations` deep.
    Mined,
    /// The chain consumed the nonce with a transaction that is none of our attempts.
    Lost,
}

impl NonceState {
    /// The state's name as stored and shown (`pending`, `mined`, `lost`).
    pub fn as_str(self) -> &'static str {
        match self {
            NonceState::Pending => "pending",
            NonceState::Mined => "mined",
            NonceState::Lost => "lost",
        }
    }

    /// Every state.
    pub const ALL: [NonceState; 3] = [NonceState::Pending, NonceState::Mined, NonceState::Lost];
}

/// A signing key on a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyRef {
    /// The key's address.
    pub signer: Address,
    /// The chain it signs for.
    pub chain_id: u64,
}

/// What a nonce was reserved for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TxPayload {
    /// The market contract of the round the transaction resolves.
    pub market: Address,
    /// The market's id in its contract.
    pub market_id: MarketId,
    /// The contract the transaction calls.
    pub to: Address,
    /// The transaction's input.
    pub calldata: Bytes,
    /// The gas limit every attempt is signed with, in gas units.
    pub gas_limit: u64,
}

/// A reserved nonce.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NonceRecord {
    /// The nonce.
    pub nonce: u64,
    /// Where it is: pending, mined or lost.
    pub state: NonceState,
    /// What it was reserved for.
    #[serde(flatten)]
    pub payload: TxPayload,
    /// Our attempt that was mined at it.
    pub mined_tx: Option<B256>,
    /// The block that attempt is in.
    pub mined_block: Option<u64>,
    /// The hash of the block the mined attempt is in (how the finality watch tells that
    /// block is still canonical; `None` for nonces mined before this was recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mined_hash: Option<B256>,
    /// Why it ended as it did (a lost nonce says what took it).
    pub detail: Option<String>,
    /// When it was reserved, in unix seconds.
    pub created_at: u64,
    /// When it last changed, in unix seconds.
    pub updated_at: u64,
}

/// Where one of our attempts was mined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinedAt {
    /// The attempt's transaction hash.
    pub tx: B256,
    /// The number of the block it is in.
    pub block: u64,
    /// The hash of that block.
    pub block_hash: B256,
}

/// One signed attempt at a nonce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptRecord {
    /// The nonce it is signed at.
    pub nonce: u64,
    /// 0 for the first attempt, +1 for each replacement.
    pub seq: u32,
    /// Its transaction hash.
    pub tx_hash: B256,
    /// The signed transaction, as broadcast (EIP-2718 bytes).
    #[serde(skip)]
    pub raw: Bytes,
    /// Its EIP-1559 max fee, in wei per gas.
    pub max_fee_per_gas: u128,
    /// Its EIP-1559 priority fee (tip), in wei per gas.
    pub max_priority_fee_per_gas: u128,
    /// Its gas limit, in gas units.
    pub gas_limit: u64,
    /// The chain head when it was first broadcast (`None`: stored, not yet sent).
    pub sent_block: Option<u64>,
    /// When it was signed, in unix seconds.
    pub created_at: u64,
}

/// A round's earlier attempt, kept when a new request started another one.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PastAttempt {
    /// Its number: 1 for the market's first attempt.
    pub attempt: u32,
    /// The state it ended in.
    pub state: Stage,
    /// Why it ended there, when a reason was recorded.
    #[schema(required = true)]
    pub reason: Option<String>,
    /// The transaction of the request log that started it (`None`: a manual request).
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub request_tx: Option<B256>,
    /// The block it was judged at.
    #[schema(required = true)]
    pub request_block: Option<u64>,
    /// Its newest submission transaction, when it signed one.
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub submit_tx: Option<B256>,
    /// Its transcript, when it got that far.
    #[schema(required = true, value_type = Option<Object>)]
    pub outcome: Option<serde_json::Value>,
    /// When the next attempt replaced it, in unix seconds.
    pub ended_at: u64,
}

/// A `confirmed` round that the finality watch follows: the round and, when the store
/// holds it, the nonce whose mined attempt resolved the market.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The market contract.
    pub market: Address,
    /// The market's id in its contract.
    pub market_id: MarketId,
    /// The round's current attempt.
    pub attempt: u32,
    /// The key and nonce of the mined transaction, with where it was mined.
    pub mined: Option<(KeyRef, u64, MinedAt)>,
    /// The block a legacy record was mined in, without its hash.
    pub mined_block: Option<u64>,
}

impl TxPayload {
    /// The round the transaction resolves.
    pub fn key(&self) -> RoundKey {
        RoundKey {
            market: self.market,
            id: self.market_id,
        }
    }
}

impl Watched {
    /// The round.
    pub fn key(&self) -> RoundKey {
        RoundKey {
            market: self.market,
            id: self.market_id,
        }
    }
}
