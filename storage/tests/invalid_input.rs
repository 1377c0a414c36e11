//! Bad input gets a clear error through the ticket (or the reader), never a panic,
//! and writes nothing (invariant 8).

use reel_storage::{
    Append, Event, FjallStore, LogReader, LogWriter, MAX_TIMER_ID_BYTES, MetaReader, RunMeta,
    RunState, StorageError, Store, TimerEntry, TimerReader,
};

fn started() -> Event {
    Event::RunStarted {
        workflow: "wf".into(),
        version: 1,
        input: Default::default(),
    }
}

fn append(run: &str) -> Append {
    Append {
        at: None,
        run_id: run.into(),
        expected_seq: Some(0),
        events: vec![started()],
        writer: None,
        meta: Some(RunMeta {
            run_id: run.into(),
            workflow: "wf".into(),
            version: 1,
            state: RunState::Running,
            created_at: 0,
            updated_at: 0,
            parent: None,
            segment_start: 0,
            segment: 0,
            queue: None,
        }),
        add_timers: vec![TimerEntry {
            fire_at: 5,
            run_id: run.into(),
            timer_id: "t".into(),
        }],
        remove_timers: Vec::new(),
        durable: true,
        mail: None,
        letters: Vec::new(),
    }
}

fn assert_nothing_written(store: &FjallStore) {
    assert!(store.list_runs().expect("list_runs").items.is_empty());
    assert!(
        store
            .unfinished_runs()
            .expect("unfinished")
            .items
            .is_empty()
    );
    assert!(store.timers().expect("timers").items.is_empty());
}

#[tokio::test]
async fn invalid_run_ids_are_refused_through_the_ticket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    let too_long = "x".repeat(513);
    for bad in ["", "\0", "a\0b", "trailing\0", too_long.as_str()] {
        match store.submit(append(bad)).await {
            Err(StorageError::InvalidRunId(id)) => assert_eq!(id, bad),
            other => panic!("run id {bad:?}: expected InvalidRunId, got {other:?}"),
        }
        // Reading with such an id does not panic either (there is nothing to find).
        assert!(matches!(store.read_log(bad).as_deref(), Ok([]) | Err(_)));
        assert!(store.last_event(bad).is_ok_and(|e| e.is_none()) || store.last_event(bad).is_err());
        assert!(store.get_run(bad).is_ok_and(|m| m.is_none()) || store.get_run(bad).is_err());
    }
    assert_nothing_written(&store);

    // The longest valid id works.
    let longest = "y".repeat(512);
    store.submit(append(&longest)).await.expect("512-byte id");
    assert_eq!(store.read_log(&longest).expect("read_log"), vec![started()]);
}

#[tokio::test]
async fn timer_entry_with_invalid_run_id_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    for bad in ["", "a\0b"] {
        let mut a = append("good");
        a.add_timers[0].run_id = bad.into();
        match store.submit(a).await {
            Err(StorageError::InvalidRunId(id)) => assert_eq!(id, bad),
            other => panic!("timer run id {bad:?}: expected InvalidRunId, got {other:?}"),
        }
        let mut a = append("good");
        a.add_timers.clear();
        a.remove_timers = vec![TimerEntry {
            fire_at: 1,
            run_id: bad.into(),
            timer_id: "t".into(),
        }];
        assert!(matches!(
            store.submit(a).await,
            Err(StorageError::InvalidRunId(_))
        ));
    }
    assert!(store.read_log("good").expect("read_log").is_empty());
    assert_nothing_written(&store);
}

/// A timer id past the bound (a store key may not exceed 64 KiB in fjall, which
/// panics on a longer one) is refused through the ticket; the writer goes on.
#[tokio::test]
async fn a_timer_id_past_the_bound_is_refused_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    for long in [MAX_TIMER_ID_BYTES + 1, 70_000] {
        let mut a = append("good");
        a.add_timers[0].timer_id = "t".repeat(long);
        match store.submit(a).await {
            Err(StorageError::Encode(m)) => assert!(m.contains("timer id"), "{m}"),
            other => panic!("a timer id of {long} bytes: expected Encode, got {other:?}"),
        }
        let mut a = append("good");
        a.add_timers.clear();
        a.events.clear();
        a.meta = None;
        a.remove_timers = vec![TimerEntry {
            fire_at: 1,
            run_id: "good".into(),
            timer_id: "t".repeat(long),
        }];
        assert!(matches!(
            store.submit(a).await,
            Err(StorageError::Encode(_))
        ));
    }
    assert_nothing_written(&store);
    // At the bound it is an ordinary timer, and the writer still writes.
    let mut a = append("good");
    a.add_timers[0].timer_id = "t".repeat(MAX_TIMER_ID_BYTES);
    store.submit(a).await.expect("a timer id at the bound");
    assert_eq!(store.read_log("good").expect("read_log").len(), 1);
}

#[tokio::test]
async fn events_without_expected_seq_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    let mut a = append("run");
    a.expected_seq = None;
    match store.submit(a).await {
        Err(e @ StorageError::Encode(_)) => assert!(!e.is_retryable()),
        other => panic!("expected Encode, got {other:?}"),
    }
    assert!(store.read_log("run").expect("read_log").is_empty());
    assert_nothing_written(&store);

    // Metadata and timers alone need no sequence number.
    let mut a = append("run");
    a.expected_seq = None;
    a.events.clear();
    store.submit(a).await.expect("meta-only write");
    assert_eq!(store.unfinished_runs().expect("unfinished").items.len(), 1);
    assert_eq!(store.timers().expect("timers").items.len(), 1);
    assert!(store.read_log("run").expect("read_log").is_empty());
}

#[tokio::test]
async fn submit_and_read_after_close_give_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    store.submit(append("before")).await.expect("before close");
    store.close();
    store.close(); // idempotent

    assert!(matches!(
        store.submit(append("after")).await,
        Err(StorageError::Closed)
    ));
    // Invalid input is still reported as such, not as a panic.
    assert!(matches!(
        store.submit(append("")).await,
        Err(StorageError::InvalidRunId(_) | StorageError::Closed)
    ));
    assert!(matches!(
        store.read_log("before"),
        Err(StorageError::Closed)
    ));
    assert!(matches!(
        store.last_event("before"),
        Err(StorageError::Closed)
    ));
    assert!(matches!(store.get_run("before"), Err(StorageError::Closed)));
    assert!(matches!(store.list_runs(), Err(StorageError::Closed)));
    assert!(matches!(store.unfinished_runs(), Err(StorageError::Closed)));
    assert!(matches!(store.timers(), Err(StorageError::Closed)));
    assert!(!StorageError::Closed.is_retryable());
    drop(store);

    // What was acknowledged before the close is there; nothing after it.
    let store = FjallStore::open(dir.path()).expect("reopen");
    assert_eq!(store.read_log("before").expect("read_log"), vec![started()]);
    assert!(store.read_log("after").expect("read_log").is_empty());
}

/// Appends submitted and not awaited before `close` are still written: close waits
/// for the queue to drain, and every ticket gets an answer.
#[tokio::test]
async fn close_drains_queued_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    let tickets: Vec<_> = (0..50)
        .map(|i| store.submit(append(&format!("queued-{i}"))))
        .collect();
    store.close();
    for t in tickets {
        t.await.expect("queued append answered Ok");
    }
    drop(store);
    let store = FjallStore::open(dir.path()).expect("reopen");
    assert_eq!(store.list_runs().expect("list_runs").items.len(), 50);
    for i in 0..50 {
        assert_eq!(
            store.read_log(&format!("queued-{i}")).expect("read_log"),
            vec![started()]
        );
    }
}
