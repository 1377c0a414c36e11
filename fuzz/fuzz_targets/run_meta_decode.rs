//! Arbitrary bytes as a metadata record: `RunMeta::decode` returns the record (filed
//! under its own run id) or a `CorruptRecord` naming keyspace and key, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reel_storage::RunMeta;

fuzz_target!(|data: &[u8]| {
    // The first byte picks how much of the rest is the key.
    let Some((split, rest)) = data.split_first() else {
        return;
    };
    let (key, value) = rest.split_at((*split as usize).min(rest.len()));
    match RunMeta::decode("active", key, value) {
        Ok(meta) => {
            assert_eq!(meta.run_id.as_bytes(), key);
            let again = meta.encode().expect("a decoded record encodes");
            assert_eq!(
                RunMeta::decode("active", key, &again).expect("re-decode"),
                meta
            );
        }
        Err(bad) => {
            assert_eq!((bad.keyspace.as_str(), bad.key.as_slice()), ("active", key));
            let _ = bad.to_string();
        }
    }
});
