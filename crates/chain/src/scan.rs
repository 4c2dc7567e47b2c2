//! Chunked `eth_getLogs`, the one scanner behind the watcher and replay: chunks of at
//! most the current range, halved when the provider refuses a range (too many blocks,
//! results or bytes; never for a rate limit, which the transport retries) and doubled
//! back towards the configured maximum after a run of good chunks. Every answer is held
//! to its request ([`matching`]).

use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{Filter, Log};

/// An `eth_getLogs` answer held to its request: every log must be one `filter` asks for
/// (its block range or block hash, its address and its topics, as alloy's
/// `Filter::rpc_matches` says); the first that is not makes the answer an error
/// ([`crate::RpcCause::Mismatch`]), so that an endpoint's log of another contract or
/// block is never taken for the market's.
pub fn matching(
    call: &str,
    filter: &Filter,
    logs: Vec<Log>,
) -> Result<Vec<Log>, crate::RpcFailure> {
    match logs.iter().find(|l| !filter.rpc_matches(l)) {
        None => Ok(logs),
        Some(bad) => Err(crate::RpcFailure::new(
            format!(
                "{call} returned a log it did not ask for (contract {}, block {:?} {:?})",
                bad.address(),
                bad.block_number,
                bad.block_hash
            ),
            crate::RpcCause::Mismatch,
        )),
    }
}

/// Whether an RPC error says the queried block range (or result set) is too large: it
/// must speak of the range, the results or the response size. A rate-limit answer
/// ("rate limit exceeded", "limit exceeded", "too many requests", HTTP 429) is not one,
/// even when it shares words with one: it is retried with backoff at the transport, not
/// answered with a smaller range.
pub fn is_range_error(msg: &str) -> bool {
    let m = msg.to_lowercase();
    let rate_limited = [
        "rate limit",
        "rate-limit",
        "ratelimit",
        "too many requests",
        "requests per",
        "request limit",
        "429",
        "capacity",
        "throughput",
        "credits",
    ]
    .iter()
    .any(|k| m.contains(k));
    !rate_limited
        && [
            "range",
            "results",
            "response size",
            "too large",
            "query timeout",
        ]
        .iter()
        .any(|k| m.contains(k))
}

/// Successful chunks at a halved range before the range is doubled again (towards
/// `max_range`): a provider that refused one large range once is not held to the
/// smallest range for ever.
const GROW_AFTER_CHUNKS: u32 = 8;

/// The range state of one scan (kept across calls: a watcher keeps what it learned).
#[derive(Debug, Clone)]
pub struct LogScanner {
    max_range: u64,
    range: u64,
    /// Chunks scanned without a range error since the range last changed.
    good_chunks: u32,
}

impl LogScanner {
    /// A scanner starting at chunks of `max_range` blocks (at least 1).
    pub fn new(max_range: u64) -> Self {
        let max_range = max_range.max(1);
        Self {
            max_range,
            range: max_range,
            good_chunks: 0,
        }
    }

    /// The chunk size in use now.
    pub fn range(&self) -> u64 {
        self.range
    }

    /// The logs of `filter` in one chunk from `from` up to at most `to`; returns the last
    /// block the chunk covered. A range refusal halves the chunk and asks again; any other
    /// error is returned as text.
    pub async fn next_chunk(
        &mut self,
        provider: &DynProvider,
        filter: &Filter,
        from: u64,
        to: u64,
    ) -> Result<(u64, Vec<Log>), crate::RpcFailure> {
        loop {
            let end = from.saturating_add(self.range - 1).min(to);
            let chunk = filter.clone().from_block(from).to_block(end);
            match provider.get_logs(&chunk).await {
                Ok(logs) => {
                    let logs = matching(&format!("eth_getLogs {from}..{end}"), &chunk, logs)?;
                    if self.range < self.max_range {
                        self.good_chunks += 1;
                        if self.good_chunks >= GROW_AFTER_CHUNKS {
                            self.range = self.range.saturating_mul(2).min(self.max_range);
                            self.good_chunks = 0;
                        }
                    }
                    return Ok((end, logs));
                }
                Err(e) if self.range > 1 && is_range_error(&e.to_string()) => {
                    self.range = (self.range / 2).max(1);
                    self.good_chunks = 0;
                    tracing::info!(from, end, new_range = self.range, error = %e, "provider refused the range: halving");
                }
                Err(e) => {
                    return Err(crate::RpcFailure::new(
                        format!("eth_getLogs {from}..{end}"),
                        e,
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn range_errors() {
        for m in [
            "query returned more than 10000 results",
            "eth_getLogs block range too large, range: 100001, max: 100000",
            "Log response size exceeded",
            "exceed maximum block range: 5000",
            "block range limit exceeded",
        ] {
            assert!(super::is_range_error(m), "{m}");
        }
        assert!(!super::is_range_error("connection refused"));
        for m in [
            "rate limit exceeded",
            "Too Many Requests",
            "exceeded 25 requests per second",
            "HTTP error 429",
            "your app has exceeded its compute units per second capacity",
            "limit exceeded",
            "daily request count exceeded, request rate limited",
        ] {
            assert!(
                !super::is_range_error(m),
                "a rate limit is not a range error: {m}"
            );
        }
    }
}
