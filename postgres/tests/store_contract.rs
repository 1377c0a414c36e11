//! The backend contract of `reel_storage::validation` on PostgreSQL (each check on
//! a database of its own), and the format check of the schema.

mod support;

use std::sync::Arc;

use reel_postgres::{PgStore, SCHEMA_VERSION};
use reel_storage::validation::{self, Backend, Damage};
use reel_storage::{LogReader, LogWriter, StorageError, Store};
use tokio::sync::OnceCell;

/// One database, created on first open.
#[derive(Default)]
struct Pg {
    url: OnceCell<String>,
}

impl Pg {
    async fn url(&self) -> &str {
        self.url.get_or_init(|| support::database("contract")).await
    }
}

impl Backend for Pg {
    async fn open(&self) -> Arc<dyn Store> {
        PgStore::connect(self.url().await).await.expect("connect")
    }

    async fn damage(&self, damage: Damage) -> bool {
        let sql = match damage {
            Damage::LogRecord { run_id, seq } => format!(
                "UPDATE reel_log SET record = '\\xc1' WHERE run_id = '{run_id}' AND seq = {seq}"
            ),
            Damage::Meta { run_id } => format!(
                "UPDATE reel_runs SET meta = '\\xc1' WHERE run_id = '{run_id}'; \
                 UPDATE reel_active SET meta = '\\xc1' WHERE run_id = '{run_id}'"
            ),
            Damage::TimerKey => "INSERT INTO reel_timers (key, run_id, part, fire_at) \
                                 VALUES ('\\x0001', 'x', 0, 0)"
                .to_owned(),
        };
        support::execute(self.url().await, &sql).await;
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_meets_the_backend_contract() {
    validation::run_all(Pg::default).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_tells_a_listener_that_begins_during_a_commit() {
    validation::a_listener_that_begins_during_a_commit_hears_of_it(&Pg::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_format_or_a_newer_schema_is_refused() {
    let url = support::database("format").await;
    PgStore::connect(&url).await.expect("create").close();
    // Connecting again to a current database is fine.
    PgStore::connect(&url).await.expect("reopen").close();
    support::execute(
        &url,
        "UPDATE reel_schema SET value = 'reel-log/99' WHERE key = 'format'",
    )
    .await;
    match PgStore::connect(&url).await {
        Err(StorageError::IncompatibleFormat { found, .. }) => assert_eq!(found, "reel-log/99"),
        other => panic!("another format must be refused, got {other:?}"),
    }
    support::execute(
        &url,
        &format!(
            "UPDATE reel_schema SET value = '{}' WHERE key = 'format'; \
             UPDATE reel_schema SET value = '{}' WHERE key = 'schema'",
            reel_storage::FORMAT_VERSION,
            SCHEMA_VERSION + 1
        ),
    )
    .await;
    match PgStore::connect(&url).await {
        Err(StorageError::IncompatibleFormat { found, .. }) => {
            assert!(found.contains("schema level"), "{found}")
        }
        other => panic!("a newer schema must be refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_an_io_error() {
    // Port 1 on localhost: nothing listens there.
    match PgStore::connect("postgres://reel@127.0.0.1:1/none").await {
        Err(StorageError::Io(msg)) => assert!(msg.contains("postgres"), "{msg}"),
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert!(matches!(
        PgStore::connect("not a url at all ://").await,
        Err(StorageError::Io(_))
    ));
}

/// Two stores (two writers) on one database appending to the same runs at once: for
/// each sequence number exactly one append wins, the losers get a conflict, and
/// appends of other runs batched with a loser still land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_racing_on_one_database_never_both_win() {
    use reel_storage::{Append, Event, Payload};
    let url = support::database("race").await;
    let a = PgStore::connect(&url).await.expect("a");
    let b = PgStore::connect(&url).await.expect("b");
    let ev = |who: u8| Event::StepCompleted {
        id: "s".into(),
        output: Payload(vec![who]),
    };
    let append = |run: &str, seq: u64, who: u8| Append {
        run_id: run.into(),
        expected_seq: Some(seq),
        events: vec![ev(who)],
        durable: true,
        ..Append::default()
    };
    for seq in 0..20u64 {
        let mut tickets = Vec::new();
        for (who, store) in [(1u8, &a), (2, &b)] {
            tickets.push(store.submit(append("shared", seq, who)));
            tickets.push(store.submit(append(&format!("own-{who}"), seq, who)));
        }
        let mut wins = 0;
        for (i, t) in tickets.into_iter().enumerate() {
            match (i % 2, t.await) {
                (0, Ok(())) => wins += 1,
                (0, Err(StorageError::Conflict { .. })) => {}
                (_, r) => r.expect("an append of a run nobody races lands"),
            }
        }
        assert_eq!(wins, 1, "exactly one writer wins sequence {seq}");
    }
    assert_eq!(a.read_log("shared").expect("log").len(), 20);
    assert_eq!(b.read_log("own-1").expect("log").len(), 20);
    a.close();
    b.close();
}

/// Members of one database, for the cluster checks.
#[derive(Default)]
struct Shared {
    pg: Pg,
}

impl validation::ClusterBackend for Shared {
    async fn join(&self, host_id: &str) -> Arc<dyn Store> {
        let config = reel_postgres::ClusterConfig::new(host_id)
            .lease_ttl(std::time::Duration::from_secs(30));
        reel_postgres::PgStore::join(self.pg.url().await, config)
            .await
            .expect("join")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_meets_the_cluster_contract() {
    validation::run_cluster_checks(Shared::default).await;
}

/// A database written before the listing columns existed gets them filled when a
/// newer build connects: lists and counts see its runs; a row whose metadata does
/// not decode is reported by the first page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_columns_are_filled_on_upgrade() {
    use reel_storage::listing::RunQuery;
    use reel_storage::{Append, Event, MetaReader, Payload, RunMeta, RunState, StatusKind};
    let url = support::database("backfill").await;
    let s = PgStore::connect(&url).await.expect("create");
    for (i, state) in [RunState::Running, RunState::Completed, RunState::Completed]
        .into_iter()
        .enumerate()
    {
        let run_id = format!("old-{i}");
        s.submit(Append {
            run_id: run_id.clone(),
            expected_seq: Some(0),
            events: vec![Event::RunStarted {
                workflow: "w".into(),
                version: 1,
                input: Payload::default(),
            }],
            meta: Some(RunMeta {
                run_id,
                workflow: "w".into(),
                version: 1,
                state,
                created_at: 10 + i as u64,
                updated_at: 10,
                parent: None,
                segment_start: 0,
                segment: 0,
                queue: None,
            }),
            durable: true,
            ..Append::default()
        })
        .await
        .expect("write");
    }
    s.close();
    // Back to schema level 3, as an older build left it, with one damaged row.
    support::execute(&url, BACK_TO_LEVEL_4).await;
    support::execute(
        &url,
        "ALTER TABLE reel_runs DROP COLUMN created_at, DROP COLUMN status, \
         DROP COLUMN workflow, DROP COLUMN version, DROP COLUMN parent; \
         UPDATE reel_schema SET value = '3' WHERE key = 'schema'; \
         UPDATE reel_runs SET meta = '\\xc1' WHERE run_id = 'old-0'",
    )
    .await;
    let s = PgStore::connect(&url).await.expect("upgrade");
    let done = s
        .list_page(&RunQuery {
            status: Some(vec![StatusKind::Completed]),
            limit: 10,
            ..RunQuery::default()
        })
        .expect("page");
    let ids: Vec<&str> = done.items.iter().map(|m| m.run_id.as_str()).collect();
    assert_eq!(ids, ["old-1", "old-2"]);
    assert_eq!(done.corrupt.len(), 1, "the damaged row is reported");
    assert_eq!(
        s.count_by_status().expect("counts")[&StatusKind::Completed],
        2
    );
    s.close();
}

/// Undoes migration 5 (queues admitted in the database).
const BACK_TO_LEVEL_4: &str = "ALTER TABLE reel_active DROP COLUMN queue, DROP COLUMN dedup_key; \
     DROP TABLE reel_queue_slots, reel_queue_starts; DROP SEQUENCE reel_queue_order; \
     UPDATE reel_schema SET value = '4' WHERE key = 'schema'";

/// A database written before queues were admitted in it gets its unfinished runs'
/// queue columns filled, the order sequence past their order numbers, and the
/// keys made unique.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_columns_are_filled_on_upgrade() {
    use reel_storage::{Append, Event, Payload, QueueEntry, RunMeta, RunState};
    let url = support::database("queue_backfill").await;
    let s = PgStore::connect(&url).await.expect("create");
    let runs = [
        ("q-a", RunState::Enqueued, Some("k"), 40),
        ("q-b", RunState::Running, None, 41),
    ];
    for (run_id, state, key, order) in runs {
        s.submit(Append {
            run_id: run_id.into(),
            expected_seq: Some(0),
            events: vec![Event::RunStarted {
                workflow: "w".into(),
                version: 1,
                input: Payload::default(),
            }],
            meta: Some(RunMeta {
                run_id: run_id.into(),
                workflow: "w".into(),
                version: 1,
                state,
                created_at: 10,
                updated_at: 10,
                parent: None,
                segment_start: 0,
                segment: 0,
                queue: Some(QueueEntry {
                    name: "q".into(),
                    priority: 0,
                    order,
                    dedup_key: key.map(str::to_owned),
                }),
            }),
            durable: true,
            ..Append::default()
        })
        .await
        .expect("write");
    }
    s.close();
    support::execute(&url, BACK_TO_LEVEL_4).await;
    let s = PgStore::connect(&url).await.expect("upgrade");
    s.close();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT run_id, queue, dedup_key FROM reel_active ORDER BY run_id",
            &[],
        )
        .await
        .expect("rows");
    let found: Vec<(String, Option<String>, Option<String>)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let q = Some("q".to_owned());
    assert_eq!(
        found,
        [
            ("q-a".to_owned(), q.clone(), Some("k".to_owned())),
            ("q-b".to_owned(), q, None)
        ]
    );
    let next: i64 = client
        .query_one("SELECT nextval('reel_queue_order')", &[])
        .await
        .expect("order")
        .get(0);
    assert_eq!(next, 42, "new runs are ordered after the unfinished ones");
    let unique: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'reel_active_dedup'",
            &[],
        )
        .await
        .expect("index")
        .get(0);
    assert_eq!(unique, 1);
    drop(client);
    let _ = task.await;
}
