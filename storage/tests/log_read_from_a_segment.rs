//! A run that continued as new replays only its current segment: `read_log_from`
//! returns the log from a sequence number on (a gap past it is still corruption),
//! and `log_size` counts the events and stored bytes from there, and
//! `read_records` adds each record's sequence number and append time, on every
//! backend.

use std::sync::Arc;

use reel_storage::{Append, Event, FjallStore, MemStore, Payload, Store};

fn step(i: u64) -> Event {
    Event::StepCompleted {
        id: format!("s{i}"),
        output: Payload(vec![0; 100]),
    }
}

fn started() -> Event {
    Event::RunStarted {
        workflow: "wf".into(),
        version: 1,
        input: Payload::default(),
    }
}

async fn check(store: Arc<dyn Store>) {
    let mut events = vec![started()];
    events.extend((1..5).map(step));
    events.push(Event::ContinuedAsNew { carried: 0 });
    events.push(started());
    events.extend((5..8).map(step));
    store
        .submit(Append {
            run_id: "r".into(),
            expected_seq: Some(0),
            events: events.clone(),
            durable: true,
            ..Append::default()
        })
        .await
        .expect("append");
    // A neighbour whose id extends this one's is not read with it.
    store
        .submit(Append {
            run_id: "r2".into(),
            expected_seq: Some(0),
            events: vec![started()],
            durable: true,
            ..Append::default()
        })
        .await
        .expect("append");
    assert_eq!(store.read_log("r").expect("read"), events);
    assert_eq!(store.read_log_from("r", 6).expect("read"), events[6..]);
    assert!(store.read_log_from("r", 99).expect("read").is_empty());
    assert!(store.read_log_from("unknown", 0).expect("read").is_empty());
    let whole = store.log_size("r", 0).expect("size");
    let segment = store.log_size("r", 6).expect("size");
    assert_eq!((whole.events, segment.events), (10, 4));
    assert!(
        segment.bytes >= 3 * 100 && segment.bytes < whole.bytes,
        "{segment:?} {whole:?}"
    );
    assert_eq!(store.log_size("unknown", 0).expect("size").events, 0);
    // Records: the same events, numbered, each with the time it was appended.
    let records = store.read_records("r", 6).expect("records");
    assert_eq!(
        records.iter().map(|r| r.event.clone()).collect::<Vec<_>>(),
        events[6..]
    );
    assert_eq!(
        records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (6..10).collect::<Vec<u64>>()
    );
    let second = std::time::Duration::from_secs(1);
    for r in &records {
        let age = std::time::SystemTime::now()
            .duration_since(r.at)
            .expect("appended in the past");
        assert!(age < 60 * second, "record {} appended {age:?} ago", r.seq);
    }
}

#[tokio::test]
async fn fjall_reads_from_a_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FjallStore::open(dir.path()).expect("open");
    check(store.clone()).await;
    store.close();
}

#[tokio::test]
async fn memory_reads_from_a_segment() {
    check(Arc::new(MemStore::new())).await;
}
