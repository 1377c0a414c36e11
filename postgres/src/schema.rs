//! The tables and their migrations, and the format check made on every connect.

use std::collections::HashSet;

use reel_storage::{FORMAT_VERSION, StorageError, UPGRADABLE_FORMATS};
use tokio_postgres::Client;

use crate::pg_err;

/// The migration level this build creates and reads. A database at a higher level
/// was written by a newer build and is refused.
pub const SCHEMA_VERSION: i32 = 5;

/// Migration `i` takes the schema from level `i` to `i + 1`.
const MIGRATIONS: [&str; 5] = [
    r#"
CREATE TABLE reel_log (
    run_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    part smallint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE reel_runs (
    run_id text COLLATE "C" PRIMARY KEY,
    part smallint NOT NULL,
    meta bytea NOT NULL
);
CREATE TABLE reel_active (
    run_id text COLLATE "C" PRIMARY KEY,
    part smallint NOT NULL,
    meta bytea NOT NULL
);
CREATE INDEX reel_active_part ON reel_active (part);
CREATE TABLE reel_timers (
    key bytea PRIMARY KEY,
    run_id text COLLATE "C" NOT NULL,
    part smallint NOT NULL,
    fire_at bigint NOT NULL
);
CREATE INDEX reel_timers_part ON reel_timers (part, key);
"#,
    r#"
CREATE TABLE reel_schedules (
    id text COLLATE "C" PRIMARY KEY,
    record bytea NOT NULL
);
"#,
    r#"
CREATE TABLE reel_leases (
    part smallint PRIMARY KEY,
    owner text COLLATE "C",
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO reel_leases (part) SELECT generate_series(0, 255);
CREATE TABLE reel_hosts (
    host_id text COLLATE "C" PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE TABLE reel_inbox (
    id bigserial PRIMARY KEY,
    part smallint NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    mail bytea NOT NULL
);
CREATE INDEX reel_inbox_part ON reel_inbox (part, id);
"#,
    // Listing columns, filled by the writer (and by `listing::backfill` for rows
    // written before).
    r#"
ALTER TABLE reel_runs
    ADD COLUMN created_at bigint,
    ADD COLUMN status text COLLATE "C",
    ADD COLUMN workflow text COLLATE "C",
    ADD COLUMN version integer,
    ADD COLUMN parent text COLLATE "C";
CREATE INDEX reel_runs_created ON reel_runs (created_at, run_id);
CREATE INDEX reel_runs_status ON reel_runs (status, created_at, run_id);
CREATE INDEX reel_runs_workflow ON reel_runs (workflow, created_at, run_id);
CREATE INDEX reel_runs_parent ON reel_runs (parent) WHERE parent IS NOT NULL;
"#,
    // Queues admitted in the database (`admission`); the unique index over the
    // keys is made by `fill_queue_columns`, once the columns are filled.
    r#"
ALTER TABLE reel_active
    ADD COLUMN queue text COLLATE "C",
    ADD COLUMN dedup_key text COLLATE "C";
CREATE TABLE reel_queue_slots (
    run_id text COLLATE "C" PRIMARY KEY,
    queue text COLLATE "C" NOT NULL,
    part smallint NOT NULL
);
CREATE INDEX reel_queue_slots_queue ON reel_queue_slots (queue);
CREATE TABLE reel_queue_starts (
    queue text COLLATE "C" NOT NULL,
    at bigint NOT NULL
);
CREATE INDEX reel_queue_starts_queue ON reel_queue_starts (queue, at);
CREATE SEQUENCE reel_queue_order;
"#,
];

/// The level whose migration adds the listing columns.
const LISTING_LEVEL: usize = 3;

/// The level whose migration adds the queue columns and tables.
const QUEUE_LEVEL: usize = 4;

/// An arbitrary constant: the advisory lock held while the schema is checked, so
/// that two stores connecting at once do not both migrate.
const LOCK: i64 = 0x7265_656c_5f73_6368;

/// Creates or upgrades the tables and checks the format marker.
///
/// # Errors
/// [`StorageError::IncompatibleFormat`] for a database of another log format or a
/// newer schema; [`StorageError::Io`] for the server.
pub(crate) async fn migrate(client: &mut Client) -> Result<(), StorageError> {
    let tx = client.transaction().await.map_err(|e| pg_err(&e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await
        .map_err(|e| pg_err(&e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS reel_schema (key text PRIMARY KEY, value text NOT NULL)",
    )
    .await
    .map_err(|e| pg_err(&e))?;
    let rows = tx
        .query("SELECT key, value FROM reel_schema", &[])
        .await
        .map_err(|e| pg_err(&e))?;
    let value = |k: &str| {
        rows.iter()
            .find(|r| r.get::<_, &str>(0) == k)
            .map(|r| r.get::<_, String>(1))
    };
    if let Some(found) = value("format")
        && found != FORMAT_VERSION
        && !UPGRADABLE_FORMATS.contains(&found.as_str())
    {
        return Err(StorageError::IncompatibleFormat {
            found,
            expected: FORMAT_VERSION.to_owned(),
        });
    }
    let level = match value("schema") {
        None => 0,
        Some(v) => v
            .parse::<i32>()
            .map_err(|_| StorageError::IncompatibleFormat {
                found: format!("schema level `{v}`"),
                expected: format!("schema level {SCHEMA_VERSION}"),
            })?,
    };
    if !(0..=SCHEMA_VERSION).contains(&level) {
        return Err(StorageError::IncompatibleFormat {
            found: format!("{FORMAT_VERSION}, schema level {level}"),
            expected: format!("{FORMAT_VERSION}, schema level {SCHEMA_VERSION} or lower"),
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(level as usize) {
        tracing::info!(level = i + 1, "reel-postgres: migrating the schema");
        tx.batch_execute(sql).await.map_err(|e| pg_err(&e))?;
        if i == LISTING_LEVEL {
            crate::listing::backfill(&tx).await?;
        }
        if i == QUEUE_LEVEL {
            fill_queue_columns(&tx).await?;
        }
    }
    tx.execute(
        "INSERT INTO reel_schema (key, value) VALUES ('format', $1), ('schema', $2) \
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        &[&FORMAT_VERSION, &SCHEMA_VERSION.to_string()],
    )
    .await
    .map_err(|e| pg_err(&e))?;
    tx.commit().await.map_err(|e| pg_err(&e))
}

/// The part of migration 5 that needs the runs' metadata decoded: fills the queue
/// columns of the unfinished runs, moves the order sequence past their order
/// numbers, then makes the keys unique. Of two unfinished runs holding one key
/// (hosts that admitted per host could let that happen), the first keeps it.
async fn fill_queue_columns(tx: &tokio_postgres::Transaction<'_>) -> Result<(), StorageError> {
    let rows = tx
        .query("SELECT run_id, meta FROM reel_active", &[])
        .await
        .map_err(|e| pg_err(&e))?;
    let scan = crate::rows::scan_meta("active", &rows);
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut max_order: Option<u64> = None;
    let (mut ids, mut queues, mut keys) = (Vec::new(), Vec::new(), Vec::new());
    for meta in &scan.items {
        let Some(entry) = &meta.queue else { continue };
        max_order = max_order.max(Some(entry.order));
        let key = entry
            .dedup_key
            .clone()
            .filter(|k| seen.insert((entry.name.clone(), k.clone())));
        ids.push(meta.run_id.as_str());
        queues.push(entry.name.as_str());
        keys.push(key);
    }
    tx.execute(
        "UPDATE reel_active AS a SET queue = v.queue, dedup_key = v.dedup_key \
         FROM unnest($1::text[], $2::text[], $3::text[]) AS v(run_id, queue, dedup_key) \
         WHERE a.run_id = v.run_id",
        &[&ids, &queues, &keys],
    )
    .await
    .map_err(|e| pg_err(&e))?;
    if let Some(max) = max_order {
        let next = i64::try_from(max.saturating_add(1)).unwrap_or(i64::MAX);
        tx.execute("SELECT setval('reel_queue_order', $1, false)", &[&next])
            .await
            .map_err(|e| pg_err(&e))?;
    }
    tx.batch_execute(
        "CREATE UNIQUE INDEX reel_active_dedup ON reel_active (queue, dedup_key) \
         WHERE dedup_key IS NOT NULL",
    )
    .await
    .map_err(|e| pg_err(&e))
}
