//! The fence of every write for a round: this node must hold the round's lease at its
//! term. Each write is one statement that carries the fence in its own `WHERE` on the
//! round's row (one round trip, prepared once per connection); a write to another table
//! is made only if that fenced update or lock of the round touched it.

use super::{PgStore, pg_err};
use crate::RoundKey;
use crate::StoreError;
use crate::column::{Addr, Num};

impl PgStore {
    /// This node's term of the round, or `LeaseLost` when it holds none (the check
    /// before every fenced write, made without a round trip).
    pub(super) fn held_term(&self, round: RoundKey) -> Result<i64, StoreError> {
        self.term_of(round).ok_or(StoreError::LeaseLost(round))
    }

    /// One fenced write for a round in one round trip: `sql` is an `UPDATE rounds …
    /// WHERE market = $1 AND market_id = $2` (or a statement built on one) to which the
    /// fence `AND holder = $n AND term = $n+1` is appended, so the row lock, the lease
    /// check and the write are one conditional statement; prepared once per connection.
    /// No row touched: the round is gone, or this node lost its lease (told apart by a
    /// second read, on that path only).
    pub(super) async fn fenced_execute(
        &self,
        round: RoundKey,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<(), StoreError> {
        let n = params.len();
        let fenced = format!("{sql} AND holder = ${} AND term = ${}", n + 1, n + 2);
        self.fenced_statement(round, &fenced, params).await
    }

    /// Runs a statement whose last two parameters are this node's id and its term of the
    /// round (the fence is in the statement, appended after `params`); no term held →
    /// `LeaseLost` without a round trip; 0 rows → `NoRound` or `LeaseLost`.
    pub(super) async fn fenced_statement(
        &self,
        round: RoundKey,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<(), StoreError> {
        let term = self.held_term(round)?;
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await.map_err(pg_err)?;
        let mut all: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params.to_vec();
        all.push(&self.node);
        all.push(&term);
        let touched = client.execute(&stmt, &all).await.map_err(pg_err)?;
        if touched > 0 {
            return Ok(());
        }
        drop(client);
        Err(self.unfenced(round).await)
    }

    /// Why a fenced write touched no row: the round is gone (`NoRound`), or this node
    /// lost its lease (`LeaseLost`, and the term is forgotten). A second read, on that
    /// path only.
    pub(super) async fn unfenced(&self, round: RoundKey) -> StoreError {
        match self.round_exists(round).await {
            Ok(false) => StoreError::NoRound(round),
            Ok(true) => {
                self.forget(round);
                StoreError::LeaseLost(round)
            }
            Err(e) => e,
        }
    }

    async fn round_exists(&self, round: RoundKey) -> Result<bool, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let client = self.client().await?;
        let exists = client
            .query_opt(
                &client
                    .prepare_cached("SELECT 1 FROM rounds WHERE market = $1 AND market_id = $2")
                    .await
                    .map_err(pg_err)?,
                &[&Addr(market), &Num(market_id)],
            )
            .await
            .map_err(pg_err)?
            .is_some();
        Ok(exists)
    }
}
