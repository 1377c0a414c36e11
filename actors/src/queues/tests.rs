//! Unit tests of the queues' admission state.

use super::*;

fn queues(limits: QueueLimits) -> Queues {
    Queues::new(&HashMap::from([("q".to_owned(), limits)]))
}

fn enqueue(qs: &Queues, run: &str, priority: i32) {
    let order = qs.reserve("q", run, None).unwrap();
    let entry = QueueEntry {
        name: "q".to_owned(),
        priority,
        order,
        dedup_key: None,
    };
    qs.enqueued(run, &entry);
}

fn names(a: &Admission) -> Vec<&str> {
    a.runs.iter().map(|r| &**r).collect()
}

#[test]
fn admits_by_priority_then_order_up_to_the_limit() {
    let qs = queues(QueueLimits {
        concurrency: Some(2),
        rate_limit: None,
    });
    enqueue(&qs, "a", 5);
    enqueue(&qs, "b", 1);
    enqueue(&qs, "c", 5);
    assert_eq!(names(&qs.take("q", 0)), ["b", "a"]);
    assert!(qs.take("q", 0).runs.is_empty());
    assert!(qs.ended("q", "a"));
    assert_eq!(names(&qs.take("q", 0)), ["c"]);
    assert_eq!(qs.sizes("q"), (0, 2));
}

#[test]
fn a_failed_admission_frees_the_slot_and_the_run_comes_back_in_its_place() {
    let qs = queues(QueueLimits {
        concurrency: Some(1),
        rate_limit: None,
    });
    let key = "k".to_owned();
    let order = qs.reserve("q", "a", Some(&key)).unwrap();
    let a = QueueEntry {
        name: "q".to_owned(),
        priority: 0,
        order,
        dedup_key: Some(key.clone()),
    };
    qs.enqueued("a", &a);
    enqueue(&qs, "b", 0);
    enqueue(&qs, "c", 0);
    assert_eq!(names(&qs.take("q", 0)), ["a"]);
    assert_eq!(qs.admission_failed("q", "a"), Some(1));
    // Aside, `a` keeps its key but not its slot.
    assert!(qs.reserve("q", "x", Some(&key)).is_err());
    assert_eq!(names(&qs.take("q", 0)), ["b"]);
    assert!(qs.ended("q", "b"));
    assert!(qs.requeue("a", &a));
    assert_eq!(names(&qs.take("q", 0)), ["a"]);
    assert_eq!(qs.admission_failed("q", "a"), Some(2));
    // Ended while aside (cancelled): not put back, its key free.
    assert!(!qs.ended("q", "a"));
    assert!(!qs.requeue("a", &a));
    assert_eq!(qs.admission_failed("q", "a"), None);
    qs.reserve("q", "x", Some(&key)).unwrap();
    assert_eq!(names(&qs.take("q", 0)), ["c"]);
}

#[test]
fn runs_owned_elsewhere_are_forgotten() {
    let qs = queues(QueueLimits {
        concurrency: Some(1),
        rate_limit: None,
    });
    for r in ["x-1", "x-2", "y-1"] {
        enqueue(&qs, r, 0);
    }
    assert_eq!(names(&qs.take("q", 0)), ["x-1"]);
    assert_eq!(qs.forget(|r| r.starts_with("x-")), ["q"]);
    assert_eq!(qs.sizes("q"), (1, 0));
    assert_eq!(names(&qs.take("q", 0)), ["y-1"]);
    assert!(qs.forget(|r| r.starts_with("x-")).is_empty());
}

#[test]
fn rate_limit_says_when_to_look_again() {
    let qs = queues(QueueLimits {
        concurrency: None,
        rate_limit: Some((2, Duration::from_millis(1000))),
    });
    for r in ["a", "b", "c"] {
        enqueue(&qs, r, 0);
    }
    let first = qs.take("q", 100);
    assert_eq!(names(&first), ["a", "b"]);
    assert_eq!(first.retry_at, Some(1100));
    assert!(qs.take("q", 1099).runs.is_empty());
    assert_eq!(names(&qs.take("q", 1100)), ["c"]);
}

#[test]
fn a_held_key_refuses_another_run_until_its_run_ends() {
    let qs = queues(QueueLimits::default());
    let key = "k".to_owned();
    qs.reserve("q", "a", Some(&key)).unwrap();
    assert!(matches!(
        qs.reserve("q", "b", Some(&key)),
        Err(ActorError::Deduplicated { run_id, .. }) if run_id == "a"
    ));
    // The same run asking again is let through (its write answers `Existing`).
    qs.reserve("q", "a", Some(&key)).unwrap();
    qs.ended("q", "a");
    qs.reserve("q", "b", Some(&key)).unwrap();
    assert!(matches!(
        qs.reserve("nope", "c", None),
        Err(ActorError::UnknownQueue(_))
    ));
}

#[test]
fn recovery_counts_admitted_runs_against_the_limit() {
    let qs = queues(QueueLimits {
        concurrency: Some(1),
        rate_limit: None,
    });
    let meta = |run: &str, state: RunState, order: u64| RunMeta {
        run_id: run.to_owned(),
        workflow: "w".to_owned(),
        version: 1,
        state,
        created_at: 0,
        updated_at: 0,
        parent: None,
        segment_start: 0,
        segment: 0,
        queue: Some(QueueEntry {
            name: "q".to_owned(),
            priority: 0,
            order,
            dedup_key: None,
        }),
    };
    qs.recover(
        &[
            meta("a", RunState::Running, 0),
            meta("b", RunState::Enqueued, 1),
        ],
        |_| true,
    );
    assert!(qs.take("q", 0).runs.is_empty());
    qs.ended("q", "a");
    assert_eq!(names(&qs.take("q", 0)), ["b"]);
    assert_eq!(qs.reserve("q", "c", None).unwrap(), 2);
}

#[test]
fn a_key_stays_held_while_another_start_of_its_run_is_being_written() {
    let qs = queues(QueueLimits {
        concurrency: Some(1),
        rate_limit: None,
    });
    let key = "k".to_owned();
    // Two starts of `a` with the key are under way; the first finds it was not
    // the one to create the run.
    qs.reserve("q", "a", Some(&key)).unwrap();
    qs.reserve("q", "a", Some(&key)).unwrap();
    qs.unreserve("q", "a");
    assert!(
        matches!(
            qs.reserve("q", "x", Some(&key)),
            Err(ActorError::Deduplicated { run_id, .. }) if run_id == "a"
        ),
        "the second start may still create `a` with the key"
    );
    // The second did not create it either: the key is free.
    qs.unreserve("q", "a");
    qs.reserve("q", "x", Some(&key)).unwrap();
}
