//! A damaged record in the metadata, active-set or timer keyspace costs one run: the
//! scans return every good record and report the bad ones (keyspace, run when the key
//! names one, key, reason) instead of failing as a whole (invariant 8).

use std::path::Path;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel_storage::{
    Append, CorruptRecord, Event, Failure, FjallStore, LogReader, LogWriter, MetaReader, RunMeta,
    RunState, StorageError, Store, TimerEntry, TimerReader, encode_timer_key,
};

const RUNS: &[&str] = &["a", "bad-active", "bad-runs", "bad-timer", "z"];

fn meta(run: &str) -> RunMeta {
    RunMeta {
        run_id: run.into(),
        workflow: "wf".into(),
        version: 1,
        state: RunState::Suspended {
            waiting_on: "timer".into(),
            awaits_child: false,
        },
        created_at: 1,
        updated_at: 2,
        parent: None,
        segment_start: 0,
        segment: 0,
        queue: None,
    }
}

fn timer(run: &str) -> TimerEntry {
    TimerEntry {
        fire_at: 1_000,
        run_id: run.into(),
        timer_id: "t1".into(),
    }
}

/// Raw edits with fjall: `(keyspace, key, Some(value))` writes, `None` removes.
type Edit = (&'static str, Vec<u8>, Option<Vec<u8>>);

fn damage(dir: &Path, edits: Vec<Edit>) {
    let db = Database::builder(dir).open().expect("raw open");
    for (name, key, value) in edits {
        let ks = db
            .keyspace(name, KeyspaceCreateOptions::default)
            .expect("keyspace");
        match value {
            Some(v) => ks.insert(key, v).expect("insert"),
            None => ks.remove(key).expect("remove"),
        }
    }
    db.persist(PersistMode::SyncAll).expect("persist");
}

fn ids(metas: &[RunMeta]) -> Vec<&str> {
    metas.iter().map(|m| m.run_id.as_str()).collect()
}

#[tokio::test]
async fn scans_skip_and_report_damaged_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    for run in RUNS {
        store
            .submit(Append {
                run_id: (*run).into(),
                expected_seq: Some(0),
                events: vec![Event::TimerScheduled {
                    id: "t1".into(),
                    fire_at: 1_000,
                }],
                meta: Some(meta(run)),
                add_timers: vec![timer(run)],
                durable: true,
                ..Append::default()
            })
            .await
            .expect("append");
    }
    store.close();
    drop(store);

    // A timer key that still names its run (bad timer id), and one that names none.
    let mut named = 1_000u64.to_be_bytes().to_vec();
    named.extend_from_slice(b"bad-timer\0\xff\xfe");
    // Valid MessagePack of another run's metadata, filed under `z`.
    let misfiled = meta("a").encode().expect("encode");
    damage(
        dir.path(),
        vec![
            ("active", b"bad-active".to_vec(), Some(vec![0xc1, 0x00])),
            ("runs", b"bad-runs".to_vec(), Some(vec![0x93, 0x01])),
            ("runs", b"z".to_vec(), Some(misfiled)),
            ("timers", encode_timer_key(&timer("bad-timer")), None),
            ("timers", named.clone(), Some(Vec::new())),
            ("timers", vec![0, 1, 2], Some(Vec::new())),
        ],
    );

    let store = FjallStore::open(dir.path()).expect("reopen a damaged store");

    let active = store.unfinished_runs().expect("unfinished_runs");
    assert_eq!(ids(&active.items), ["a", "bad-runs", "bad-timer", "z"]);
    let [bad] = active.corrupt.as_slice() else {
        panic!("one corrupt active record: {:?}", active.corrupt)
    };
    assert_eq!(
        (bad.keyspace.as_str(), bad.run_id.as_deref(), bad.seq),
        ("active", Some("bad-active"), None)
    );
    assert_eq!(bad.key, b"bad-active");
    let text = bad.to_string();
    assert!(
        text.contains("`active`") && text.contains("bad-active"),
        "{text}"
    );

    let runs = store.list_runs().expect("list_runs");
    assert_eq!(ids(&runs.items), ["a", "bad-active", "bad-timer"]);
    let reported: Vec<(&str, Option<&str>)> = runs
        .corrupt
        .iter()
        .map(|c| (c.keyspace.as_str(), c.run_id.as_deref()))
        .collect();
    assert_eq!(reported, [("runs", Some("bad-runs")), ("runs", Some("z"))]);
    assert!(
        runs.corrupt[1].reason.contains("filed under"),
        "{:?}",
        runs.corrupt[1]
    );

    let timers = store.timers().expect("timers");
    let good: Vec<&str> = timers.items.iter().map(|t| t.run_id.as_str()).collect();
    assert_eq!(good, ["a", "bad-active", "bad-runs", "z"]);
    let bad_timers: Vec<(Option<&str>, &[u8])> = timers
        .corrupt
        .iter()
        .map(|c| (c.run_id.as_deref(), c.key.as_slice()))
        .collect();
    assert_eq!(
        bad_timers,
        [
            (Some("bad-timer"), named.as_slice()),
            (None, &[0u8, 1, 2][..])
        ]
    );
    assert!(timers.corrupt.iter().all(|c| c.keyspace == "timers"));

    // A single read of a damaged record is a typed error naming it.
    match store.get_run("bad-runs") {
        Err(ref e @ StorageError::CorruptRecord(ref r)) => {
            assert_eq!(r.run_id.as_deref(), Some("bad-runs"));
            assert!(!e.is_retryable());
            assert!(matches!(
                e.corruption(),
                Some(Failure::Corrupt { ref keyspace, ref run_id, seq: None, .. })
                    if keyspace == "runs" && run_id == "bad-runs"
            ));
        }
        other => panic!("expected CorruptRecord, got {other:?}"),
    }
    assert_eq!(store.get_run("a").expect("get_run"), Some(meta("a")));

    // The runs with damaged index records still take appends and keep their logs.
    assert_eq!(store.next_seq("bad-active").expect("next_seq"), 1);
    assert_eq!(store.next_seq("unknown").expect("next_seq"), 0);
    store
        .submit(Append {
            run_id: "bad-active".into(),
            expected_seq: Some(1),
            events: vec![Event::TimerFired { id: "t1".into() }],
            meta: Some(meta("bad-active")),
            durable: true,
            ..Append::default()
        })
        .await
        .expect("append to a run whose active record was damaged");
    assert_eq!(store.read_log("bad-active").expect("log").len(), 2);
    assert!(store.unfinished_runs().expect("rescan").corrupt.is_empty());
}

#[tokio::test]
async fn a_metadata_only_append_can_be_conditional_on_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    let append = |expected_seq, events: Vec<Event>, state| Append {
        run_id: "r".into(),
        expected_seq: Some(expected_seq),
        events,
        meta: Some(RunMeta { state, ..meta("r") }),
        durable: true,
        ..Append::default()
    };
    store
        .submit(append(
            0,
            vec![Event::TimerFired { id: "x".into() }],
            RunState::Running,
        ))
        .await
        .expect("first");
    let parked = RunState::Parked {
        error: Failure::Other("stale".into()),
    };
    // The log moved on (seq 1 is taken): a metadata change expecting 1 is refused...
    store
        .submit(append(
            1,
            vec![Event::TimerFired { id: "y".into() }],
            RunState::Completed,
        ))
        .await
        .expect("second");
    let refused = store.submit(append(1, Vec::new(), parked.clone())).await;
    assert!(
        matches!(refused, Err(StorageError::Conflict { actual: 2, .. })),
        "{refused:?}"
    );
    assert_eq!(
        store.get_run("r").expect("get").map(|m| m.state),
        Some(RunState::Completed)
    );
    assert!(
        store
            .unfinished_runs()
            .expect("unfinished")
            .items
            .is_empty()
    );
    // ...and one expecting the real next sequence lands, without adding events.
    store
        .submit(append(2, Vec::new(), parked.clone()))
        .await
        .expect("conditional metadata change");
    assert_eq!(
        store.get_run("r").expect("get").map(|m| m.state),
        Some(parked)
    );
    assert_eq!(store.next_seq("r").expect("next_seq"), 2);

    // Metadata of another run in an append is refused before it could be misfiled.
    let misfiled = store
        .submit(Append {
            run_id: "r".into(),
            meta: Some(meta("other")),
            ..Append::default()
        })
        .await;
    assert!(
        matches!(misfiled, Err(StorageError::Encode(_))),
        "{misfiled:?}"
    );
}

#[test]
fn corrupt_record_text_names_keyspace_run_and_place() {
    let r = CorruptRecord {
        keyspace: "timers".into(),
        run_id: Some("r-1".into()),
        seq: None,
        key: b"\x00\x01r-1\x00\xff".to_vec(),
        reason: "bad".into(),
    };
    assert_eq!(
        r.to_string(),
        "corrupt record in keyspace `timers` of run `r-1` (key `\\x00\\x01r-1\\x00\\xff`): bad"
    );
    let f = r.failure().expect("names a run");
    assert_eq!(f.to_string(), r.to_string());
    assert_eq!(CorruptRecord { run_id: None, ..r }.failure(), None);
}
