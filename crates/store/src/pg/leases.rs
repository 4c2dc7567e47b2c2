//! Leases with fencing on PostgreSQL: a node claims an unfinished round with one
//! conditional `UPDATE` that bumps its term, renews it while it works, and releases it
//! with a back-off; lease times are the database's clock. [`PgStore`]'s [`Leases`] and
//! [`Fence`].

use super::{NOW_MS, PgStore, col, pg_err, read_market};
use crate::RoundKey;
use crate::column::{Addr, Num};
use crate::stage::DONE_SQL;
use crate::{Fence, Lease, Leases, StoreError};
use alloy_primitives::Address;
use std::time::Duration;

#[async_trait::async_trait]
impl Leases for PgStore {
    fn shared(&self) -> bool {
        true
    }

    fn node_id(&self) -> &str {
        &self.node
    }

    fn lease_duration(&self) -> Duration {
        self.lease
    }

    async fn claim(
        &self,
        round: RoundKey,
        ignore_backoff: bool,
    ) -> Result<Option<Lease>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let client = self.client().await?;
        // One statement (one round trip): the row is locked (`old`, which also keeps the
        // previous holder), then taken when the round is not final and its lease is free:
        // expired or never set, already ours, or released without a back-off to honour.
        // A concurrent claim waits for the lock; two claims never both win. (A claim
        // racing a release may find the round taken and get none: it is retried at the
        // next tick of the claim loop.)
        let row = client
            .query_opt(
                &client
                    .prepare_cached(&format!(
                        "WITH old AS (SELECT holder FROM rounds
                                      WHERE market = $1 AND market_id = $2 FOR UPDATE)
                         UPDATE rounds r SET holder = $3, last_holder = $3, term = r.term + 1,
                                lease_until = {NOW_MS} + $4
                         FROM old
                         WHERE r.market = $1 AND r.market_id = $2
                           AND r.state NOT IN {DONE_SQL}
                           AND (r.lease_until IS NULL OR r.lease_until < {NOW_MS}
                                OR r.holder = $3 OR (r.holder IS NULL AND $5::BOOLEAN))
                         RETURNING r.term, old.holder"
                    ))
                    .await
                    .map_err(pg_err)?,
                &[
                    &Addr(market),
                    &Num(market_id),
                    &self.node,
                    &(self.lease.as_millis() as i64),
                    &ignore_backoff,
                ],
            )
            .await
            .map_err(pg_err)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let term: i64 = col(&row, 0)?;
        let prev: Option<String> = col(&row, 1)?;
        self.held.lock().insert(round, term);
        Ok(Some(Lease {
            term: term as u64,
            taken_from: prev.filter(|p| p != &self.node),
        }))
    }

    async fn renew(&self, round: RoundKey) -> Result<bool, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let Some(term) = self.term_of(round) else {
            return Ok(false);
        };
        let client = self.client().await?;
        let n = client
            .execute(
                &client
                    .prepare_cached(&format!(
                        "UPDATE rounds SET lease_until = {NOW_MS} + $4
                     WHERE market = $1 AND market_id = $2 AND holder = $3 AND term = $5"
                    ))
                    .await
                    .map_err(pg_err)?,
                &[
                    &Addr(market),
                    &Num(market_id),
                    &self.node,
                    &(self.lease.as_millis() as i64),
                    &term,
                ],
            )
            .await
            .map_err(pg_err)?;
        if n == 0 {
            self.forget(round);
        }
        Ok(n == 1)
    }

    async fn release(
        &self,
        round: RoundKey,
        retry_after: Option<Duration>,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let Some(term) = self.term_of(round) else {
            return Ok(());
        };
        self.forget(round);
        let client = self.client().await?;
        let after = retry_after.map(|d| d.as_millis() as i64);
        client
            .execute(
                &client.prepare_cached(&format!(
                    "UPDATE rounds SET holder = NULL,
                       lease_until = CASE WHEN $5::BIGINT IS NULL THEN NULL ELSE {NOW_MS} + $5::BIGINT END
                     WHERE market = $1 AND market_id = $2 AND holder = $3 AND term = $4"
                )).await.map_err(pg_err)?,
                &[
                    &Addr(market),
                    &Num(market_id),
                    &self.node,
                    &term,
                    &after,
                ],
            )
            .await
            .map_err(pg_err)?;
        Ok(())
    }

    async fn claimable(
        &self,
        markets: &[Address],
        limit: usize,
    ) -> Result<Vec<RoundKey>, StoreError> {
        let client = self.client().await?;
        let markets: Vec<Addr> = markets.iter().copied().map(Addr).collect();
        let rows = client
            .query(
                &client
                    .prepare_cached(&format!(
                        "SELECT market, market_id FROM rounds
                     WHERE state NOT IN {DONE_SQL} AND market = ANY($3)
                       AND (lease_until IS NULL OR lease_until < {NOW_MS} OR holder = $2)
                     ORDER BY id LIMIT $1"
                    ))
                    .await
                    .map_err(pg_err)?,
                &[&(limit as i64), &self.node, &markets],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(|r| read_market(r, 0)).collect()
    }

    fn held(&self) -> usize {
        self.held.lock().len()
    }
}

#[async_trait::async_trait]
impl Fence for PgStore {
    async fn fence_ok(&self, round: RoundKey) -> Result<bool, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let Some(term) = self.term_of(round) else {
            return Ok(false);
        };
        // held at this term, with a sixth of the lease still to run by the database's
        // clock: a lease about to expire (its renewals late) sends nothing, since
        // another node may claim the round while the broadcast is under way
        let margin = (self.lease.as_millis() / 6) as i64;
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client.prepare_cached(&format!("SELECT 1 FROM rounds WHERE market = $1 AND market_id = $2 AND holder = $3 AND term = $4
                     AND lease_until > {NOW_MS} + $5")).await.map_err(pg_err)?,
                &[&Addr(market), &Num(market_id), &self.node, &term, &margin],
            )
            .await
            .map_err(pg_err)?;
        if row.is_none() {
            self.forget(round);
        }
        Ok(row.is_some())
    }
}
