//! Many concurrent appenders (one run each) through the group-commit writer: every
//! acknowledged event is there, in order, after a reopen; and the metadata and
//! timer-index changes of an append land together with its events.

use std::sync::Arc;

use reel_storage::{
    Append, Event, FjallStore, LogReader, LogWriter, MetaReader, Payload, RunMeta, RunState, Store,
    TimerEntry, TimerReader,
};

const TASKS: usize = 200;
const APPENDS: u64 = 20;

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

fn event(task: usize, seq: u64) -> Event {
    if seq == 0 {
        Event::RunStarted {
            workflow: "wf".into(),
            version: 1,
            input: Payload(task.to_be_bytes().to_vec()),
        }
    } else if seq == APPENDS - 1 && task % 4 == 0 {
        Event::RunCompleted {
            output: Payload(vec![0xc3]),
        }
    } else {
        Event::StepCompleted {
            id: format!("step-{seq}"),
            output: Payload(seq.to_le_bytes().to_vec()),
        }
    }
}

/// Fire time of task `task`'s timer after append `seq`: unique, and not in task order.
fn fire_at(task: usize, seq: u64) -> u64 {
    1_000_000 + seq * 10_000 + ((task * 7919) % TASKS) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appenders_all_land_in_order_with_meta_and_timers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");

    let mut tasks = Vec::with_capacity(TASKS);
    for task in 0..TASKS {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let run = format!("run-{task:04}");
            for seq in 0..APPENDS {
                let finished = seq == APPENDS - 1 && task % 4 == 0;
                let state = if finished {
                    RunState::Completed
                } else {
                    RunState::Suspended {
                        waiting_on: format!("timer after {seq}"),
                        awaits_child: false,
                    }
                };
                let remove_timers = if seq == 0 {
                    Vec::new()
                } else {
                    vec![timer(&run, "t", fire_at(task, seq - 1))]
                };
                let add_timers = if finished {
                    Vec::new()
                } else {
                    vec![timer(&run, "t", fire_at(task, seq))]
                };
                store
                    .submit(Append {
                        writer: None,
                        at: None,
                        run_id: run.clone(),
                        expected_seq: Some(seq),
                        events: vec![event(task, seq)],
                        meta: Some(meta(&run, state, seq)),
                        add_timers,
                        remove_timers,
                        durable: true,
                        mail: None,
                        letters: Vec::new(),
                    })
                    .await
                    .unwrap_or_else(|e| panic!("{run} append {seq}: {e}"));
            }
        }));
    }
    for t in tasks {
        t.await.expect("appender task");
    }

    store.close();
    drop(store);
    let store = FjallStore::open(dir.path()).expect("reopen");

    for task in 0..TASKS {
        let run = format!("run-{task:04}");
        let expected: Vec<Event> = (0..APPENDS).map(|seq| event(task, seq)).collect();
        assert_eq!(store.read_log(&run).expect("read_log"), expected, "{run}");
        assert_eq!(
            store.last_event(&run).expect("last_event").map(|(s, _)| s),
            Some(APPENDS - 1)
        );
        let m = store.get_run(&run).expect("get_run").expect("meta present");
        assert_eq!(
            m.updated_at,
            APPENDS - 1,
            "{run}: metadata of the last append"
        );
        assert_eq!(m.state.is_finished(), task % 4 == 0, "{run}: {:?}", m.state);
    }

    let all = store.list_runs().expect("list_runs").items;
    assert_eq!(all.len(), TASKS);
    assert!(
        all.windows(2).all(|w| w[0].run_id < w[1].run_id),
        "ordered by run id"
    );

    let unfinished = store.unfinished_runs().expect("unfinished_runs").items;
    assert_eq!(unfinished.len(), TASKS - TASKS / 4);
    assert!(unfinished.iter().all(|m| !m.state.is_finished()));
    assert!(
        unfinished.iter().all(|m| m.updated_at == APPENDS - 1),
        "the active index holds the latest metadata"
    );

    // One timer per unfinished run (each append replaced the previous one), the
    // finished runs' timers removed, all sorted by due time.
    let timers = store.timers().expect("timers").items;
    let mut expected: Vec<TimerEntry> = (0..TASKS)
        .filter(|task| task % 4 != 0)
        .map(|task| timer(&format!("run-{task:04}"), "t", fire_at(task, APPENDS - 1)))
        .collect();
    expected.sort();
    assert_eq!(timers, expected);
    assert!(timers.windows(2).all(|w| w[0].fire_at <= w[1].fire_at));
}

#[tokio::test]
async fn meta_and_timer_changes_land_with_the_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    let started = Event::RunStarted {
        workflow: "wf".into(),
        version: 1,
        input: Payload::default(),
    };

    // Three runs, timers submitted out of due-time order.
    store
        .submit(Append {
            run_id: "a".into(),
            expected_seq: Some(0),
            events: vec![started.clone()],
            meta: Some(meta("a", RunState::Running, 1)),
            add_timers: vec![timer("a", "sleep", 300)],
            durable: true,
            ..Append::default()
        })
        .await
        .expect("a");
    store
        .submit(Append {
            run_id: "b".into(),
            expected_seq: Some(0),
            events: vec![
                started.clone(),
                Event::TimerScheduled {
                    id: "t1".into(),
                    fire_at: 200,
                },
                Event::TimerScheduled {
                    id: "t2".into(),
                    fire_at: 100,
                },
            ],
            meta: Some(meta(
                "b",
                RunState::Suspended {
                    waiting_on: "timers".into(),
                    awaits_child: false,
                },
                1,
            )),
            add_timers: vec![timer("b", "t1", 200), timer("b", "t2", 100)],
            durable: false,
            ..Append::default()
        })
        .await
        .expect("b");
    store
        .submit(Append {
            run_id: "c".into(),
            expected_seq: Some(0),
            events: vec![
                started.clone(),
                Event::RunCompleted {
                    output: Payload::default(),
                },
            ],
            meta: Some(meta("c", RunState::Completed, 1)),
            durable: true,
            ..Append::default()
        })
        .await
        .expect("c");

    let ids = |metas: Vec<RunMeta>| metas.into_iter().map(|m| m.run_id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.unfinished_runs().expect("unfinished").items),
        ["a", "b"]
    );
    assert_eq!(ids(store.list_runs().expect("list").items), ["a", "b", "c"]);
    assert_eq!(
        store.get_run("c").expect("get_run").map(|m| m.state),
        Some(RunState::Completed)
    );
    assert_eq!(store.get_run("zzz").expect("get_run"), None);
    assert_eq!(
        store.timers().expect("timers").items,
        [
            timer("b", "t2", 100),
            timer("b", "t1", 200),
            timer("a", "sleep", 300)
        ]
    );

    // b's first timer fires: the event, the wake-up and the index removal together.
    store
        .submit(Append {
            run_id: "b".into(),
            expected_seq: Some(3),
            events: vec![Event::TimerFired { id: "t2".into() }],
            meta: Some(meta("b", RunState::Running, 2)),
            remove_timers: vec![timer("b", "t2", 100)],
            durable: true,
            ..Append::default()
        })
        .await
        .expect("b fires");
    assert_eq!(
        store.timers().expect("timers").items,
        [timer("b", "t1", 200), timer("a", "sleep", 300)]
    );
    assert_eq!(
        store.get_run("b").expect("get_run").map(|m| m.updated_at),
        Some(2)
    );

    // Removing a timer that is not there is harmless; a finished run leaves the active
    // index in the same write that records its end.
    store
        .submit(Append {
            run_id: "a".into(),
            expected_seq: Some(1),
            events: vec![Event::RunFailed {
                error: reel_storage::Failure::Other("gave up".into()),
            }],
            meta: Some(meta(
                "a",
                RunState::Failed {
                    error: reel_storage::Failure::Other("gave up".into()),
                },
                3,
            )),
            remove_timers: vec![timer("a", "sleep", 300), timer("a", "never-added", 5)],
            durable: true,
            ..Append::default()
        })
        .await
        .expect("a fails");
    assert_eq!(
        ids(store.unfinished_runs().expect("unfinished").items),
        ["b"]
    );
    assert_eq!(
        store.timers().expect("timers").items,
        [timer("b", "t1", 200)]
    );

    // A metadata-only write (no events, no sequence number) is allowed too.
    store
        .submit(Append {
            run_id: "b".into(),
            meta: Some(meta(
                "b",
                RunState::Cancelled {
                    reason: "op".into(),
                },
                4,
            )),
            remove_timers: vec![timer("b", "t1", 200)],
            durable: true,
            ..Append::default()
        })
        .await
        .expect("b meta only");
    assert!(
        store
            .unfinished_runs()
            .expect("unfinished")
            .items
            .is_empty()
    );
    assert!(store.timers().expect("timers").items.is_empty());
    assert_eq!(store.read_log("b").expect("read_log").len(), 4);

    // The same after a reopen.
    store.close();
    drop(store);
    let store = FjallStore::open(dir.path()).expect("reopen");
    assert!(
        store
            .unfinished_runs()
            .expect("unfinished")
            .items
            .is_empty()
    );
    assert!(store.timers().expect("timers").items.is_empty());
    assert_eq!(ids(store.list_runs().expect("list").items), ["a", "b", "c"]);
    assert_eq!(
        store.get_run("a").expect("get_run").map(|m| m.updated_at),
        Some(3)
    );
    assert_eq!(store.read_log("a").expect("read_log").len(), 2);
}
