//! `event_to_json` turns each kind of event into a JSON object named by its kind,
//! with every MessagePack payload decoded to the JSON value that was sent.

use reel::{AttemptError, Event, Failure, Payload};
use serde_json::{Value, json};

fn p(v: Value) -> Payload {
    Payload(rmp_serde::to_vec_named(&v).expect("encode"))
}

#[test]
fn every_event_kind_reads_as_json_with_payloads_decoded() {
    let step_failure = Failure::Step {
        step: "charge".into(),
        message: "declined".into(),
        attempts: vec![AttemptError {
            attempt: 1,
            error: "declined".into(),
        }],
    };
    let cases: Vec<(Event, Value)> = vec![
        (
            Event::RunStarted {
                workflow: "w".into(),
                version: 2,
                input: p(json!({"a": [1, 2]})),
            },
            json!({"kind": "RunStarted", "workflow": "w", "version": 2, "input": {"a": [1, 2]}}),
        ),
        (
            Event::StepStarted {
                id: "s".into(),
                attempt: 1,
            },
            json!({"kind": "StepStarted", "id": "s", "attempt": 1}),
        ),
        (
            Event::StepCompleted {
                id: "s".into(),
                output: p(json!("done")),
            },
            json!({"kind": "StepCompleted", "id": "s", "output": "done"}),
        ),
        (
            Event::StepFailed {
                id: "s".into(),
                attempt: 1,
                error: "boom".into(),
                retry_at: Some(5),
            },
            json!({"kind": "StepFailed", "id": "s", "attempt": 1, "error": "boom", "retry_at": 5}),
        ),
        (
            Event::TimerScheduled {
                id: "t".into(),
                fire_at: 9,
            },
            json!({"kind": "TimerScheduled", "id": "t", "fire_at": 9}),
        ),
        (
            Event::TimerFired { id: "t".into() },
            json!({"kind": "TimerFired", "id": "t"}),
        ),
        (
            Event::TimerCancelled { id: "t".into() },
            json!({"kind": "TimerCancelled", "id": "t"}),
        ),
        (
            Event::SignalAwaited {
                id: "w".into(),
                name: "go".into(),
                deadline: None,
            },
            json!({"kind": "SignalAwaited", "id": "w", "name": "go", "deadline": null}),
        ),
        (
            Event::SignalReceived {
                name: "go".into(),
                signal_id: "s1".into(),
                payload: p(json!({"ok": true})),
            },
            json!({"kind": "SignalReceived", "name": "go", "signal_id": "s1", "payload": {"ok": true}}),
        ),
        (
            Event::Recorded {
                id: "r".into(),
                kind: "uuid".into(),
                value: p(json!(7)),
            },
            json!({"kind": "Recorded", "id": "r", "recorded_kind": "uuid", "value": 7}),
        ),
        (
            Event::ChildStarted {
                id: "c".into(),
                workflow: "kid".into(),
                version: 1,
                run_id: "k1".into(),
            },
            json!({"kind": "ChildStarted", "id": "c", "workflow": "kid", "version": 1, "run_id": "k1"}),
        ),
        (
            Event::ChildCompleted {
                id: "c".into(),
                result: Ok(p(json!([1]))),
            },
            json!({"kind": "ChildCompleted", "id": "c", "ok": true, "output": [1]}),
        ),
        (
            Event::ChildCompleted {
                id: "c".into(),
                result: Err(step_failure.clone()),
            },
            json!({"kind": "ChildCompleted", "id": "c", "ok": false, "error": {
                "kind": "Step", "message": "step `charge` failed: declined",
                "attempts": [{"attempt": 1, "error": "declined"}]}}),
        ),
        (
            Event::CancelRequested { reason: "r".into() },
            json!({"kind": "CancelRequested", "reason": "r"}),
        ),
        (
            Event::RunCompleted {
                output: p(json!({"total": 3})),
            },
            json!({"kind": "RunCompleted", "output": {"total": 3}}),
        ),
        (
            Event::RunFailed {
                error: Failure::Other("bad".into()),
            },
            json!({"kind": "RunFailed", "error": {"kind": "Other", "message": "bad"}}),
        ),
        (
            Event::RunCancelled { reason: "r".into() },
            json!({"kind": "RunCancelled", "reason": "r"}),
        ),
        (
            Event::Deadline {
                id: "d".into(),
                fire_at: 3,
            },
            json!({"kind": "Deadline", "id": "d", "fire_at": 3}),
        ),
        (
            Event::ChildDetached {
                id: "c".into(),
                error: None,
            },
            json!({"kind": "ChildDetached", "id": "c", "error": null}),
        ),
        (
            Event::Patched { id: "p".into() },
            json!({"kind": "Patched", "id": "p"}),
        ),
        (
            Event::Published {
                key: "k".into(),
                value: p(json!("v")),
            },
            json!({"kind": "Published", "key": "k", "value": "v"}),
        ),
        (
            Event::ContinuedAsNew { carried: 2 },
            json!({"kind": "ContinuedAsNew", "carried": 2}),
        ),
        (
            Event::SignalIdsSeen {
                ids: vec!["a".into(), "b".into()],
            },
            json!({"kind": "SignalIdsSeen", "ids": ["a", "b"]}),
        ),
    ];
    let kinds: std::collections::BTreeSet<&str> = cases.iter().map(|(e, _)| e.kind()).collect();
    assert_eq!(kinds.len(), 22, "every kind of event is covered");
    for (event, expected) in &cases {
        assert_eq!(
            &reel_inspector::event_to_json(event),
            expected,
            "{}",
            event.kind()
        );
    }
    // A payload that is not MessagePack is shown, not fatal.
    assert_eq!(
        reel_inspector::payload_to_json(&Payload(vec![0xc1])),
        json!({"undecodable": "1 bytes"})
    );
}
