//! Appends one task submits without waiting in between share the writer's commits
//! (and so its fdatasyncs): committing a lone append on its caller's thread must not
//! turn a burst (one task starting many runs, a handler whose parallel steps finish
//! in one poll) into one commit per append.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use reel_storage::{Append, Event, FjallStore, LogReader, LogWriter, Payload, Store};

const RUNS: usize = 200;

fn started(run: usize) -> Event {
    Event::RunStarted {
        workflow: "wf".into(),
        version: 1,
        input: Payload(run.to_be_bytes().to_vec()),
    }
}

fn append(run_id: String, seq: u64, event: Event) -> Append {
    Append {
        run_id,
        expected_seq: Some(seq),
        events: vec![event],
        durable: true,
        ..Append::default()
    }
}

#[test]
fn a_burst_of_appends_from_one_task_shares_commits() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the test's metrics recorder");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    rt.block_on(async {
        let store = FjallStore::open(dir.path()).expect("open");
        // A lone append, so that the burst's first append finds the writer idle.
        store
            .submit(append("lone".into(), 0, started(0)))
            .await
            .expect("lone append");
        let before = commits(&snapshotter);
        // Several appends of one run, then one each of many runs, all submitted
        // before any answer is awaited.
        let mut tickets: Vec<_> = (0..5)
            .map(|seq| store.submit(append("lone".into(), seq + 1, started(0))))
            .collect();
        tickets.extend((0..RUNS).map(|i| store.submit(append(format!("run-{i}"), 0, started(i)))));
        for result in futures::future::join_all(tickets).await {
            result.expect("append");
        }
        let burst = commits(&snapshotter) - before;
        assert!(
            burst < (RUNS + 5) / 4,
            "{} appends submitted at once took {burst} commits",
            RUNS + 5
        );
        // Many runs, each append awaited as soon as it is submitted (what a task
        // awaiting many starts at once does): an answer awaited at once must not
        // make the next run's append a lone one.
        store
            .submit(append("lone".into(), 6, started(0)))
            .await
            .expect("lone append");
        let before = commits(&snapshotter);
        let each = (0..RUNS).map(|i| {
            let store = &store;
            async move {
                store
                    .submit(append(format!("awaited-{i}"), 0, started(i)))
                    .await
            }
        });
        for result in futures::future::join_all(each).await {
            result.expect("append");
        }
        let burst = commits(&snapshotter) - before;
        assert!(
            burst < RUNS / 4,
            "{RUNS} appends awaited one by one in one poll took {burst} commits"
        );
        assert_eq!(store.read_log("lone").expect("read").len(), 7);
        for i in 0..RUNS {
            assert_eq!(
                store.read_log(&format!("run-{i}")).expect("read"),
                vec![started(i)]
            );
        }
        store.close();
    });
}

/// How many batches the store has committed: samples of its batch-size histogram.
fn commits(snapshotter: &metrics_util::debugging::Snapshotter) -> usize {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == reel_storage::metrics::COMMIT_APPENDS)
        .map(|(.., value)| match value {
            DebugValue::Histogram(samples) => samples.len(),
            _ => 0,
        })
        .sum()
}
