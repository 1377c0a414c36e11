//! Property tests of the record codec: every `Event` (all variants, arbitrary
//! strings, payload bytes, `Option` and `Result` fields) decodes to itself, and
//! decoding arbitrary or damaged bytes never panics.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use reel_storage::{Event, Failure, Payload};

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        // Mostly short, sometimes empty or long; any Unicode, NUL included.
        3 => any::<String>(),
        1 => Just(String::new()),
        1 => "[a-z#/0-9-]{1,12}",
        1 => proptest::string::string_regex(".{200,400}").expect("regex"),
    ]
}

fn payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        4 => vec(any::<u8>(), 0..64).prop_map(Payload),
        1 => vec(any::<u8>(), 0..4096).prop_map(Payload),
    ]
}

fn failure() -> impl Strategy<Value = Failure> {
    prop_oneof![
        (text(), text()).prop_map(|(step, message)| Failure::Step { step, message }),
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
    ]
}

fn event() -> impl Strategy<Value = Event> {
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
    ]
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
