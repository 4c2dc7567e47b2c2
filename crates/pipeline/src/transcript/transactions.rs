//! A round's submission history as the transcript, `GET /rounds/{id}` and `cresolver
//! rounds show` record it: each reserved nonce with its state and every signed attempt.

use alloy::primitives::{Address, B256};
use serde::{Deserialize, Serialize};

/// One reserved nonce of a round's submission, as the transcript, `GET /rounds/{id}`
/// and `cresolver rounds show` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TransactionRecord {
    /// The nonce of the resolver key.
    pub nonce: u64,
    /// Where the nonce is (pending, mined, replaced by another transaction …).
    pub state: cresolver_store::NonceState,
    /// The contract called.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub to: Address,
    /// The gas limit the call was signed with.
    pub gas_limit: u64,
    /// The attempt that was mined, if any.
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub mined_tx: Option<B256>,
    /// The block it was mined in.
    #[schema(required = true)]
    pub mined_block: Option<u64>,
    /// Why the nonce ended as it did, when something went wrong.
    #[schema(required = true)]
    pub detail: Option<String>,
    /// Unix seconds the nonce was reserved.
    pub reserved_at: u64,
    /// Every signed attempt at the nonce, in order.
    pub attempts: Vec<AttemptView>,
}

/// One signed attempt at a nonce (fees in wei, as decimal strings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttemptView {
    /// The attempt's number at its nonce (1 for the first).
    pub seq: u32,
    /// The signed transaction's hash.
    #[schema(value_type = String, pattern = "^0x[0-9a-f]{64}$")]
    pub tx_hash: B256,
    /// EIP-1559 max fee per gas, in wei.
    #[serde(with = "decimal")]
    #[schema(value_type = String, pattern = "^[0-9]+$")]
    pub max_fee_per_gas: u128,
    /// EIP-1559 max priority fee per gas, in wei.
    #[serde(with = "decimal")]
    #[schema(value_type = String, pattern = "^[0-9]+$")]
    pub max_priority_fee_per_gas: u128,
    /// The head block when it was first broadcast (`None`: never broadcast).
    #[schema(required = true)]
    pub sent_block: Option<u64>,
    /// Unix seconds it was signed.
    pub signed_at: u64,
    /// What became of it.
    pub state: AttemptState,
}

/// What became of a signed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttemptState {
    /// Mined: the nonce's transaction.
    Mined,
    /// Broadcast and pending.
    Sent,
    /// Signed and stored, not broadcast yet.
    Stored,
    /// Replaced by a later attempt (or the nonce ended otherwise).
    Replaced,
}

/// Wei amounts as decimal strings (they exceed what JSON numbers carry exactly).
mod decimal {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl TransactionRecord {
    /// A round's submission history as stored by the transaction manager: each
    /// reserved nonce with its state and every signed attempt.
    pub fn of_history(
        history: &[(
            cresolver_store::NonceRecord,
            Vec<cresolver_store::AttemptRecord>,
        )],
    ) -> Vec<TransactionRecord> {
        history
            .iter()
            .map(|(n, attempts)| TransactionRecord {
                nonce: n.nonce,
                state: n.state,
                to: n.payload.to,
                gas_limit: n.payload.gas_limit,
                mined_tx: n.mined_tx,
                mined_block: n.mined_block,
                detail: n.detail.clone(),
                reserved_at: n.created_at,
                attempts: attempts
                    .iter()
                    .map(|a| AttemptView {
                        seq: a.seq,
                        tx_hash: a.tx_hash,
                        max_fee_per_gas: a.max_fee_per_gas,
                        max_priority_fee_per_gas: a.max_priority_fee_per_gas,
                        sent_block: a.sent_block,
                        signed_at: a.created_at,
                        state: if n.mined_tx == Some(a.tx_hash) {
                            AttemptState::Mined
                        } else if n.state == cresolver_store::NonceState::Pending {
                            if a.sent_block.is_some() {
                                AttemptState::Sent
                            } else {
                                AttemptState::Stored
                            }
                        } else {
                            AttemptState::Replaced
                        },
                    })
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::Bytes;
    use cresolver_store::{AttemptRecord, NonceRecord, NonceState, TxPayload};

    fn history(
        state: NonceState,
        mined: bool,
        sent: bool,
    ) -> Vec<(NonceRecord, Vec<AttemptRecord>)> {
        let tx = B256::repeat_byte(7);
        let n = NonceRecord {
            nonce: 4,
            state,
            payload: TxPayload {
                market: Address::repeat_byte(1),
                market_id: cresolver_core::MarketId::from(9u64),
                to: Address::repeat_byte(2),
                calldata: Bytes::from_static(&[1, 2]),
                gas_limit: 300_000,
            },
            mined_tx: mined.then_some(tx),
            mined_block: mined.then_some(12),
            mined_hash: None,
            detail: None,
            created_at: 1_700_000_000,
            updated_at: 1_700_000_001,
        };
        let a = AttemptRecord {
            nonce: 4,
            seq: 1,
            tx_hash: tx,
            raw: Bytes::new(),
            max_fee_per_gas: 30_000_000_000_000_000_000_000,
            max_priority_fee_per_gas: 2,
            gas_limit: 300_000,
            sent_block: sent.then_some(11),
            created_at: 1_700_000_000,
        };
        vec![(n, vec![a])]
    }

    #[test]
    fn the_json_keeps_its_shape_and_reads_back() {
        let records = TransactionRecord::of_history(&history(NonceState::Mined, true, true));
        let v = serde_json::to_value(&records).unwrap();
        assert_eq!(
            v,
            serde_json::json!([{
                "nonce": 4, "state": "mined", "to": Address::repeat_byte(2),
                "gas_limit": 300_000, "mined_tx": B256::repeat_byte(7), "mined_block": 12,
                "detail": null, "reserved_at": 1_700_000_000u64,
                "attempts": [{
                    "seq": 1, "tx_hash": B256::repeat_byte(7),
                    "max_fee_per_gas": "30000000000000000000000",
                    "max_priority_fee_per_gas": "2",
                    "sent_block": 11, "signed_at": 1_700_000_000u64, "state": "mined"
                }]
            }])
        );
        let back: Vec<TransactionRecord> = serde_json::from_value(v).unwrap();
        assert_eq!(back, records);
    }

    #[test]
    fn an_attempt_is_sent_stored_or_replaced_by_its_nonce() {
        let state =
            |s, sent| TransactionRecord::of_history(&history(s, false, sent))[0].attempts[0].state;
        assert_eq!(state(NonceState::Pending, true), AttemptState::Sent);
        assert_eq!(state(NonceState::Pending, false), AttemptState::Stored);
        assert_eq!(state(NonceState::Lost, true), AttemptState::Replaced);
    }
}
