//! Every `Event` variant (and every `Failure` variant inside `RunFailed` and
//! `ChildCompleted`) survives a trip through a real fjall store, in order, and
//! `last_event` names the last one with its sequence number.

use reel_storage::{
    Append, AttemptError, Event, Failure, FjallStore, LogReader, LogWriter, Payload, Store,
};

fn payload(s: &str) -> Payload {
    // A MessagePack str (fixstr or str8), so `Debug` renders it.
    let mut bytes = Vec::with_capacity(s.len() + 2);
    if s.len() < 32 {
        bytes.push(0xa0 | s.len() as u8);
    } else {
        bytes.push(0xd9);
        bytes.push(s.len() as u8);
    }
    bytes.extend_from_slice(s.as_bytes());
    Payload(bytes)
}

fn all_failures() -> Vec<Failure> {
    vec![
        Failure::Step {
            step: "charge".into(),
            message: "card declined".into(),
            attempts: vec![
                AttemptError {
                    attempt: 1,
                    error: "timeout".into(),
                },
                AttemptError {
                    attempt: 2,
                    error: "card declined".into(),
                },
            ],
        },
        Failure::ReplayDivergence {
            index: 7,
            expected: "StepStarted(charge)".into(),
            found: "TimerScheduled(timer#1)".into(),
        },
        Failure::VersionMismatch {
            workflow: "checkout".into(),
            version: 3,
        },
        Failure::UnknownWorkflow("nope".into()),
        Failure::Cancelled("user asked".into()),
        Failure::Codec("invalid type: string, expected u64".into()),
        Failure::Crashed("panicked at 'boom'".into()),
        Failure::Other("something else ✗".into()),
        Failure::UnknownRun("nobody".into()),
        Failure::RunFinished("done".into()),
        Failure::RunExists {
            run_id: "order-1".into(),
            workflow: "refund".into(),
        },
        Failure::WorkflowMismatch {
            run_id: "order-1".into(),
            expected: "checkout".into(),
            found: "refund".into(),
        },
        Failure::InvalidArgument("run id is empty".into()),
    ]
}

fn every_event() -> Vec<Event> {
    let mut events = vec![
        Event::RunStarted {
            workflow: "checkout".into(),
            version: 2,
            input: payload("order-42"),
        },
        Event::StepStarted {
            id: "charge".into(),
            attempt: 1,
        },
        Event::StepFailed {
            id: "charge".into(),
            attempt: 1,
            error: "timeout".into(),
            retry_at: Some(1_700_000_000_123),
        },
        Event::StepFailed {
            id: "charge".into(),
            attempt: 2,
            error: "timeout again".into(),
            retry_at: None,
        },
        Event::StepCompleted {
            id: "charge#2".into(),
            output: payload("receipt"),
        },
        Event::TimerScheduled {
            id: "timer#1".into(),
            fire_at: u64::MAX,
        },
        Event::TimerFired {
            id: "timer#1".into(),
        },
        Event::SignalAwaited {
            id: "signal#1".into(),
            name: "payment".into(),
            deadline: Some(0),
        },
        Event::SignalAwaited {
            id: "signal#2".into(),
            name: "payment".into(),
            deadline: None,
        },
        Event::SignalReceived {
            name: "payment".into(),
            signal_id: "evt-1".into(),
            payload: Payload(vec![0xc1, 0xff, 0x00]), // not valid MessagePack: stored as-is
        },
        Event::Recorded {
            id: "now#1".into(),
            kind: "now".into(),
            value: Payload(vec![0xcf, 1, 2, 3, 4, 5, 6, 7, 8]),
        },
        Event::ChildStarted {
            id: "child#1".into(),
            workflow: "ship".into(),
            version: 1,
            run_id: "order-42/ship".into(),
        },
        Event::ChildCompleted {
            id: "child#1".into(),
            result: Ok(payload("shipped")),
        },
        Event::ChildCompleted {
            id: "child#2".into(),
            result: Ok(Payload::default()),
        },
        Event::CancelRequested {
            reason: "operator".into(),
        },
        Event::RunCompleted {
            output: payload("done"),
        },
        Event::RunCancelled {
            reason: String::new(),
        },
        Event::Patched {
            id: "receipt-email".into(),
        },
        Event::Published {
            key: "stage".into(),
            value: payload("packed"),
        },
        Event::SignalIdsSeen {
            ids: vec!["evt-1".into(), String::new()],
        },
    ];
    for (i, failure) in all_failures().into_iter().enumerate() {
        events.push(Event::ChildCompleted {
            id: format!("child#{}", i + 3),
            result: Err(failure.clone()),
        });
        events.push(Event::RunFailed { error: failure });
    }
    events
}

#[tokio::test]
async fn every_event_kind_reads_back_equal_and_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    let events = every_event();

    // The 18 kinds are all there.
    let mut kinds: Vec<&str> = events.iter().map(Event::kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds.len(), 18, "kinds covered: {kinds:?}");

    assert_eq!(store.last_event("run-1").expect("last_event"), None);

    // Half one event per append, half in a single multi-event append.
    let split = events.len() / 2;
    for (seq, event) in events[..split].iter().enumerate() {
        store
            .submit(Append {
                run_id: "run-1".into(),
                expected_seq: Some(seq as u64),
                events: vec![event.clone()],
                durable: seq % 2 == 0,
                ..Append::default()
            })
            .await
            .expect("single append");
    }
    store
        .submit(Append {
            run_id: "run-1".into(),
            expected_seq: Some(split as u64),
            events: events[split..].to_vec(),
            durable: true,
            ..Append::default()
        })
        .await
        .expect("batch append");

    assert_eq!(store.read_log("run-1").expect("read_log"), events);
    let (seq, last) = store
        .last_event("run-1")
        .expect("last_event")
        .expect("some last event");
    assert_eq!(seq, events.len() as u64 - 1);
    assert_eq!(Some(&last), events.last());

    // A run whose id is a prefix of another's sees none of the other's events.
    assert_eq!(
        store.read_log("run-").expect("read_log"),
        Vec::<Event>::new()
    );
    assert_eq!(store.last_event("run").expect("last_event"), None);

    // And the same after a reopen.
    store.close();
    drop(store);
    let store = FjallStore::open(dir.path()).expect("reopen");
    assert_eq!(store.read_log("run-1").expect("read_log"), events);
    assert_eq!(
        store
            .last_event("run-1")
            .expect("last_event")
            .map(|(s, _)| s),
        Some(events.len() as u64 - 1)
    );
}
