//! Report encoding: the CRE report body `abi.encode(uint256,address[],uint256[],uint8[],bool)`,
//! and the KeystoneForwarder `rawReport` envelope around it (metadata layout of
//! Chainlink's forwarder 1.0.0: the receiver gets `rawReport[45:109]` and `rawReport[109:]`).

use crate::MarketId;
use alloy_primitives::{Address, B256, Bytes, FixedBytes, U256};
use alloy_sol_types::{SolType, sol_data};
use sha2::{Digest, Sha256};

/// `(uint256, address[], uint256[], uint8[], bool)` — spelled with explicit Solidity
/// types: a plain `Vec<u8>` would encode as `bytes`, not `uint8[]`.
type ReportTuple = (
    sol_data::Uint<256>,
    sol_data::Array<sol_data::Address>,
    sol_data::Array<sol_data::Uint<256>>,
    sol_data::Array<sol_data::Uint<8>>,
    sol_data::Bool,
);

/// Encodes the report body exactly as `abi.encode(marketId, workers, weights, dimScores, resolution)`.
pub fn encode_report(
    market_id: MarketId,
    workers: &[Address],
    weights: &[U256],
    dim_scores: &[u8],
    resolution: bool,
) -> Bytes {
    let t = (
        market_id.get(),
        workers.to_vec(),
        weights.to_vec(),
        dim_scores.to_vec(),
        resolution,
    );
    Bytes::from(ReportTuple::abi_encode_params(&t))
}

/// A decoded report body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The market the report resolves.
    pub market_id: MarketId,
    /// Every registered worker, in registration order.
    pub workers: Vec<Address>,
    /// Each worker's reward weight, in the order of `workers`.
    pub weights: Vec<U256>,
    /// The 3 on-chain scores of each worker in turn (`res, src, depth` per worker), each 0–100.
    pub dim_scores: Vec<u8>,
    /// The market's outcome: `true` for YES.
    pub resolution: bool,
}

/// Why report bytes cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The body is not a valid ABI encoding of the report tuple.
    #[error("report bytes do not decode as (uint256,address[],uint256[],uint8[],bool): {0}")]
    Decode(String),
    /// The `rawReport` is shorter than the forwarder's 109-byte header.
    #[error("rawReport is {0} bytes; the forwarder layout needs at least 109")]
    TooShort(usize),
}

/// Decodes (and validates) report bytes.
pub fn decode_report(bytes: &[u8]) -> Result<Report, ReportError> {
    let (market_id, workers, weights, dim_scores, resolution) =
        ReportTuple::abi_decode_params_validate(bytes)
            .map_err(|e| ReportError::Decode(e.to_string()))?;
    Ok(Report {
        market_id: market_id.into(),
        workers,
        weights,
        dim_scores,
        resolution,
    })
}

/// The identity a report is delivered under (the 64-byte metadata the receiver sees).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportMetadata {
    /// The workflow's id.
    pub workflow_id: B256,
    /// 10 bytes: ASCII of the first 10 hex characters of sha256(workflow name).
    pub workflow_name: FixedBytes<10>,
    /// The address that owns the workflow.
    pub workflow_owner: Address,
    /// The report's id, which tells the receiver what kind of report it is.
    pub report_id: FixedBytes<2>,
}

impl ReportMetadata {
    /// Builds the metadata, deriving `workflowName` from the name as Chainlink does.
    pub fn new(workflow_id: B256, name: &str, workflow_owner: Address, report_id: [u8; 2]) -> Self {
        Self {
            workflow_id,
            workflow_name: workflow_name_bytes(name),
            workflow_owner,
            report_id: FixedBytes(report_id),
        }
    }

    /// `workflowId 32 | workflowName 10 | workflowOwner 20 | reportId 2` = 64 bytes.
    pub fn encode(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        out[0..32].copy_from_slice(self.workflow_id.as_slice());
        out[32..42].copy_from_slice(self.workflow_name.as_slice());
        out[42..62].copy_from_slice(self.workflow_owner.as_slice());
        out[62..64].copy_from_slice(self.report_id.as_slice());
        out
    }
}

/// ASCII of the first 10 hex characters of sha256(name).
pub fn workflow_name_bytes(name: &str) -> FixedBytes<10> {
    let digest = Sha256::digest(name.as_bytes());
    let hex = alloy_primitives::hex::encode(digest);
    let mut out = [0u8; 10];
    out.copy_from_slice(&hex.as_bytes()[..10]);
    FixedBytes(out)
}

/// The forwarder header fields that are not part of the receiver's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionHeader {
    /// The `rawReport` layout version (1).
    pub version: u8,
    /// The id of the workflow execution that produced the report.
    pub workflow_execution_id: B256,
    /// When the report was made (unix seconds).
    pub timestamp: u32,
    /// The DON that signed the report.
    pub don_id: u32,
    /// The version of that DON's configuration.
    pub don_config_version: u32,
}

/// Builds `rawReport`: version 1 | execution id 32 | timestamp 4 | don id 4 | config version 4 |
/// metadata 64 | report body.
pub fn build_raw_report(header: &ExecutionHeader, metadata: &ReportMetadata, body: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(109 + body.len());
    out.push(header.version);
    out.extend_from_slice(header.workflow_execution_id.as_slice());
    out.extend_from_slice(&header.timestamp.to_be_bytes());
    out.extend_from_slice(&header.don_id.to_be_bytes());
    out.extend_from_slice(&header.don_config_version.to_be_bytes());
    out.extend_from_slice(&metadata.encode());
    out.extend_from_slice(body);
    Bytes::from(out)
}

/// Splits a `rawReport` the way the forwarder does: `(metadata, report)`.
pub fn split_raw_report(raw: &[u8]) -> Result<(&[u8], &[u8]), ReportError> {
    if raw.len() < 109 {
        return Err(ReportError::TooShort(raw.len()));
    }
    Ok((&raw[45..109], &raw[109..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::address;

    #[test]
    fn report_round_trips_and_has_params_layout() {
        let w = [
            address!("0x00000000000000000000000000000000000000aa"),
            address!("0x00000000000000000000000000000000000000bb"),
        ];
        let bytes = encode_report(
            MarketId::from(7u64),
            &w,
            &[U256::from(13400), U256::ZERO],
            &[67, 70, 64, 0, 0, 0],
            true,
        );
        // head: 5 words; first word is the market id, second the offset of workers (0xa0)
        assert_eq!(U256::from_be_slice(&bytes[0..32]), U256::from(7));
        assert_eq!(U256::from_be_slice(&bytes[32..64]), U256::from(0xa0));
        assert_eq!(U256::from_be_slice(&bytes[128..160]), U256::from(1));
        // uint8[]: a length word then one 32-byte word per score (not packed `bytes`)
        let dim_offset = U256::from_be_slice(&bytes[96..128]).to::<usize>();
        assert_eq!(
            U256::from_be_slice(&bytes[dim_offset..dim_offset + 32]),
            U256::from(6)
        );
        assert_eq!(
            U256::from_be_slice(&bytes[dim_offset + 32..dim_offset + 64]),
            U256::from(67)
        );
        assert_eq!(bytes.len(), 32 * (5 + 3 + 3 + 7));
        let r = decode_report(&bytes).unwrap();
        assert_eq!(r.workers, w.to_vec());
        assert_eq!(r.dim_scores, vec![67, 70, 64, 0, 0, 0]);
        assert!(r.resolution);
        assert!(decode_report(&bytes[..100]).is_err());
    }

    #[test]
    fn raw_report_layout() {
        let meta = ReportMetadata::new(
            B256::repeat_byte(0x11),
            "cresolver",
            Address::repeat_byte(0x22),
            [0, 1],
        );
        let header = ExecutionHeader {
            version: 1,
            workflow_execution_id: B256::repeat_byte(0x33),
            timestamp: 0x01020304,
            don_id: 5,
            don_config_version: 6,
        };
        let raw = build_raw_report(&header, &meta, b"body");
        assert_eq!(raw.len(), 113);
        let (m, body) = split_raw_report(&raw).unwrap();
        assert_eq!(m, meta.encode().as_slice());
        assert_eq!(body, b"body");
        assert_eq!(&raw[33..37], &[1, 2, 3, 4]);
        // workflowName is the ASCII of 10 hex chars
        assert!(meta.workflow_name.iter().all(|b| b.is_ascii_hexdigit()));
        assert!(split_raw_report(&raw[..108]).is_err());
    }
}
