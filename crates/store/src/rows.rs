//! What both backends share below the trait: the text columns of a round row and of a
//! summary row, and their parsing into typed records (a bad value is a typed
//! corruption error naming the column, never a panic).

use super::*;

pub(crate) type RowResult = Result<RoundRecord, StoreError>;

/// A stored value that does not parse.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// An optional hash column.
pub(crate) fn parse_hash(h: Option<String>, what: &str) -> Result<Option<B256>, StoreError> {
    h.map(|h| B256::from_str(&h))
        .transpose()
        .map_err(|e| corrupt(what, e))
}

/// A market and a market id as the stores keep them (text).
pub(crate) fn parse_market(market: &str, market_id: &str) -> Result<(Address, U256), StoreError> {
    Ok((
        Address::from_str(market).map_err(|e| corrupt("market", e))?,
        U256::from_str(market_id).map_err(|e| corrupt("market_id", e))?,
    ))
}

/// A round summary row as either backend reads it, before its text is parsed.
pub(crate) struct SummaryRow {
    /// The page cursor (SQLite's rowid, PostgreSQL's id).
    pub cursor: i64,
    pub market: String,
    pub market_id: String,
    pub state: String,
    pub attempt: i64,
    pub workflow: String,
    pub request_tx: Option<String>,
    pub request_block: Option<i64>,
    pub reason: Option<String>,
    pub submit_tx: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub holder: Option<String>,
    pub driven_by: Option<String>,
    pub lease_ms: Option<i64>,
}

impl SummaryRow {
    /// The summary: reasons cut to [`SUMMARY_REASON_BYTES`]; holder and lease only while
    /// the round is unfinished.
    pub(crate) fn parse(self) -> Result<RoundSummary, StoreError> {
        let (market, market_id) = parse_market(&self.market, &self.market_id)?;
        let state = Stage::from_str(&self.state)?;
        let open = !state.is_final();
        Ok(RoundSummary {
            market,
            market_id,
            state,
            attempt: self.attempt as u32,
            workflow: self.workflow,
            request_tx: parse_hash(self.request_tx, "request_tx")?,
            request_block: self.request_block.map(|b| b as u64),
            reason: self.reason.map(|r| truncate(r, SUMMARY_REASON_BYTES)),
            submit_tx: parse_hash(self.submit_tx, "submit_tx")?,
            created_at: self.created_at as u64,
            updated_at: self.updated_at as u64,
            holder: self.holder.filter(|_| open),
            lease_ms: self.lease_ms.filter(|_| open).map(|m| m as u64),
            driven_by: self.driven_by,
        })
    }
}

/// A `rounds` row ([`SELECT`]'s columns) as either backend reads it, before its text
/// is parsed: the one place a stored round becomes a [`RoundRecord`].
pub(crate) struct RoundRow {
    pub market: String,
    pub market_id: String,
    pub state: String,
    pub attempt: i64,
    pub workflow: String,
    pub request_tx: Option<String>,
    pub request_block: Option<i64>,
    pub reason: Option<String>,
    pub submit_tx: Option<String>,
    pub raw_tx: Option<Vec<u8>>,
    pub outcome: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub holder: Option<String>,
}

impl RoundRow {
    pub(crate) fn parse(self) -> RowResult {
        let (market, market_id) = parse_market(&self.market, &self.market_id)?;
        Ok(RoundRecord {
            market,
            market_id,
            state: Stage::from_str(&self.state)?,
            attempt: self.attempt as u32,
            workflow: self.workflow,
            request_tx: parse_hash(self.request_tx, "request_tx")?,
            request_block: self.request_block.map(|b| b as u64),
            reason: self.reason,
            submit_tx: parse_hash(self.submit_tx, "submit_tx")?,
            raw_tx: self.raw_tx.map(Bytes::from),
            outcome: self
                .outcome
                .map(|o| serde_json::from_str(&o))
                .transpose()
                .map_err(|e| corrupt("outcome", e))?,
            created_at: self.created_at as u64,
            updated_at: self.updated_at as u64,
            holder: self.holder,
        })
    }
}
