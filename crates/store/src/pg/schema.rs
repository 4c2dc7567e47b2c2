//! The PostgreSQL schema as versioned, append-only migrations, applied at start under an
//! advisory lock, and the storage setting applied with them (lz4 for the rounds' JSON).

/// Versioned migrations: (version, what it does, SQL). Append only.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "rounds, logs, checkpoints, progress, leases, nonces and attempts",
        "
CREATE TABLE seen_logs (
    tx_hash TEXT NOT NULL, log_index BIGINT NOT NULL, market TEXT NOT NULL, market_id TEXT NOT NULL,
    block_number BIGINT NOT NULL, block_hash TEXT NOT NULL, PRIMARY KEY (tx_hash, log_index));
CREATE TABLE rounds (
    id BIGSERIAL UNIQUE,
    market TEXT NOT NULL, market_id TEXT NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL,
    workflow TEXT NOT NULL, request_tx TEXT, request_block BIGINT, reason TEXT, submit_tx TEXT,
    raw_tx BYTEA, outcome TEXT, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL,
    holder TEXT, term BIGINT NOT NULL DEFAULT 0, lease_until BIGINT, last_holder TEXT,
    PRIMARY KEY (market, market_id));
CREATE INDEX rounds_open ON rounds (lease_until) WHERE state NOT IN ('confirmed', 'failed', 'skipped');
CREATE TABLE checkpoints (key TEXT PRIMARY KEY, block_number BIGINT NOT NULL, block_hash TEXT NOT NULL);
CREATE TABLE round_progress (
    market TEXT NOT NULL, market_id TEXT NOT NULL, attempt INTEGER NOT NULL, progress TEXT NOT NULL,
    updated_at BIGINT NOT NULL, PRIMARY KEY (market, market_id));
CREATE TABLE tx_keys (signer TEXT NOT NULL, chain_id BIGINT NOT NULL, PRIMARY KEY (signer, chain_id));
CREATE TABLE tx_nonces (
    signer TEXT NOT NULL, chain_id BIGINT NOT NULL, nonce BIGINT NOT NULL,
    market TEXT NOT NULL, market_id TEXT NOT NULL, to_addr TEXT NOT NULL, calldata BYTEA NOT NULL,
    gas_limit BIGINT NOT NULL, state TEXT NOT NULL, mined_tx TEXT, mined_block BIGINT,
    detail TEXT, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL,
    PRIMARY KEY (signer, chain_id, nonce));
CREATE INDEX tx_nonces_market ON tx_nonces (market, market_id);
CREATE TABLE tx_attempts (
    signer TEXT NOT NULL, chain_id BIGINT NOT NULL, nonce BIGINT NOT NULL, seq INTEGER NOT NULL,
    tx_hash TEXT NOT NULL, raw BYTEA NOT NULL, max_fee TEXT NOT NULL, max_priority_fee TEXT NOT NULL,
    gas_limit BIGINT NOT NULL, sent_block BIGINT, created_at BIGINT NOT NULL,
    PRIMARY KEY (signer, chain_id, nonce, seq));
",
    ),
    (
        2,
        "finality: the mined block's hash, finalized rounds, earlier attempts kept; node settings",
        "
ALTER TABLE tx_nonces ADD COLUMN mined_hash TEXT;
DROP INDEX rounds_open;
CREATE INDEX rounds_open ON rounds (lease_until) WHERE state NOT IN ('confirmed', 'finalized', 'failed', 'skipped');
CREATE INDEX rounds_confirmed ON rounds (updated_at) WHERE state = 'confirmed';
CREATE TABLE node_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE round_attempts (
    market TEXT NOT NULL, market_id TEXT NOT NULL, attempt INTEGER NOT NULL, state TEXT NOT NULL,
    reason TEXT, request_tx TEXT, request_block BIGINT, submit_tx TEXT, outcome TEXT,
    ended_at BIGINT NOT NULL, PRIMARY KEY (market, market_id, attempt));
",
    ),
];

/// The rounds' JSON (progress, transcripts: kilobytes a round, written several times)
/// compressed with lz4 instead of pglz, on a server that has it (14+, built with lz4):
/// on PostgreSQL 15 here, writing a 14 KB transcript took ~37 µs against ~150 µs, and
/// it came out smaller (3.4 against 4.0 KB). Not a versioned migration: the schema is
/// unchanged and an older binary still starts against it. Run at start after the
/// migrations, in a transaction of its own, and only while the columns have the
/// server's default (an operator's explicit choice is kept). The three tables are
/// locked without waiting (`NOWAIT`, in the order the nodes' statements lock them): if
/// a running node is using one, nothing changes and the next start tries again; so are
/// a role that does not own the tables and a server without lz4.
pub const LZ4_JSON: &str = "
DO $$
DECLARE c text;
BEGIN
  IF current_setting('server_version_num')::int >= 140000
     AND EXISTS (SELECT 1 FROM pg_settings
                 WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)) THEN
    EXECUTE 'SELECT attcompression::text FROM pg_attribute
             WHERE attrelid = ''round_attempts''::regclass AND attname = ''outcome''' INTO c;
    IF c = '' THEN
      LOCK TABLE round_progress, rounds, round_attempts IN ACCESS EXCLUSIVE MODE NOWAIT;
      EXECUTE 'ALTER TABLE rounds ALTER COLUMN outcome SET COMPRESSION lz4';
      EXECUTE 'ALTER TABLE round_progress ALTER COLUMN progress SET COMPRESSION lz4';
      EXECUTE 'ALTER TABLE round_attempts ALTER COLUMN outcome SET COMPRESSION lz4';
    END IF;
  END IF;
EXCEPTION WHEN feature_not_supported OR insufficient_privilege OR lock_not_available THEN
  NULL;
END $$;
";
