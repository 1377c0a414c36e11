//! Replaying an arbitrary log never panics and never hangs (issue 9): every log —
//! random events with the ids handlers really use, random strings, undecodable
//! payloads, events out of order or twice, terminal events in the middle, no
//! `RunStarted` or one whose input has the wrong type, and logs recorded by a real
//! host then truncated and mutated — replays with `reel::testing::replay` to
//! `Ok(Completed | Failed | Pending)` or a typed error (`ReplayDivergence`, `Codec`,
//! ...), against handlers with sequential steps and waits, a `try_join!`, a
//! `tokio::select!`, retried steps, recorded values, an approval, a child call,
//! patches and published values (`tests/replay_handlers`).
//!
//! The same property is fuzzed by `fuzz/fuzz_targets/replay_log.rs`.
//! `REEL_FUZZ_CASES` sets the number of cases of each property (default 512).

mod replay_handlers;

use std::sync::OnceLock;
use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use reel::{Approval, Event, Failure, Host, Payload};
use replay_handlers::{
    Approve, HANDLERS, IDS, Join, Leaf, Parent, Patches, Recorded, Retries, SIGNAL_NAMES, Select,
    Sequential, handler_name, replay_all,
};
use serde::Serialize;

/// Bound of one replay (a replay of these logs takes well under a millisecond).
const LIMIT: Duration = Duration::from_secs(2);

fn cases() -> u32 {
    std::env::var("REEL_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512)
}

fn enc<T: Serialize>(v: &T) -> Payload {
    Payload(rmp_serde::to_vec_named(v).expect("encode"))
}

// ---------------------------------------------------------------------------------
// Generators.

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => proptest::sample::select(&IDS[..]).prop_map(str::to_owned),
        1 => "[a-z#/0-9]{0,8}",
        1 => any::<String>(),
    ]
}

fn signal_name() -> impl Strategy<Value = String> {
    prop_oneof![
        5 => proptest::sample::select(&SIGNAL_NAMES[..]).prop_map(str::to_owned),
        1 => "[a-z:]{0,8}",
    ]
}

fn workflow_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0..HANDLERS).prop_map(|i| handler_name(i).to_owned()),
        1 => "[a-z]{0,6}",
    ]
}

/// Payloads: values of the types handlers decode (some of them the right one),
/// values of other types, and random bytes (mostly undecodable).
fn payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        any::<u32>().prop_map(|v| enc(&v)),
        any::<u64>().prop_map(|v| enc(&v)),
        any::<String>().prop_map(|v| enc(&v)),
        Just(enc(&())),
        any::<bool>().prop_map(|v| enc(&v)),
        (any::<bool>(), proptest::option::of(".{0,4}"))
            .prop_map(|(approved, feedback)| enc(&Approval { approved, feedback })),
        (any::<u64>(), any::<u32>()).prop_map(|(s, n)| enc(&std::time::SystemTime::UNIX_EPOCH
            .checked_add(Duration::new(s % (1 << 40), n % 1_000_000_000))
            .unwrap_or(std::time::UNIX_EPOCH))),
        any::<u128>().prop_map(|v| enc(&reel::Uuid::from_u128(v))),
        vec(any::<u8>(), 0..24).prop_map(Payload),
        // Deeply nested arrays: a decoder must not overflow the stack.
        (1usize..4000).prop_map(|n| Payload(vec![0x91; n])),
    ]
}

fn failure() -> impl Strategy<Value = Failure> {
    prop_oneof![
        (id(), ".{0,6}").prop_map(|(step, message)| Failure::Step {
            step,
            message,
            attempts: Vec::new(),
        }),
        ".{0,6}".prop_map(Failure::Other),
        ".{0,6}".prop_map(Failure::Cancelled),
        ".{0,6}".prop_map(Failure::Codec),
        (any::<u64>(), ".{0,4}", ".{0,4}").prop_map(|(index, expected, found)| {
            Failure::ReplayDivergence {
                index,
                expected,
                found,
            }
        }),
    ]
}

fn small_u32() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..5, 1 => any::<u32>()]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        1 => (workflow_name(), small_u32(), payload())
            .prop_map(|(workflow, version, input)| Event::RunStarted { workflow, version, input }),
        4 => (id(), small_u32()).prop_map(|(id, attempt)| Event::StepStarted { id, attempt }),
        4 => (id(), payload()).prop_map(|(id, output)| Event::StepCompleted { id, output }),
        2 => (id(), small_u32(), ".{0,6}", proptest::option::of(any::<u64>())).prop_map(
            |(id, attempt, error, retry_at)| Event::StepFailed { id, attempt, error, retry_at }
        ),
        3 => (id(), any::<u64>()).prop_map(|(id, fire_at)| Event::TimerScheduled { id, fire_at }),
        3 => id().prop_map(|id| Event::TimerFired { id }),
        1 => id().prop_map(|id| Event::TimerCancelled { id }),
        3 => (id(), signal_name(), proptest::option::of(any::<u64>()))
            .prop_map(|(id, name, deadline)| Event::SignalAwaited { id, name, deadline }),
        3 => (signal_name(), "[a-z0-9]{0,3}", payload())
            .prop_map(|(name, signal_id, payload)| Event::SignalReceived { name, signal_id, payload }),
        3 => (id(), prop_oneof![Just("now".to_owned()), Just("uuid".to_owned()),
                Just("random".to_owned()), "[a-z]{0,5}"], payload())
            .prop_map(|(id, kind, value)| Event::Recorded { id, kind, value }),
        2 => (id(), workflow_name(), small_u32(), prop_oneof![Just("kid".to_owned()), "[a-z]{0,4}"])
            .prop_map(|(id, workflow, version, run_id)| Event::ChildStarted { id, workflow, version, run_id }),
        2 => (id(), prop_oneof![payload().prop_map(Ok), failure().prop_map(Err)])
            .prop_map(|(id, result)| Event::ChildCompleted { id, result }),
        1 => ".{0,6}".prop_map(|reason| Event::CancelRequested { reason }),
        1 => payload().prop_map(|output| Event::RunCompleted { output }),
        1 => failure().prop_map(|error| Event::RunFailed { error }),
        1 => ".{0,6}".prop_map(|reason| Event::RunCancelled { reason }),
        2 => id().prop_map(|id| Event::Patched { id }),
        2 => (id(), payload()).prop_map(|(key, value)| Event::Published { key, value }),
    ]
}

/// How a generated log begins.
fn start() -> impl Strategy<Value = Vec<Event>> {
    prop_oneof![
        // A RunStarted with an input of the right type for some handler.
        6 => (0..HANDLERS, prop_oneof![
                any::<u32>().prop_map(|v| enc(&v)),
                Just(enc(&())),
                ".{0,6}".prop_map(|s| enc(&s)),
            ])
            .prop_map(|(h, input)| vec![Event::RunStarted {
                workflow: handler_name(h).to_owned(),
                version: 1,
                input,
            }]),
        // Any RunStarted (wrong type, undecodable).
        1 => event().prop_map(|e| vec![e]),
        // None: the log begins with whatever comes next.
        1 => Just(Vec::new()),
    ]
}

/// A value of a type some handler decodes there, or any payload.
fn value() -> impl Strategy<Value = Payload> {
    prop_oneof![
        2 => (0u32..10).prop_map(|v| enc(&v)),
        1 => "[a-z]{0,3}".prop_map(|v| enc(&v)),
        1 => payload(),
    ]
}

/// What a handler's primitive records: an opening event and its result, as a real
/// run would append them (so replay gets past the first events), or one random
/// event.
fn chunk() -> impl Strategy<Value = Vec<Event>> {
    let step_id = || proptest::sample::select(&["a", "a#2", "a#3", "b", "b#2"][..]);
    let n = || 1u32..4;
    prop_oneof![
        3 => event().prop_map(|e| vec![e]),
        4 => (step_id(), value()).prop_map(|(id, output)| vec![
            Event::StepStarted { id: id.to_owned(), attempt: 1 },
            Event::StepCompleted { id: id.to_owned(), output },
        ]),
        2 => (step_id(), n(), any::<bool>()).prop_map(|(id, attempt, retry)| {
            let mut v = vec![
                Event::StepStarted { id: id.to_owned(), attempt },
                Event::StepFailed {
                    id: id.to_owned(),
                    attempt,
                    error: "boom".to_owned(),
                    retry_at: retry.then_some(1),
                },
            ];
            if retry {
                let timer = format!("{id}/retry{attempt}");
                v.push(Event::TimerScheduled { id: timer.clone(), fire_at: 1 });
                v.push(Event::TimerFired { id: timer });
            }
            v
        }),
        2 => (n(), any::<bool>()).prop_map(|(k, fired)| {
            let id = format!("timer#{k}");
            let mut v = vec![Event::TimerScheduled { id: id.clone(), fire_at: 5 }];
            v.push(if fired { Event::TimerFired { id } } else { Event::TimerCancelled { id } });
            v
        }),
        2 => (n(), signal_name(), proptest::option::of(0u64..9), value(), any::<bool>())
            .prop_map(|(k, name, deadline, payload, received)| {
                let id = format!("signal#{k}");
                let mut v = vec![Event::SignalAwaited { id: id.clone(), name: name.clone(), deadline }];
                v.push(if received {
                    Event::SignalReceived { name, signal_id: format!("s{k}"), payload }
                } else {
                    Event::TimerFired { id }
                });
                v
            }),
        1 => (any::<bool>(), proptest::option::of("[a-z]{0,3}")).prop_map(|(approved, feedback)| vec![
            Event::SignalAwaited { id: "approval#1".to_owned(), name: "approval:boss".to_owned(), deadline: None },
            Event::SignalReceived {
                name: "approval:boss".to_owned(),
                signal_id: "ap".to_owned(),
                payload: enc(&Approval { approved, feedback }),
            },
        ]),
        2 => (proptest::sample::select(&["now", "uuid", "random"][..]), any::<u64>(), payload())
            .prop_map(|(kind, v, other)| {
                let value = match kind {
                    "now" => enc(&std::time::UNIX_EPOCH.checked_add(Duration::from_millis(v >> 24))
                        .unwrap_or(std::time::UNIX_EPOCH)),
                    "uuid" => enc(&reel::Uuid::from_u128(u128::from(v))),
                    _ if v % 5 == 0 => other,
                    _ => enc(&v),
                };
                vec![Event::Recorded { id: format!("{kind}#1"), kind: kind.to_owned(), value }]
            }),
        2 => proptest::sample::select(&["p", "q", "x"][..])
            .prop_map(|id| vec![Event::Patched { id: id.to_owned() }]),
        2 => value().prop_map(|value| vec![Event::Published { key: "stage".to_owned(), value }]),
        1 => (prop_oneof![value().prop_map(Ok), failure().prop_map(Err)], any::<bool>())
            .prop_map(|(result, done)| {
                let mut v = vec![Event::ChildStarted {
                    id: "child#1".to_owned(),
                    workflow: "leaf".to_owned(),
                    version: 1,
                    run_id: "kid".to_owned(),
                }];
                if done {
                    v.push(Event::ChildCompleted { id: "child#1".to_owned(), result });
                }
                v
            }),
    ]
}

fn arbitrary_log() -> impl Strategy<Value = Vec<Event>> {
    (start(), vec(chunk(), 0..12)).prop_map(|(mut log, rest)| {
        log.extend(rest.into_iter().flatten());
        log
    })
}

// ---------------------------------------------------------------------------------
// Logs recorded by a real host, then mutated.

/// One log per handler, recorded by an in-memory host (signals and the approval
/// sent, the retried step failing once per attempt below 2).
fn real_logs() -> &'static Vec<Vec<Event>> {
    static LOGS: OnceLock<Vec<Vec<Event>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), record_real_logs())
                .await
                .expect("recording the real logs hung")
                .expect("recording the real logs")
        })
    })
}

async fn record_real_logs() -> anyhow::Result<Vec<Vec<Event>>> {
    let host = Host::builder()
        .in_memory()
        .register(Sequential)
        .register(Join)
        .register(Select)
        .register(Retries)
        .register(Recorded)
        .register(Approve)
        .register(Parent)
        .register(Leaf)
        .register(Patches)
        .build()
        .await?;
    let mut logs = Vec::new();

    let run = host.start::<Sequential>("seq", 4).await?;
    run.signal("go", &"hello", "go-1").await?;
    run.result().await?;
    logs.push(run.events().await?);

    let run = host.start::<Join>("join", ()).await?;
    run.result().await?;
    logs.push(run.events().await?);

    // The signal wins the select: it is in the run's first write, before the
    // 5 ms timer exists (a signal sent after the start could lose to the timer on
    // a loaded machine, and find the run finished).
    let run = host
        .signal_with_start::<Select, _>("select-signal", "in".to_owned(), "go", &"sig", "go-1")
        .await?;
    run.result().await?;
    logs.push(run.events().await?);

    // The timer wins.
    let run = host
        .start::<Select>("select-timer", "in".to_owned())
        .await?;
    run.result().await?;
    logs.push(run.events().await?);

    let run = host.start::<Retries>("retries", 7).await?;
    run.result().await?;
    logs.push(run.events().await?);

    let run = host.start::<Recorded>("recorded", ()).await?;
    run.result().await?;
    logs.push(run.events().await?);

    let run = host.start::<Approve>("approve", ()).await?;
    run.approve("boss", true, Some("ok".to_owned())).await?;
    run.result().await?;
    logs.push(run.events().await?);

    let run = host.start::<Parent>("parent", 2).await?;
    run.result().await?;
    logs.push(run.events().await?);
    logs.push(host.handle::<Leaf>("kid").events().await?);

    let run = host.start::<Patches>("patches", 3).await?;
    run.signal("go", &"sig", "go-1").await?;
    run.result().await?;
    logs.push(run.events().await?);

    host.shutdown().await?;
    Ok(logs)
}

/// One change to a recorded log.
#[derive(Clone, Debug)]
enum Mutation {
    Truncate(usize),
    Drop(usize),
    Duplicate(usize),
    Swap(usize, usize),
    MoveToEnd(usize),
    FlipPayloadByte { event: usize, at: usize, xor: u8 },
    TruncatePayload { event: usize, len: usize },
    ReplacePayload(usize, Payload),
    Replace(usize, Event),
    Insert(usize, Event),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let ix = any::<prop::sample::Index>();
    prop_oneof![
        1 => ix.clone().prop_map(|i| Mutation::Truncate(i.index(usize::MAX))),
        2 => ix.clone().prop_map(|i| Mutation::Drop(i.index(usize::MAX))),
        2 => ix.clone().prop_map(|i| Mutation::Duplicate(i.index(usize::MAX))),
        2 => (ix.clone(), ix.clone())
            .prop_map(|(i, j)| Mutation::Swap(i.index(usize::MAX), j.index(usize::MAX))),
        1 => ix.clone().prop_map(|i| Mutation::MoveToEnd(i.index(usize::MAX))),
        3 => (ix.clone(), any::<usize>(), 1u8..)
            .prop_map(|(i, at, xor)| Mutation::FlipPayloadByte { event: i.index(usize::MAX), at, xor }),
        1 => (ix.clone(), any::<usize>())
            .prop_map(|(i, len)| Mutation::TruncatePayload { event: i.index(usize::MAX), len }),
        3 => (ix.clone(), value()).prop_map(|(i, p)| Mutation::ReplacePayload(i.index(usize::MAX), p)),
        1 => (ix.clone(), event()).prop_map(|(i, e)| Mutation::Replace(i.index(usize::MAX), e)),
        1 => (ix, event()).prop_map(|(i, e)| Mutation::Insert(i.index(usize::MAX), e)),
    ]
}

fn payload_mut(e: &mut Event) -> Option<&mut Vec<u8>> {
    match e {
        Event::RunStarted { input: p, .. }
        | Event::StepCompleted { output: p, .. }
        | Event::SignalReceived { payload: p, .. }
        | Event::Recorded { value: p, .. }
        | Event::ChildCompleted { result: Ok(p), .. }
        | Event::Published { value: p, .. }
        | Event::RunCompleted { output: p } => Some(&mut p.0),
        _ => None,
    }
}

fn apply(log: &mut Vec<Event>, m: &Mutation) {
    let n = log.len();
    if n == 0 {
        if let Mutation::Insert(_, e) = m {
            log.push(e.clone());
        }
        return;
    }
    match m {
        Mutation::Truncate(k) => log.truncate(k % (n + 1)),
        Mutation::Drop(i) => {
            log.remove(i % n);
        }
        Mutation::Duplicate(i) => {
            let e = log[i % n].clone();
            log.insert(i % n, e);
        }
        Mutation::Swap(i, j) => log.swap(i % n, j % n),
        Mutation::MoveToEnd(i) => {
            let e = log.remove(i % n);
            log.push(e);
        }
        Mutation::FlipPayloadByte { event, at, xor } => {
            if let Some(p) = payload_mut(&mut log[event % n]) {
                if !p.is_empty() {
                    let k = at % p.len();
                    p[k] ^= xor;
                }
            }
        }
        Mutation::TruncatePayload { event, len } => {
            if let Some(p) = payload_mut(&mut log[event % n]) {
                let k = len % (p.len() + 1);
                p.truncate(k);
            }
        }
        Mutation::ReplacePayload(i, new) => {
            if let Some(p) = payload_mut(&mut log[i % n]) {
                p.clone_from(&new.0);
            }
        }
        Mutation::Replace(i, e) => log[i % n] = e.clone(),
        Mutation::Insert(i, e) => log.insert(i % (n + 1), e.clone()),
    }
}

// ---------------------------------------------------------------------------------
// Properties.

fn assert_replays(log: &[Event]) -> Result<(), TestCaseError> {
    match replay_all(log, LIMIT) {
        Ok(_) => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!("{e}\nlog: {log:#?}"))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_logs_replay_to_a_result_or_a_typed_error(log in arbitrary_log()) {
        assert_replays(&log)?;
    }

    #[test]
    fn mutated_real_logs_replay_to_a_result_or_a_typed_error(
        which in any::<prop::sample::Index>(),
        mutations in vec(mutation(), 1..5),
    ) {
        let logs = real_logs();
        let mut log = which.get(logs).clone();
        for m in &mutations {
            apply(&mut log, m);
        }
        assert_replays(&log)?;
    }
}

/// The unmutated real logs replay to the handlers' results (the generators' baseline:
/// each handler completes on its own log).
#[test]
fn real_logs_complete() {
    let logs = real_logs();
    let names: Vec<&str> = logs
        .iter()
        .map(|l| match l.first() {
            Some(Event::RunStarted { workflow, .. }) => workflow.as_str(),
            _ => "?",
        })
        .collect();
    assert_eq!(
        names,
        [
            "sequential",
            "join",
            "select",
            "select",
            "retries",
            "recorded",
            "approve",
            "parent",
            "leaf",
            "patches"
        ]
    );
    for log in logs {
        let results = replay_all(log, LIMIT).expect("the property holds");
        let Some(Event::RunStarted { workflow, .. }) = log.first() else {
            unreachable!()
        };
        let own = (0..HANDLERS)
            .position(|i| handler_name(i) == workflow)
            .expect("a handler");
        assert!(
            results[own].starts_with("completed"),
            "{workflow}: {}\nlog: {log:#?}",
            results[own]
        );
    }
}
