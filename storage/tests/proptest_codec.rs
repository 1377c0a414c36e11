//! Property tests of the record codecs: every `Event` (all variants, arbitrary
//! strings, payload bytes, `Option` and `Result` fields), every `RunMeta` and every
//! timer-index key decodes to itself, and decoding arbitrary or damaged bytes never
//! panics: it gives a typed error naming the record.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use reel_storage::{
    AttemptError, Event, Failure, ParentLink, Payload, QueueEntry, RunMeta, RunState, TimerEntry,
    decode_timer_key, encode_timer_key,
};

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        // Mostly short, sometimes empty or long; any Unicode, NUL included.
        3 => any::<String>(),
        1 => Just(String::new()),
        1 => "[a-z#/0-9-]{1,12}",
        1 => proptest::string::string_regex(".{200,400}").expect("regex"),
    ]
    .boxed()
}

fn payload() -> BoxedStrategy<Payload> {
    prop_oneof![
        4 => vec(any::<u8>(), 0..64).prop_map(Payload),
        1 => vec(any::<u8>(), 0..4096).prop_map(Payload),
    ]
    .boxed()
}

fn failure() -> BoxedStrategy<Failure> {
    prop_oneof![
        (text(), text(), vec((any::<u32>(), text()), 0..4)).prop_map(
            |(step, message, attempts)| Failure::Step {
                step,
                message,
                attempts: attempts
                    .into_iter()
                    .map(|(attempt, error)| AttemptError { attempt, error })
                    .collect(),
            }
        ),
        (any::<u64>(), text(), text()).prop_map(|(index, expected, found)| {
            Failure::ReplayDivergence {
                index,
                expected,
                found,
            }
        }),
        (text(), any::<u32>())
            .prop_map(|(workflow, version)| Failure::VersionMismatch { workflow, version }),
        text().prop_map(Failure::UnknownWorkflow),
        text().prop_map(Failure::Cancelled),
        text().prop_map(Failure::Codec),
        text().prop_map(Failure::Crashed),
        text().prop_map(Failure::Other),
        (text(), text(), option::of(any::<u64>()), text(), text()).prop_map(
            |(keyspace, run_id, seq, key, reason)| Failure::Corrupt {
                keyspace,
                run_id,
                seq,
                key,
                reason,
            }
        ),
        vec(text(), 0..5).prop_map(|cycle| Failure::ChildCycle { cycle }),
        text().prop_map(Failure::UnknownRun),
        text().prop_map(Failure::RunFinished),
        (text(), text()).prop_map(|(run_id, workflow)| Failure::RunExists { run_id, workflow }),
        (text(), text(), text()).prop_map(|(run_id, expected, found)| {
            Failure::WorkflowMismatch {
                run_id,
                expected,
                found,
            }
        }),
        text().prop_map(Failure::InvalidArgument),
    ]
    .boxed()
}

/// A valid run id: 1..=512 bytes, no NUL.
fn run_id() -> BoxedStrategy<String> {
    prop_oneof![
        "[a-z0-9-]{1,16}",
        proptest::string::string_regex("[^\\x00]{1,64}").expect("regex"),
    ]
    .prop_filter("at most 512 bytes", |s| s.len() <= 512)
    .boxed()
}

fn run_state() -> BoxedStrategy<RunState> {
    prop_oneof![
        Just(RunState::Running),
        (text(), any::<bool>()).prop_map(|(waiting_on, awaits_child)| RunState::Suspended {
            waiting_on,
            awaits_child
        }),
        Just(RunState::Completed),
        failure().prop_map(|error| RunState::Failed { error }),
        text().prop_map(|reason| RunState::Cancelled { reason }),
        failure().prop_map(|error| RunState::Parked { error }),
        text().prop_map(|reason| RunState::Paused { reason }),
        Just(RunState::Enqueued),
    ]
    .boxed()
}

fn run_meta() -> BoxedStrategy<RunMeta> {
    (
        run_id(),
        text(),
        any::<u32>(),
        run_state(),
        any::<u64>(),
        any::<u64>(),
        option::of((run_id(), text())),
        option::of((text(), any::<i32>(), any::<u64>(), option::of(text()))),
    )
        .prop_map(
            |(run_id, workflow, version, state, created_at, updated_at, parent, queue)| RunMeta {
                run_id,
                workflow,
                version,
                state,
                created_at,
                updated_at,
                parent: parent.map(|(run_id, wait_id)| ParentLink { run_id, wait_id }),
                segment_start: 0,
                segment: 0,
                queue: queue.map(|(name, priority, order, dedup_key)| QueueEntry {
                    name,
                    priority,
                    order,
                    dedup_key,
                }),
            },
        )
        .boxed()
}

fn timer() -> BoxedStrategy<TimerEntry> {
    (any::<u64>(), run_id(), text())
        .prop_map(|(fire_at, run_id, timer_id)| TimerEntry {
            fire_at,
            run_id,
            timer_id,
        })
        .boxed()
}

fn event() -> BoxedStrategy<Event> {
    prop_oneof![
        (text(), any::<u32>(), payload()).prop_map(|(workflow, version, input)| {
            Event::RunStarted {
                workflow,
                version,
                input,
            }
        }),
        (text(), any::<u32>()).prop_map(|(id, attempt)| Event::StepStarted { id, attempt }),
        (text(), payload()).prop_map(|(id, output)| Event::StepCompleted { id, output }),
        (text(), any::<u32>(), text(), option::of(any::<u64>())).prop_map(
            |(id, attempt, error, retry_at)| Event::StepFailed {
                id,
                attempt,
                error,
                retry_at,
            }
        ),
        (text(), any::<u64>()).prop_map(|(id, fire_at)| Event::TimerScheduled { id, fire_at }),
        text().prop_map(|id| Event::TimerFired { id }),
        (text(), text(), option::of(any::<u64>()))
            .prop_map(|(id, name, deadline)| Event::SignalAwaited { id, name, deadline }),
        (text(), text(), payload()).prop_map(|(name, signal_id, payload)| {
            Event::SignalReceived {
                name,
                signal_id,
                payload,
            }
        }),
        (text(), text(), payload()).prop_map(|(id, kind, value)| Event::Recorded {
            id,
            kind,
            value
        }),
        (text(), text(), any::<u32>(), text()).prop_map(|(id, workflow, version, run_id)| {
            Event::ChildStarted {
                id,
                workflow,
                version,
                run_id,
            }
        }),
        (
            text(),
            prop_oneof![payload().prop_map(Ok), failure().prop_map(Err)]
        )
            .prop_map(|(id, result)| Event::ChildCompleted { id, result }),
        text().prop_map(|reason| Event::CancelRequested { reason }),
        payload().prop_map(|output| Event::RunCompleted { output }),
        failure().prop_map(|error| Event::RunFailed { error }),
        text().prop_map(|reason| Event::RunCancelled { reason }),
        text().prop_map(|id| Event::Patched { id }),
        (text(), payload()).prop_map(|(key, value)| Event::Published { key, value }),
        vec(text(), 0..4).prop_map(|ids| Event::SignalIdsSeen { ids }),
    ]
    .boxed()
}

/// A valid encoding damaged in one of a few ways.
#[derive(Debug, Clone)]
enum Damage {
    Truncate(usize),
    Flip(usize, u8),
    Insert(usize, u8),
    AppendGarbage(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), 1..=255u8).prop_map(|(i, x)| Damage::Flip(i, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Insert(i, b)),
        vec(any::<u8>(), 1..16).prop_map(Damage::AppendGarbage),
    ]
}

fn apply(mut bytes: Vec<u8>, damage: &Damage) -> Vec<u8> {
    let n = bytes.len();
    match damage {
        Damage::Truncate(i) => bytes.truncate(i % n),
        Damage::Flip(i, x) => bytes[i % n] ^= x,
        Damage::Insert(i, b) => bytes.insert(i % (n + 1), *b),
        Damage::AppendGarbage(g) => bytes.extend_from_slice(g),
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encode_then_decode_is_identity(e in event()) {
        let bytes = e.encode().expect("encode");
        let back = Event::decode(&bytes, "run", 7).expect("decode");
        prop_assert_eq!(&back, &e);
        prop_assert_eq!(back.kind(), e.kind());
        // encode_into appends after what the buffer holds.
        let mut buf = vec![1, 2, 3];
        e.encode_into(&mut buf).expect("encode_into");
        prop_assert_eq!(&buf[..3], &[1u8, 2, 3][..]);
        prop_assert_eq!(&buf[3..], &bytes[..]);
        // Debug (which tries to decode payloads) never panics either.
        let _ = format!("{e:?}");
    }

    #[test]
    fn decoding_random_bytes_never_panics(bytes in vec(any::<u8>(), 0..512)) {
        match Event::decode(&bytes, "run", 3) {
            Ok(e) => {
                let _ = format!("{e:?}");
            }
            Err(reel_storage::StorageError::Corrupt { run_id, seq, .. }) => {
                prop_assert_eq!(run_id.as_str(), "run");
                prop_assert_eq!(seq, 3);
            }
            Err(other) => prop_assert!(false, "unexpected error kind: {other:?}"),
        }
        let _ = format!("{:?}", Payload(bytes));
    }

    #[test]
    fn decoding_damaged_records_never_panics(e in event(), d in damage()) {
        let bytes = apply(e.encode().expect("encode"), &d);
        if let Ok(decoded) = Event::decode(&bytes, "run", 0) {
            // Whatever decodes re-encodes (it is a well-formed event).
            let again = decoded.encode().expect("re-encode");
            prop_assert_eq!(Event::decode(&again, "run", 0).expect("decode"), decoded);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn run_meta_decodes_to_itself(m in run_meta()) {
        let bytes = m.encode().expect("encode");
        let back = RunMeta::decode("runs", m.run_id.as_bytes(), &bytes).expect("decode");
        prop_assert_eq!(back, m);
    }

    #[test]
    fn run_meta_from_random_bytes_is_a_typed_error(
        key in vec(any::<u8>(), 0..32),
        bytes in vec(any::<u8>(), 0..512),
    ) {
        match RunMeta::decode("active", &key, &bytes) {
            Ok(m) => prop_assert_eq!(m.run_id.as_bytes(), key.as_slice()),
            Err(bad) => {
                prop_assert_eq!(bad.keyspace.as_str(), "active");
                prop_assert_eq!(&bad.key, &key);
                prop_assert_eq!(bad.seq, None);
                if let Some(run) = &bad.run_id {
                    prop_assert_eq!(run.as_bytes(), key.as_slice());
                }
                let _ = bad.to_string();
            }
        }
    }

    #[test]
    fn damaged_run_meta_never_panics(m in run_meta(), d in damage()) {
        let bytes = apply(m.encode().expect("encode"), &d);
        if let Ok(decoded) = RunMeta::decode("runs", m.run_id.as_bytes(), &bytes) {
            let again = decoded.encode().expect("re-encode");
            prop_assert_eq!(
                RunMeta::decode("runs", m.run_id.as_bytes(), &again).expect("decode"),
                decoded
            );
        }
    }

    #[test]
    fn timer_key_decodes_to_itself(t in timer()) {
        prop_assert_eq!(decode_timer_key(&encode_timer_key(&t)), Ok(t));
    }

    #[test]
    fn timer_key_from_random_bytes_is_exact_or_a_typed_error(key in vec(any::<u8>(), 0..64)) {
        match decode_timer_key(&key) {
            // Whatever decodes is the one entry that key stands for.
            Ok(t) => prop_assert_eq!(encode_timer_key(&t), key),
            Err(bad) => {
                prop_assert_eq!(bad.keyspace.as_str(), "timers");
                prop_assert_eq!(&bad.key, &key);
                if let Some(run) = &bad.run_id {
                    prop_assert!(!run.is_empty() && !run.contains('\0'));
                }
                let _ = bad.failure().map(|f| f.to_string());
            }
        }
    }
}

/// Nested one-byte array headers recurse in the decoder: a damaged record of them
/// once overflowed the stack (a process abort, not an error). The proptest above
/// found it; this pins it with nesting far deeper than any stack allows.
#[test]
fn deeply_nested_garbage_is_an_error_not_a_stack_overflow() {
    for prefix in [&[][..], &[0x97][..], &[0x81, 0xa3, b'a', b'b', b'c'][..]] {
        let mut bytes = prefix.to_vec();
        bytes.extend(std::iter::repeat_n(0x91u8, 100_000));
        bytes.push(0xc0);
        assert!(Event::decode(&bytes, "run", 0).is_err());
        assert!(RunMeta::decode("runs", b"run", &bytes).is_err());
        assert!(format!("{:?}", Payload(bytes)).ends_with(" bytes>"));
    }
}
