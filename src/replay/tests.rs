//! Unit tests of the replay index.
use super::*;
use reel_storage::Payload;

fn p(v: u32) -> Payload {
    Payload(rmp_serde::to_vec(&v).unwrap_or_default())
}

fn start() -> Event {
    Event::RunStarted {
        workflow: "w".into(),
        version: 1,
        input: p(0),
    }
}

#[test]
fn step_ids_repeat_with_suffix() {
    let mut r = Replay::new(&Arc::new(vec![start()]), 0);
    assert_eq!(r.step_id("a"), "a");
    assert_eq!(r.step_id("a"), "a#2");
    assert_eq!(r.step_id("b"), "b");
    // A name that looks like a generated id gets a fresh one.
    assert_eq!(r.step_id("a#2"), "a#2#2");
    assert_eq!(r.positional("timer"), "timer#1");
    assert_eq!(r.positional("timer"), "timer#2");
}

/// The ids the first rule gave (every id kept in a set): logs written under it
/// must get the same ids now.
fn step_ids_by_set(names: &[String]) -> Vec<String> {
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut given: HashSet<String> = HashSet::new();
    names
        .iter()
        .map(|name| {
            loop {
                let n = counts.entry(name.clone()).or_insert(0);
                *n += 1;
                let id = if *n == 1 {
                    name.clone()
                } else {
                    format!("{name}#{n}")
                };
                if given.insert(id.clone()) {
                    break id;
                }
            }
        })
        .collect()
}

proptest::proptest! {
    /// Names built from a few atoms so that `a`, `a#2`, `a#2#2`, `a#02` and the
    /// like meet often.
    #[test]
    fn step_ids_match_the_set_rule(
        picks in proptest::collection::vec(
            proptest::collection::vec(0usize..6, 1..4), 0..40)
    ) {
        const ATOMS: [&str; 6] = ["a", "#2", "#3", "b", "#02", "#1"];
        let names: Vec<String> = picks
            .iter()
            .map(|p| p.iter().map(|&i| ATOMS[i]).collect())
            .collect();
        let mut r = Replay::new(&Arc::new(vec![start()]), 0);
        let got: Vec<String> = names.iter().map(|n| r.step_id(n)).collect();
        proptest::prop_assert_eq!(got, step_ids_by_set(&names));
    }
}

#[test]
fn divergence_names_first_mismatch_and_sticks() {
    let log = Arc::new(vec![
        start(),
        Event::StepStarted {
            id: "a".into(),
            attempt: 1,
        },
        Event::StepCompleted {
            id: "a".into(),
            output: p(1),
        },
        Event::TimerScheduled {
            id: "timer#1".into(),
            fire_at: 5,
        },
    ]);
    let mut r = Replay::new(&log, 0);
    assert_eq!(r.open("a", Kind::Step), Ok(Opened::Replayed));
    let e = r.open("b", Kind::Step).unwrap_err();
    assert_eq!(
        e,
        Error::ReplayDivergence {
            index: 3,
            expected: "timer `timer#1`".into(),
            found: "called step `b`".into()
        }
    );
    assert_eq!(r.open("timer#1", Kind::Timer), Err(e));
}

#[test]
fn handler_returning_early_diverges() {
    let log = Arc::new(vec![
        start(),
        Event::StepStarted {
            id: "a".into(),
            attempt: 1,
        },
    ]);
    let mut r = Replay::new(&log, 0);
    assert!(matches!(
        r.finish(),
        Err(Error::ReplayDivergence { index: 1, .. })
    ));
}

#[test]
fn walk_requires_recorded_openings_to_be_called() {
    let log = Arc::new(vec![
        start(),
        Event::StepStarted {
            id: "a".into(),
            attempt: 1,
        },
        Event::StepStarted {
            id: "b".into(),
            attempt: 1,
        },
    ]);
    let mut r = Replay::new(&log, 0);
    assert_eq!(r.open("a", Kind::Step), Ok(Opened::Replayed));
    assert_eq!(r.walk_opening(String::new), Ok(()));
    let e = r.walk_opening(|| "nothing else".into()).unwrap_err();
    assert_eq!(
        e,
        Error::ReplayDivergence {
            index: 2,
            expected: "step `b`".into(),
            found: "nothing else".into()
        }
    );
}

#[test]
fn retry_plans_follow_the_log() {
    let mut log = vec![
        start(),
        Event::StepStarted {
            id: "a".into(),
            attempt: 1,
        },
        Event::StepFailed {
            id: "a".into(),
            attempt: 1,
            error: "boom".into(),
            retry_at: Some(9),
        },
    ];
    let r = Replay::new(&Arc::new(log.clone()), 0);
    assert_eq!(
        r.plan_step("a"),
        StepPlan::WaitRetry {
            timer_id: "a/retry1".into(),
            attempt: 1,
            fire_at: 9
        }
    );
    log.push(Event::TimerFired {
        id: "a/retry1".into(),
    });
    let r = Replay::new(&Arc::new(log.clone()), 0);
    assert_eq!(
        r.plan_step("a"),
        StepPlan::Run {
            attempt: 2,
            record: true
        }
    );
    log.push(Event::StepStarted {
        id: "a".into(),
        attempt: 2,
    });
    let r = Replay::new(&Arc::new(log.clone()), 0);
    assert_eq!(
        r.plan_step("a"),
        StepPlan::Run {
            attempt: 2,
            record: false
        }
    );
    log.push(Event::StepFailed {
        id: "a".into(),
        attempt: 2,
        error: "again".into(),
        retry_at: None,
    });
    let r = Replay::new(&Arc::new(log), 0);
    assert!(StepRecord::read(&r.history, "a").done);
}

#[test]
fn numbered_ids_read_as_formatted() {
    for n in [0, 1, 2, 9, 10, 11, 99, 100, 12_345, u32::MAX] {
        assert_eq!(numbered("charge", n), format!("charge#{n}"));
    }
    assert_eq!(numbered("", 7), "#7");
}
