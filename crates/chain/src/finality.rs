//! Where the chain's finality stands: the `finalized` block where the endpoint serves
//! that tag, else the head less a per-chain finality depth. A transaction in a block at
//! or below it cannot be reorged away; above it, it can, however many confirmations it
//! has (`confirmations` only says when a result is reported done).

use alloy::eips::BlockNumberOrTag;
use alloy::primitives::B256;
use alloy::providers::{DynProvider, Provider};
use serde::Serialize;

/// How the final block was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FinalitySource {
    /// The endpoint's `finalized` block tag.
    Tag,
    /// `head - finality_depth` (the endpoint does not serve the tag).
    Depth,
}

/// The newest final block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Finalized {
    /// Its block number.
    pub number: u64,
    /// How it was found.
    pub source: FinalitySource,
    /// The head it was read with.
    pub head: u64,
}

/// The finality depth of a chain whose endpoint does not serve the `finalized` tag
/// (`chain.finality_depth` overrides it). Conservative: a depth is only a guess at
/// finality, the tag is the chain's word.
///
/// | chains | depth |
/// |---|---|
/// | Ethereum mainnet and its testnets (1, 11155111, 17000, 560048) | 64 (two epochs) |
/// | Polygon PoS (137, 80002) | 500 |
/// | BNB Smart Chain (56, 97) | 50 |
/// | OP Stack: Optimism, Base (10, 8453, 11155420, 84532) | 900 (~30 min of 2 s blocks) |
/// | Arbitrum (42161, 421614) | 4800 (~20 min of 0.25 s blocks) |
/// | Avalanche C-Chain (43114, 43113) | 1 (single-slot finality) |
/// | local dev chains (31337, 1337) | 2 |
/// | any other chain | 64 |
pub fn default_finality_depth(chain_id: u64) -> u64 {
    match chain_id {
        1 | 11155111 | 17000 | 560048 => 64,
        137 | 80002 => 500,
        56 | 97 => 50,
        10 | 8453 | 11155420 | 84532 => 900,
        42161 | 421614 => 4800,
        43114 | 43113 => 1,
        31337 | 1337 => 2,
        _ => 64,
    }
}

/// Reads the newest final block: the `finalized` tag, or `head - depth` when the
/// endpoint does not serve it (an error or no block for the tag). An error only when the
/// head cannot be read either.
pub async fn finalized(provider: &DynProvider, depth: u64) -> Result<Finalized, crate::RpcFailure> {
    let head = provider
        .get_block_number()
        .await
        .map_err(|e| crate::RpcFailure::new("eth_blockNumber", e))?;
    match provider
        .get_block_by_number(BlockNumberOrTag::Finalized)
        .await
    {
        // a tag ahead of the head read just before is a newer head: cap it
        Ok(Some(b)) => Ok(Finalized {
            number: b.header.number.min(head),
            source: FinalitySource::Tag,
            head,
        }),
        Ok(None) | Err(_) => Ok(Finalized {
            number: head.saturating_sub(depth),
            source: FinalitySource::Depth,
            head,
        }),
    }
}

/// The hash of canonical block `n` (`None`: the endpoint has no such block).
pub async fn canonical_hash(
    provider: &DynProvider,
    n: u64,
) -> Result<Option<B256>, crate::RpcFailure> {
    provider
        .get_block_by_number(BlockNumberOrTag::Number(n))
        .await
        .map(|b| b.map(|b| b.header.hash))
        .map_err(|e| crate::RpcFailure::new(format!("eth_getBlockByNumber({n})"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depths_by_chain() {
        assert_eq!(default_finality_depth(1), 64);
        assert_eq!(default_finality_depth(31337), 2);
        assert_eq!(default_finality_depth(42161), 4800);
        assert_eq!(default_finality_depth(999_999), 64);
    }
}
