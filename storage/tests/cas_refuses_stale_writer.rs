//! Appends are compare-and-set on the next sequence number (invariant 4): of two
//! writers that expect the same sequence number exactly one lands, and the other is
//! refused with `Conflict` and writes nothing at all (no event, no metadata, no
//! timer change).

use reel_storage::{
    Append, Event, FjallStore, LogReader, LogWriter, MetaReader, RunMeta, RunState, StorageError,
    Store, TimerEntry, TimerReader,
};

fn meta(run: &str, state: RunState, updated_at: u64) -> RunMeta {
    RunMeta {
        run_id: run.into(),
        workflow: "wf".into(),
        version: 1,
        state,
        created_at: 1,
        updated_at,
        parent: None,
        segment_start: 0,
        segment: 0,
        queue: None,
    }
}

fn timer(run: &str, id: &str, fire_at: u64) -> TimerEntry {
    TimerEntry {
        fire_at,
        run_id: run.into(),
        timer_id: id.into(),
    }
}

fn step(id: &str) -> Event {
    Event::StepStarted {
        id: id.into(),
        attempt: 1,
    }
}

fn started() -> Event {
    Event::RunStarted {
        workflow: "wf".into(),
        version: 1,
        input: Default::default(),
    }
}

fn assert_conflict(result: reel_storage::Result<()>, run: &str, expected: u64, actual: u64) {
    match result {
        Err(
            ref e @ StorageError::Conflict {
                run_id: ref r,
                expected: exp,
                actual: act,
            },
        ) => {
            assert_eq!(
                (r.as_str(), exp, act),
                (run, expected, actual),
                "wrong conflict: {e}"
            );
            assert!(e.is_retryable());
        }
        other => {
            panic!("expected Conflict {{ expected: {expected}, actual: {actual} }}, got {other:?}")
        }
    }
}

#[tokio::test]
async fn wrong_expected_seq_on_fresh_run_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    for wrong in [1, 5, u64::MAX] {
        let result = store
            .submit(Append {
                run_id: "fresh".into(),
                expected_seq: Some(wrong),
                events: vec![started()],
                meta: Some(meta("fresh", RunState::Running, 9)),
                add_timers: vec![timer("fresh", "t", 100)],
                durable: true,
                ..Append::default()
            })
            .await;
        assert_conflict(result, "fresh", wrong, 0);
    }
    assert!(store.read_log("fresh").expect("read_log").is_empty());
    assert_eq!(store.last_event("fresh").expect("last_event"), None);
    assert_eq!(store.get_run("fresh").expect("get_run"), None);
    assert!(
        store
            .unfinished_runs()
            .expect("unfinished")
            .items
            .is_empty()
    );
    assert!(store.timers().expect("timers").items.is_empty());

    // The right sequence number still works afterwards.
    store
        .submit(Append {
            run_id: "fresh".into(),
            expected_seq: Some(0),
            events: vec![started()],
            durable: true,
            ..Append::default()
        })
        .await
        .expect("append at 0");
    assert_eq!(store.read_log("fresh").expect("read_log"), vec![started()]);
}

/// Two writers submit with the same `expected_seq` without waiting for each other
/// (so they usually share one group-commit batch): the first submitted wins.
#[tokio::test]
async fn concurrent_writers_with_same_expected_seq_one_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    for round in 0..20 {
        let run = format!("race-{round}");
        store
            .submit(Append {
                run_id: run.clone(),
                expected_seq: Some(0),
                events: vec![started()],
                meta: Some(meta(&run, RunState::Running, 1)),
                add_timers: vec![timer(&run, "base", 50)],
                durable: true,
                ..Append::default()
            })
            .await
            .expect("start");

        let writer = |name: &str, at: u64| Append {
            writer: None,
            at: None,
            run_id: run.clone(),
            expected_seq: Some(1),
            events: vec![step(name), step(&format!("{name}-2"))],
            meta: Some(meta(&run, RunState::Running, at)),
            add_timers: vec![timer(&run, name, at)],
            remove_timers: vec![timer(&run, "base", 50)],
            durable: true,
            mail: None,
            letters: Vec::new(),
        };
        let a = store.submit(writer("a", 100));
        let b = store.submit(writer("b", 200));
        let (a, b) = (a.await, b.await);
        a.expect("first submitted wins");
        assert_conflict(b, &run, 1, 3);

        assert_eq!(
            store.read_log(&run).expect("read_log"),
            vec![started(), step("a"), step("a-2")]
        );
        assert_eq!(
            store.get_run(&run).expect("get_run").map(|m| m.updated_at),
            Some(100),
            "the loser's metadata must not be applied"
        );
        let timers: Vec<TimerEntry> = store
            .timers()
            .expect("timers")
            .items
            .into_iter()
            .filter(|t| t.run_id == run)
            .collect();
        assert_eq!(
            timers,
            vec![timer(&run, "a", 100)],
            "the loser's timer changes must not be applied"
        );
    }
}

/// A stale writer that comes back after the winner was acknowledged is refused too,
/// and so is one that expects a sequence number ahead of the log.
#[tokio::test]
async fn stale_writer_after_acknowledged_append_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    let run = "stale";
    store
        .submit(Append {
            run_id: run.into(),
            expected_seq: Some(0),
            events: vec![started(), step("s1")],
            durable: true,
            ..Append::default()
        })
        .await
        .expect("first writer");

    for (expected, durable) in [(0, true), (1, false), (3, true)] {
        let result = store
            .submit(Append {
                run_id: run.into(),
                expected_seq: Some(expected),
                events: vec![step("stale")],
                meta: Some(meta(run, RunState::Completed, 7)),
                add_timers: vec![timer(run, "stale", 7)],
                durable,
                ..Append::default()
            })
            .await;
        assert_conflict(result, run, expected, 2);
    }
    assert_eq!(
        store.read_log(run).expect("read_log"),
        vec![started(), step("s1")]
    );
    assert_eq!(store.get_run(run).expect("get_run"), None);
    assert!(store.timers().expect("timers").items.is_empty());

    // Still refused after a reopen (the check reads the log, not only a cache).
    store.close();
    drop(store);
    let store = FjallStore::open(dir.path()).expect("reopen");
    let result = store
        .submit(Append {
            run_id: run.into(),
            expected_seq: Some(1),
            events: vec![step("stale")],
            durable: true,
            ..Append::default()
        })
        .await;
    assert_conflict(result, run, 1, 2);
    store
        .submit(Append {
            run_id: run.into(),
            expected_seq: Some(2),
            events: vec![step("s2")],
            durable: true,
            ..Append::default()
        })
        .await
        .expect("the current writer goes on");
    assert_eq!(store.read_log(run).expect("read_log").len(), 3);
}

/// The writer that finishes a run and a stale writer queued right behind it (same
/// `expected_seq`, same group-commit batch): the stale one must still be refused,
/// and the acknowledged terminal event must not be overwritten.
#[tokio::test]
async fn stale_writer_behind_finishing_writer_in_same_batch_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    for round in 0..30 {
        let run = format!("fin-{round}");
        store
            .submit(Append {
                run_id: run.clone(),
                expected_seq: Some(0),
                events: vec![started()],
                meta: Some(meta(&run, RunState::Running, 1)),
                durable: true,
                ..Append::default()
            })
            .await
            .expect("start");

        // Keep the writer thread busy with an fsync so that the next two queue up
        // behind it and are drained into one batch.
        let blocker = store.submit(Append {
            run_id: format!("blocker-{round}"),
            expected_seq: Some(0),
            events: vec![started()],
            durable: true,
            ..Append::default()
        });
        let finish = store.submit(Append {
            run_id: run.clone(),
            expected_seq: Some(1),
            events: vec![Event::RunCompleted {
                output: Default::default(),
            }],
            meta: Some(meta(&run, RunState::Completed, 2)),
            durable: true,
            ..Append::default()
        });
        let stale = store.submit(Append {
            run_id: run.clone(),
            expected_seq: Some(1),
            events: vec![step("stale")],
            meta: Some(meta(&run, RunState::Running, 3)),
            durable: true,
            ..Append::default()
        });
        blocker.await.expect("blocker");
        finish.await.expect("finishing writer");
        assert_conflict(stale.await, &run, 1, 2);

        assert_eq!(
            store.read_log(&run).expect("read_log"),
            vec![
                started(),
                Event::RunCompleted {
                    output: Default::default()
                }
            ]
        );
        let m = store.get_run(&run).expect("get_run").expect("meta");
        assert_eq!((m.state, m.updated_at), (RunState::Completed, 2));
        assert!(
            store
                .unfinished_runs()
                .expect("unfinished")
                .items
                .iter()
                .all(|m| m.run_id != run)
        );
    }
}
