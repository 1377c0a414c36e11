//! The store keeps its data across close/drop and reopen, refuses a store written in
//! another format with `IncompatibleFormat` (never misreads it), and a second open of
//! a directory that is in use is an error, not a panic.

use std::path::Path;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel_storage::{
    Append, Event, FORMAT_VERSION, FjallStore, LogReader, LogWriter, MetaReader, RunMeta, RunState,
    StorageError, Store, TimerEntry, TimerReader,
};

fn started(n: u32) -> Event {
    Event::RunStarted {
        workflow: "wf".into(),
        version: n,
        input: Default::default(),
    }
}

async fn write_run(store: &FjallStore, run: &str, durable: bool) {
    store
        .submit(Append {
            writer: None,
            at: None,
            run_id: run.into(),
            expected_seq: Some(0),
            events: vec![started(1), started(2)],
            meta: Some(RunMeta {
                run_id: run.into(),
                workflow: "wf".into(),
                version: 1,
                state: RunState::Running,
                created_at: 10,
                updated_at: 20,
                parent: None,
                segment_start: 0,
                segment: 0,
                queue: None,
            }),
            add_timers: vec![TimerEntry {
                fire_at: 42,
                run_id: run.into(),
                timer_id: "t".into(),
            }],
            remove_timers: Vec::new(),
            durable,
            mail: None,
            letters: Vec::new(),
        })
        .await
        .expect("append");
}

fn assert_run(store: &FjallStore, run: &str) {
    assert_eq!(
        store.read_log(run).expect("read_log"),
        vec![started(1), started(2)]
    );
    assert_eq!(
        store.get_run(run).expect("get_run").map(|m| m.updated_at),
        Some(20)
    );
    assert!(
        store
            .timers()
            .expect("timers")
            .items
            .iter()
            .any(|t| t.run_id == run)
    );
}

/// Sets (or, with `None`, removes) the format marker with raw fjall.
fn tamper_format(dir: &Path, value: Option<&str>) {
    let db = Database::builder(dir).open().expect("raw open");
    let reel = db
        .keyspace("reel", KeyspaceCreateOptions::default)
        .expect("reel keyspace");
    match value {
        Some(v) => reel.insert("format", v).expect("insert"),
        None => reel.remove("format").expect("remove"),
    }
    db.persist(PersistMode::SyncAll).expect("persist");
}

fn tamper_check(dir: &Path, expected: &str) {
    let db = Database::builder(dir).open().expect("raw open");
    let reel = db
        .keyspace("reel", KeyspaceCreateOptions::default)
        .expect("reel keyspace");
    let found = reel.get("format").expect("get").expect("a marker");
    assert_eq!(&*found, expected.as_bytes());
}

#[tokio::test]
async fn reopen_after_drop_or_close_keeps_data() {
    let dir = tempfile::tempdir().expect("tempdir");

    // Dropped without an explicit close; the last write was not durable.
    let store = FjallStore::open(dir.path()).expect("open");
    write_run(&store, "dropped", false).await;
    drop(store);

    // Closed while the handle is still alive: the directory is released anyway.
    let store = FjallStore::open(dir.path()).expect("reopen after drop");
    assert_run(&store, "dropped");
    write_run(&store, "closed", true).await;
    store.close();
    let again = FjallStore::open(dir.path()).expect("reopen after close");
    assert_run(&again, "dropped");
    assert_run(&again, "closed");
    assert_eq!(again.list_runs().expect("list_runs").items.len(), 2);
    drop(store);
    drop(again);

    let store = FjallStore::open(dir.path()).expect("third open");
    assert_eq!(store.unfinished_runs().expect("unfinished").items.len(), 2);
    assert_eq!(store.timers().expect("timers").items.len(), 2);
}

#[tokio::test]
async fn other_format_version_is_refused_and_left_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    write_run(&store, "r", true).await;
    store.close();
    drop(store);

    tamper_format(dir.path(), Some("reel-log/999"));
    for _ in 0..2 {
        // Refused each time: a failed open releases the directory and changes nothing.
        match FjallStore::open(dir.path()) {
            Err(StorageError::IncompatibleFormat { found, expected }) => {
                assert_eq!(found, "reel-log/999");
                assert_eq!(expected, FORMAT_VERSION);
            }
            other => panic!("expected IncompatibleFormat, got {other:?}"),
        }
    }

    // A store with data but no marker at all is refused too, not adopted.
    tamper_format(dir.path(), None);
    match FjallStore::open(dir.path()) {
        Err(e @ StorageError::IncompatibleFormat { .. }) => {
            assert!(!e.is_retryable());
            assert!(e.to_string().contains(FORMAT_VERSION), "{e}");
        }
        other => panic!("expected IncompatibleFormat, got {other:?}"),
    }

    // Put the right marker back: the data is all there.
    tamper_format(dir.path(), Some(FORMAT_VERSION));
    let store = FjallStore::open(dir.path()).expect("open with the right format");
    assert_run(&store, "r");
}

#[tokio::test]
async fn previous_format_is_upgraded_and_its_runs_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    write_run(&store, "r", true).await;
    store.close();
    drop(store);

    for old in ["reel-log/1", "reel-log/2", "reel-log/3", "reel-log/4"] {
        tamper_format(dir.path(), Some(old));
        let store = FjallStore::open(dir.path()).expect("an older store opens");
        assert_run(&store, "r");
        store.close();
        drop(store);
        // The marker now says the current format: a second open needs no upgrade.
        tamper_check(dir.path(), FORMAT_VERSION);
    }
}

#[tokio::test]
async fn second_open_while_in_use_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    write_run(&store, "r", true).await;

    let second = FjallStore::open(dir.path());
    match second {
        Err(StorageError::Locked { path }) => assert_eq!(path, dir.path()),
        other => panic!("expected Locked naming the directory, got {other:?}"),
    }
    // The first handle is unaffected.
    assert_run(&store, "r");
    write_run(&store, "s", true).await;
    drop(store);

    let store = FjallStore::open(dir.path()).expect("open after the first is gone");
    assert_run(&store, "r");
    assert_run(&store, "s");
}

#[tokio::test]
async fn creation_is_atomic_and_leftovers_of_a_killed_creation_are_dropped() {
    let parent = tempfile::tempdir().expect("tempdir");
    let path = parent.path().join("store");
    // What a process killed while creating the store leaves behind: a staging
    // directory with part of a database in it, and maybe the empty target.
    let staging = parent.path().join(".store.creating");
    std::fs::create_dir_all(staging.join("keyspaces/1")).expect("staging");
    std::fs::write(staging.join("half-written"), b"junk").expect("junk");
    std::fs::create_dir_all(&path).expect("empty target");

    let store = FjallStore::open(&path).expect("open over the leftovers");
    assert!(!staging.exists(), "the staging directory is gone");
    write_close_reopen(store, &path).await;
}

/// Writes a run to a store just created over a killed creation's leftovers, closes
/// it, checks its format marker, and reads the run back after a reopen.
async fn write_close_reopen(store: std::sync::Arc<FjallStore>, path: &Path) {
    write_run(&store, "r", true).await;
    store.close();
    drop(store);
    tamper_check(path, FORMAT_VERSION);
    let store = FjallStore::open(path).expect("reopen");
    assert_run(&store, "r");
}

#[tokio::test]
async fn a_creation_killed_in_place_is_created_anew() {
    let parent = tempfile::tempdir().expect("tempdir");
    let path = parent.path().join("store");
    // What a process killed while creating the store in place leaves behind: the
    // marker it makes first, and part of a database.
    std::fs::create_dir_all(path.join("keyspaces/1")).expect("half-made store");
    std::fs::write(path.join("reel-creating"), b"").expect("marker");
    std::fs::write(path.join("half-written"), b"junk").expect("junk");

    let store = FjallStore::open(&path).expect("open over the leftovers");
    assert!(!path.join("reel-creating").exists(), "the marker is gone");
    assert!(
        !path.join("half-written").exists(),
        "the leftovers are gone"
    );
    write_close_reopen(store, &path).await;
}

/// A new store is used as created, not closed and reopened first: fjall creates its
/// journal at full length, and only a journal written in place spares each
/// fdatasync a commit of the file's new size (a reopened journal is cut to its
/// content and appended to). The journal's name and length are fjall's.
#[tokio::test]
async fn a_new_store_writes_into_the_journal_fjall_preallocated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("create");
    write_run(&store, "r", true).await;
    let journals: Vec<u64> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jnl"))
        .map(|e| e.metadata().expect("metadata").len())
        .collect();
    assert_eq!(journals.len(), 1, "one active journal: {journals:?}");
    assert!(
        journals[0] >= 1 << 20,
        "the active journal keeps its preallocated length, found {} bytes",
        journals[0]
    );
    store.close();
}
