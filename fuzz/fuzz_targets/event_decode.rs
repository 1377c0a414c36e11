//! Arbitrary bytes as a log record: `Event::decode` returns an event or a typed
//! `Corrupt` error, never panics or overflows; what decodes re-encodes to an equal
//! event; a payload's `Debug` never panics either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reel_storage::{Event, Payload, StorageError};

fuzz_target!(|data: &[u8]| {
    match Event::decode(data, "run", 7) {
        Ok(event) => {
            let again = event.encode().expect("a decoded event encodes");
            assert_eq!(Event::decode(&again, "run", 7).expect("re-decode"), event);
            let _ = format!("{event:?}");
        }
        Err(StorageError::Corrupt { run_id, seq, .. }) => {
            assert_eq!((run_id.as_str(), seq), ("run", 7));
        }
        Err(other) => panic!("unexpected error kind: {other:?}"),
    }
    let _ = format!("{:?}", Payload(data.to_vec()));
});
