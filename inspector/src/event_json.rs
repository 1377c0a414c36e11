//! Log records as JSON: [`event_to_json`] decodes the MessagePack payloads of an
//! [`Event`] into JSON values, so a page or a script reads them as they were sent.

use std::time::{SystemTime, UNIX_EPOCH};

use reel::{Event, Failure, Payload, Record};
use serde_json::{Map, Value, json};

/// A payload as a JSON value: its MessagePack decoded (map keys that are not
/// strings read as their JSON text, as `serde_json` writes them; byte strings as
/// arrays of numbers; NaN and infinities as `null`); an undecodable payload reads
/// as `{"undecodable": "<n> bytes"}`.
pub fn payload_to_json(p: &Payload) -> Value {
    rmp_serde::from_slice::<AsJson>(p.as_bytes()).map_or_else(
        |_| json!({ "undecodable": format!("{} bytes", p.as_bytes().len()) }),
        |v| v.0,
    )
}

/// A JSON value read from any self-describing serde input: what
/// `serde_json::Value` reads, and also maps with keys that are not strings and
/// byte strings, which it refuses.
struct AsJson(Value);

impl<'de> serde::Deserialize<'de> for AsJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AsJson, D::Error> {
        d.deserialize_any(AsJsonVisitor).map(AsJson)
    }
}

struct AsJsonVisitor;

impl<'de> serde::de::Visitor<'de> for AsJsonVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a MessagePack value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Value, E> {
        Ok(v.iter().copied().map(Value::from).collect())
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(AsJsonVisitor)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(AsJson(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(items.into())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some((AsJson(k), AsJson(v))) = map.next_entry()? {
            let key = match k {
                Value::String(s) => s,
                other => other.to_string(),
            };
            out.insert(key, v);
        }
        Ok(out.into())
    }
}

/// A failure as JSON: `{"kind", "message"}` plus the attempts of a failed step.
pub fn failure_to_json(f: &Failure) -> Value {
    let kind = match f {
        Failure::Step { .. } => "Step",
        Failure::ReplayDivergence { .. } => "ReplayDivergence",
        Failure::VersionMismatch { .. } => "VersionMismatch",
        Failure::UnknownWorkflow(_) => "UnknownWorkflow",
        Failure::Cancelled(_) => "Cancelled",
        Failure::Codec(_) => "Codec",
        Failure::Crashed(_) => "Crashed",
        Failure::Corrupt { .. } => "Corrupt",
        Failure::ChildCycle { .. } => "ChildCycle",
        Failure::UnknownRun(_) => "UnknownRun",
        Failure::RunFinished(_) => "RunFinished",
        Failure::RunExists { .. } => "RunExists",
        Failure::WorkflowMismatch { .. } => "WorkflowMismatch",
        Failure::InvalidArgument(_) => "InvalidArgument",
        _ => "Other",
    };
    let mut out = json!({ "kind": kind, "message": f.to_string() });
    if let Failure::Step { attempts, .. } = f {
        out["attempts"] = attempts
            .iter()
            .map(|a| json!({ "attempt": a.attempt, "error": a.error }))
            .collect();
    }
    out
}

/// Milliseconds since the Unix epoch (0 for a time before it).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// One record as JSON: `{"seq", "at" (Unix ms), "kind", ...the event's fields}`.
pub fn record_to_json(r: &Record) -> Value {
    let mut v = event_to_json(&r.event);
    if let Value::Object(m) = &mut v {
        m.insert("seq".into(), r.seq.into());
        m.insert("at".into(), unix_ms(r.at).into());
    }
    v
}

/// An event as a JSON object: `{"kind": Event::kind(), ...its fields}`, with every
/// payload field (input, output, signal payload, recorded value, published value,
/// child result) decoded to a JSON value and failures as [`failure_to_json`].
///
/// # Examples
///
/// ```
/// use reel::{Event, Payload};
/// use serde_json::json;
///
/// let input = Payload(rmp_serde::to_vec_named(&json!({"sku": "tea"})).unwrap());
/// let event = Event::RunStarted { workflow: "order".into(), version: 1, input };
/// assert_eq!(
///     reel_inspector::event_to_json(&event),
///     json!({"kind": "RunStarted", "workflow": "order", "version": 1, "input": {"sku": "tea"}})
/// );
/// ```
pub fn event_to_json(e: &Event) -> Value {
    let fields = match e {
        Event::RunStarted {
            workflow,
            version,
            input,
        } => json!({ "workflow": workflow, "version": version, "input": payload_to_json(input) }),
        Event::StepStarted { id, attempt } => json!({ "id": id, "attempt": attempt }),
        Event::StepCompleted { id, output } => {
            json!({ "id": id, "output": payload_to_json(output) })
        }
        Event::StepFailed {
            id,
            attempt,
            error,
            retry_at,
        } => json!({ "id": id, "attempt": attempt, "error": error, "retry_at": retry_at }),
        Event::TimerScheduled { id, fire_at } | Event::Deadline { id, fire_at } => {
            json!({ "id": id, "fire_at": fire_at })
        }
        Event::TimerFired { id } | Event::TimerCancelled { id } | Event::Patched { id } => {
            json!({ "id": id })
        }
        Event::SignalAwaited { id, name, deadline } => {
            json!({ "id": id, "name": name, "deadline": deadline })
        }
        Event::SignalReceived {
            name,
            signal_id,
            payload,
        } => json!({ "name": name, "signal_id": signal_id, "payload": payload_to_json(payload) }),
        Event::Recorded { id, kind, value } => {
            json!({ "id": id, "recorded_kind": kind, "value": payload_to_json(value) })
        }
        Event::ChildStarted {
            id,
            workflow,
            version,
            run_id,
        } => json!({ "id": id, "workflow": workflow, "version": version, "run_id": run_id }),
        Event::ChildCompleted { id, result } => match result {
            Ok(p) => json!({ "id": id, "ok": true, "output": payload_to_json(p) }),
            Err(f) => json!({ "id": id, "ok": false, "error": failure_to_json(f) }),
        },
        Event::CancelRequested { reason } | Event::RunCancelled { reason } => {
            json!({ "reason": reason })
        }
        Event::RunCompleted { output } => json!({ "output": payload_to_json(output) }),
        Event::RunFailed { error } => json!({ "error": failure_to_json(error) }),
        Event::ChildDetached { id, error } => {
            json!({ "id": id, "error": error.as_ref().map(failure_to_json) })
        }
        Event::Published { key, value } => json!({ "key": key, "value": payload_to_json(value) }),
        Event::ContinuedAsNew { carried } => json!({ "carried": carried }),
        Event::SignalIdsSeen { ids } => json!({ "ids": ids }),
        other => json!({ "debug": format!("{other:?}") }),
    };
    let mut m = Map::new();
    m.insert("kind".into(), e.kind().into());
    if let Value::Object(f) = fields {
        m.extend(f);
    }
    Value::Object(m)
}
