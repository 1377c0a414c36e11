//! A damaged log record (garbage bytes, truncation, a missing record) is reported as
//! `Corrupt` naming the run and sequence number, never a panic, and the other runs
//! read and append as before (invariant 8).

use std::path::Path;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel_storage::{Append, Event, FjallStore, LogReader, LogWriter, StorageError, Store};

const RUNS: &[&str] = &[
    "healthy",
    "garbage",
    "empty",
    "truncated",
    "wrong-shape",
    "gap",
    "last",
];
const LEN: u64 = 6;

fn event(run: &str, seq: u64) -> Event {
    Event::StepCompleted {
        id: format!("{run}/{seq}"),
        output: reel_storage::Payload(vec![0xa5, b'h', b'e', b'l', b'l', b'o']),
    }
}

fn log_key(run: &str, seq: u64) -> Vec<u8> {
    let mut k = run.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Applies `edits` to keyspace `log` with raw fjall: `Some(bytes)` overwrites the
/// record, `None` deletes it.
fn damage(dir: &Path, edits: &[(&str, u64, Option<Vec<u8>>)]) {
    let db = Database::builder(dir).open().expect("raw open");
    let log = db
        .keyspace("log", KeyspaceCreateOptions::default)
        .expect("log keyspace");
    for (run, seq, value) in edits {
        let key = log_key(run, *seq);
        assert!(
            log.contains_key(&key).expect("contains"),
            "{run}/{seq} exists"
        );
        match value {
            Some(bytes) => log.insert(key, bytes.as_slice()).expect("insert"),
            None => log.remove(key).expect("remove"),
        }
    }
    db.persist(PersistMode::SyncAll).expect("persist");
}

fn assert_corrupt(result: reel_storage::Result<Vec<Event>>, run: &str, seq: u64) {
    match result {
        Err(
            ref e @ StorageError::Corrupt {
                run_id: ref r,
                seq: s,
                ..
            },
        ) => {
            assert_eq!((r.as_str(), s), (run, seq), "{e}");
            assert!(!e.is_retryable());
            assert!(e.to_string().contains(run), "{e}");
        }
        other => panic!("{run}: expected Corrupt at {seq}, got {other:?}"),
    }
}

#[tokio::test]
async fn damaged_records_are_reported_with_run_and_seq() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    for run in RUNS {
        store
            .submit(Append {
                run_id: (*run).into(),
                expected_seq: Some(0),
                events: (0..LEN).map(|s| event(run, s)).collect(),
                durable: true,
                ..Append::default()
            })
            .await
            .expect("append");
    }
    store.close();
    drop(store);

    let valid = event("truncated", 3).encode().expect("encode");
    damage(
        dir.path(),
        &[
            ("garbage", 2, Some(vec![0xc1, 0xde, 0xad, 0xbe, 0xef])),
            ("empty", 0, Some(Vec::new())),
            ("truncated", 3, Some(valid[..valid.len() / 2].to_vec())),
            ("wrong-shape", 4, Some(vec![0x05])), // valid MessagePack, not an Event
            ("gap", 2, None),
            ("last", LEN - 1, Some(vec![0xff; 3])),
        ],
    );

    let store = FjallStore::open(dir.path()).expect("reopen a damaged store");
    assert_corrupt(store.read_log("garbage"), "garbage", 2);
    assert_corrupt(store.read_log("empty"), "empty", 0);
    assert_corrupt(store.read_log("truncated"), "truncated", 3);
    assert_corrupt(store.read_log("wrong-shape"), "wrong-shape", 4);
    assert_corrupt(store.read_log("gap"), "gap", 2);
    assert_corrupt(store.read_log("last"), "last", LEN - 1);

    // last_event decodes only the last record.
    match store.last_event("last") {
        Err(StorageError::Corrupt { run_id, seq, .. }) => {
            assert_eq!((run_id.as_str(), seq), ("last", LEN - 1));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(
        store.last_event("garbage").expect("last_event"),
        Some((LEN - 1, event("garbage", LEN - 1)))
    );

    // The healthy run is untouched, and still takes appends.
    let healthy: Vec<Event> = (0..LEN).map(|s| event("healthy", s)).collect();
    assert_eq!(store.read_log("healthy").expect("healthy"), healthy);
    store
        .submit(Append {
            run_id: "healthy".into(),
            expected_seq: Some(LEN),
            events: vec![event("healthy", LEN)],
            durable: true,
            ..Append::default()
        })
        .await
        .expect("append to a healthy run of a damaged store");
    assert_eq!(
        store.read_log("healthy").expect("healthy").len() as u64,
        LEN + 1
    );

    // A damaged run's sequence check is unaffected by the damage (no silent reuse).
    let stale = store
        .submit(Append {
            run_id: "gap".into(),
            expected_seq: Some(2),
            events: vec![event("gap", 2)],
            durable: true,
            ..Append::default()
        })
        .await;
    assert!(
        matches!(stale, Err(StorageError::Conflict { actual, .. }) if actual == LEN),
        "{stale:?}"
    );
}
