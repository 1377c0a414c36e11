//! The key layout of the fjall keyspaces, and its decoders.
//!
//! - `log`: run id, NUL, big-endian sequence number.
//! - `timers`: big-endian due time, run id, NUL, timer id.
//! - `runs` and `active`: the run id.
//!
//! Run ids never contain NUL ([`check_run_id`](crate::check_run_id)), so the NUL ends
//! the run id unambiguously.

use crate::{CorruptRecord, StorageError, TimerEntry};

pub(crate) fn log_prefix(run_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(run_id.len() + 9);
    log_prefix_into(&mut k, run_id);
    k
}

/// [`log_prefix`] written into `k` (cleared first).
fn log_prefix_into(k: &mut Vec<u8>, run_id: &str) {
    k.clear();
    k.extend_from_slice(run_id.as_bytes());
    k.push(0);
}

pub(crate) fn log_key(run_id: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(run_id.len() + 9);
    log_key_into(&mut k, run_id, seq);
    k
}

/// [`log_key`] written into `k` (cleared first), so that a batch of records
/// builds their keys in one buffer.
pub(crate) fn log_key_into(k: &mut Vec<u8>, run_id: &str, seq: u64) {
    log_prefix_into(k, run_id);
    k.extend_from_slice(&seq.to_be_bytes());
}

/// The first key past every log key of `run_id` (run ids never hold NUL).
pub(crate) fn log_end(run_id: &str) -> Vec<u8> {
    let mut k = log_prefix(run_id);
    if let Some(last) = k.last_mut() {
        *last = 1;
    }
    k
}

/// The sequence number of a log key found under `run_id`'s prefix.
pub(crate) fn seq_of(run_id: &str, key: &[u8]) -> Result<u64, StorageError> {
    let tail = key.get(run_id.len() + 1..).unwrap_or_default();
    let bytes: [u8; 8] = tail.try_into().map_err(|_| StorageError::Corrupt {
        run_id: run_id.to_owned(),
        seq: 0,
        reason: format!("malformed log key of {} bytes", key.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// The key of a timer-index entry: big-endian due time, run id, NUL, timer id.
pub fn encode_timer_key(t: &TimerEntry) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + t.run_id.len() + 1 + t.timer_id.len());
    k.extend_from_slice(&t.fire_at.to_be_bytes());
    k.extend_from_slice(t.run_id.as_bytes());
    k.push(0);
    k.extend_from_slice(t.timer_id.as_bytes());
    k
}

/// Decodes a timer-index key written by [`encode_timer_key`].
///
/// # Errors
/// A [`CorruptRecord`] in keyspace `timers` naming the run when the key still
/// holds a readable run id (so that run alone can be reported), and why the key
/// is malformed.
pub fn decode_timer_key(key: &[u8]) -> Result<TimerEntry, CorruptRecord> {
    let corrupt = |run_id: Option<String>, reason: &str| CorruptRecord {
        keyspace: "timers".to_owned(),
        run_id,
        seq: None,
        key: key.to_vec(),
        reason: reason.to_owned(),
    };
    let Some((due, rest)) = key.split_first_chunk::<8>() else {
        return Err(corrupt(None, "timer key shorter than its due time"));
    };
    let Some(nul) = rest.iter().position(|b| *b == 0) else {
        return Err(corrupt(None, "timer key without the NUL after the run id"));
    };
    let (run, timer) = (&rest[..nul], &rest[nul + 1..]);
    let run_id = match std::str::from_utf8(run) {
        Ok(r) if !r.is_empty() => r.to_owned(),
        Ok(_) => return Err(corrupt(None, "timer key with an empty run id")),
        Err(_) => return Err(corrupt(None, "timer key whose run id is not UTF-8")),
    };
    let Ok(timer_id) = std::str::from_utf8(timer) else {
        return Err(corrupt(
            Some(run_id),
            "timer key whose timer id is not UTF-8",
        ));
    };
    Ok(TimerEntry {
        fire_at: u64::from_be_bytes(*due),
        timer_id: timer_id.to_owned(),
        run_id,
    })
}
