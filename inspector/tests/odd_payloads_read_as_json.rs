//! Payloads a workflow may well record (maps keyed by numbers, bytes, unit, `None`,
//! enums of every shape, non-finite floats, tuples) read in the inspector as the
//! JSON a serde user would expect (what `serde_json::to_value` makes of the same
//! Rust value), never as `{"undecodable": ...}`: the payload decodes fine, it is
//! only not a JSON-shaped document.

use std::collections::BTreeMap;

use reel::Payload;
use reel_inspector::payload_to_json;
use serde::Serialize;
use serde_json::{Value, json};

/// Encodes as reel encodes every payload (named MessagePack).
fn p<T: Serialize>(v: &T) -> Payload {
    Payload(rmp_serde::to_vec_named(v).expect("encode"))
}

#[derive(Serialize)]
enum Shape {
    Unit,
    Newtype(u32),
    Tuple(u32, String),
    Struct { side: f64 },
}

#[test]
fn json_shaped_payloads_read_as_their_json() {
    let cases: Vec<(Payload, Value)> = vec![
        (p(&()), json!(null)),
        (p(&None::<u32>), json!(null)),
        (p(&Some(3u32)), json!(3)),
        (p(&(1u8, "a")), json!([1, "a"])),
        (p(&Shape::Unit), json!("Unit")),
        (p(&Shape::Newtype(4)), json!({"Newtype": 4})),
        (p(&Shape::Tuple(4, "x".into())), json!({"Tuple": [4, "x"]})),
        (
            p(&Shape::Struct { side: 1.5 }),
            json!({"Struct": {"side": 1.5}}),
        ),
        (p(&f64::NAN), json!(null)),
        (p(&f64::INFINITY), json!(null)),
        (p(&u64::MAX), json!(u64::MAX)),
        (p(&i64::MIN), json!(i64::MIN)),
    ];
    for (payload, want) in cases {
        assert_eq!(payload_to_json(&payload), want, "{payload:?}");
    }
}

#[test]
fn maps_keyed_by_numbers_read_as_objects() {
    let by_id: BTreeMap<u32, &str> = [(1, "a"), (20, "b")].into();
    let want = serde_json::to_value(&by_id).expect("serde_json keys numbers by their text");
    assert_eq!(want, json!({"1": "a", "20": "b"}));
    let got = payload_to_json(&p(&by_id));
    assert_eq!(
        got, want,
        "a BTreeMap<u32, _> (a perfectly decodable payload) reads as {got}"
    );
}

#[test]
fn bytes_read_as_an_array_of_numbers() {
    // A MessagePack `bin` of three bytes, as `serde_bytes` or `bytes::Bytes` write it.
    let got = payload_to_json(&Payload(vec![0xc4, 3, 1, 2, 255]));
    assert_eq!(got, json!([1, 2, 255]), "a byte string reads as {got}");
}
