//! What the chain says about our attempts: their receipts, whether the block of one is
//! canonical (then the nonce is closed as mined there), whether any is in a block.

use super::{TxError, TxManager, crash_point};
use alloy::eips::BlockNumberOrTag;
use alloy::primitives::B256;
use alloy::providers::Provider;
use alloy::rpc::types::TransactionReceipt;
use cresolver_store::{AttemptRecord, KeyRef, MinedAt, NonceState};

impl TxManager {
    pub(super) async fn receipt(&self, tx: B256) -> Result<Option<TransactionReceipt>, TxError> {
        self.provider
            .get_transaction_receipt(tx)
            .await
            .map_err(|e| {
                TxError::Rpc(cresolver_chain::RpcFailure::new(
                    "eth_getTransactionReceipt",
                    e,
                ))
            })
    }

    /// The newest receipt among the attempts.
    pub(super) async fn mined_attempt(
        &self,
        attempts: &[AttemptRecord],
    ) -> Result<Option<(AttemptRecord, TransactionReceipt)>, TxError> {
        for a in attempts.iter().rev() {
            if let Some(r) = self.receipt(a.tx_hash).await? {
                return Ok(Some((a.clone(), r)));
            }
        }
        Ok(None)
    }

    /// When receipt `r` of attempt `tx` (in block `block`) is on the canonical chain,
    /// closes `key`'s `nonce` as mined there and says so; `false` when the block changed
    /// under it (look again at the next head). `known`: a canonical block's number and
    /// hash read along with the receipt (no second read when it is the receipt's block).
    pub(super) async fn close_if_canonical(
        &self,
        key: KeyRef,
        nonce: u64,
        tx: B256,
        block: u64,
        r: &TransactionReceipt,
        known: Option<(u64, B256)>,
    ) -> Result<bool, TxError> {
        let canonical = match known {
            Some((n, hash)) if n == block => Some(hash),
            _ => self
                .provider
                .get_block_by_number(block.into())
                .await
                .map_err(|e| {
                    TxError::Rpc(cresolver_chain::RpcFailure::new("eth_getBlockByNumber", e))
                })?
                .map(|b| b.header.hash),
        };
        let Some(block_hash) = canonical.filter(|h| Some(*h) == r.block_hash) else {
            return Ok(false);
        };
        self.store
            .finish_nonce(
                key,
                nonce,
                NonceState::Mined,
                Some(MinedAt {
                    tx,
                    block,
                    block_hash,
                }),
                None,
            )
            .await?;
        crash_point("mined");
        Ok(true)
    }

    /// The canonical chain's newest block: its number and hash.
    pub(super) async fn latest_block(&self) -> Result<Option<(u64, B256)>, TxError> {
        Ok(self
            .provider
            .get_block_by_number(BlockNumberOrTag::Latest)
            .await
            .map_err(|e| TxError::Rpc(cresolver_chain::RpcFailure::new("eth_getBlockByNumber", e)))?
            .map(|b| (b.header.number, b.header.hash)))
    }

    /// Whether a node knows any attempt as included in a block (even without a receipt).
    pub(super) async fn any_attempt_in_a_block(
        &self,
        attempts: &[AttemptRecord],
    ) -> Result<bool, TxError> {
        for a in attempts.iter().rev() {
            let tx = self
                .provider
                .get_transaction_by_hash(a.tx_hash)
                .await
                .map_err(|e| {
                    TxError::Rpc(cresolver_chain::RpcFailure::new(
                        "eth_getTransactionByHash",
                        e,
                    ))
                })?;
            if tx.is_some_and(|t| t.block_number.is_some()) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The key's count of mined transactions as deep as a receipt must be to close a
    /// nonce (`confirmations` below `head`): a transaction of another process in a newer
    /// block can still be reorged out, and ours back in.
    pub(super) async fn deep_count(
        &self,
        signer: alloy::primitives::Address,
        head: u64,
    ) -> Result<u64, TxError> {
        let deep = match self.cfg.confirmations {
            0 => BlockNumberOrTag::Latest,
            n => BlockNumberOrTag::Number(head.saturating_sub(n)),
        };
        self.provider
            .get_transaction_count(signer)
            .block_id(deep.into())
            .await
            .map_err(|e| {
                TxError::Rpc(cresolver_chain::RpcFailure::new(
                    "eth_getTransactionCount",
                    e,
                ))
            })
    }
}
