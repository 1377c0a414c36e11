//! Arbitrary bytes as a timer-index key: `decode_timer_key` returns the one entry the
//! key stands for (it re-encodes to the same bytes) or a `CorruptRecord`, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reel_storage::{decode_timer_key, encode_timer_key};

fuzz_target!(|data: &[u8]| {
    match decode_timer_key(data) {
        Ok(entry) => assert_eq!(encode_timer_key(&entry), data),
        Err(bad) => {
            assert_eq!(
                (bad.keyspace.as_str(), bad.key.as_slice()),
                ("timers", data)
            );
            if let Some(run) = &bad.run_id {
                assert!(!run.is_empty() && !run.contains('\0'));
            }
            let _ = bad.to_string();
        }
    }
});
