//! Leases on SQLite: one node serves the file, so every claim of an unfinished round is
//! granted (the holder is shown to operators; fencing between nodes is PostgreSQL's),
//! the rounds held are kept in memory and the fence always holds. [`SqliteStore`]'s
//! [`Leases`] and [`Fence`].

use super::{SqliteStore, uint};
use crate::RoundKey;
use crate::column::{Addr, Num};
use crate::stage::DONE_SQL;
use crate::{Fence, Lease, Leases, Rounds, StoreError};
use alloy_primitives::Address;
use rusqlite::{OptionalExtension, params};
use std::time::Duration;

/// The holder name of the single node of a SQLite store.
const LOCAL_NODE: &str = "local";

#[async_trait::async_trait]
impl Leases for SqliteStore {
    fn node_id(&self) -> &str {
        LOCAL_NODE
    }

    async fn claim(
        &self,
        round: RoundKey,
        _ignore_backoff: bool,
    ) -> Result<Option<Lease>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        // `None`: no such round, or it is final
        let term: Option<u64> = self
            .run(move |db| {
                Ok(db
                    .conn()
                    .prepare_cached(&format!(
                        "UPDATE rounds SET holder = ?3, term = term + 1 WHERE market = ?1 AND market_id = ?2
                         AND state NOT IN {DONE_SQL} RETURNING term"
                    ))?
                    .query_row(params![Addr(market), Num(market_id), LOCAL_NODE], |r| uint(r, 0))
                    .optional()?)
            })
            .await?;
        if term.is_some() {
            self.held_set().insert(round);
        }
        Ok(term.map(|term| Lease {
            term,
            taken_from: None,
        }))
    }

    async fn renew(&self, round: RoundKey) -> Result<bool, StoreError> {
        Ok(self.held_set().contains(&round))
    }

    async fn release(
        &self,
        round: RoundKey,
        _retry_after: Option<Duration>,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.held_set().remove(&round);
        self.run(move |db| {
            db.conn()
                .prepare_cached(
                    "UPDATE rounds SET holder = NULL WHERE market = ?1 AND market_id = ?2",
                )?
                .execute(params![Addr(market), Num(market_id)])?;
            Ok(())
        })
        .await
    }

    async fn claimable(
        &self,
        markets: &[Address],
        limit: usize,
    ) -> Result<Vec<RoundKey>, StoreError> {
        let all = self.unfinished().await?;
        Ok(all
            .into_iter()
            .filter(|r| markets.contains(&r.market))
            .take(limit)
            .map(|r| r.key())
            .collect())
    }

    fn held(&self) -> usize {
        self.held_set().len()
    }
}

#[async_trait::async_trait]
impl Fence for SqliteStore {
    async fn fence_ok(&self, _round: RoundKey) -> Result<bool, StoreError> {
        Ok(true)
    }
}
