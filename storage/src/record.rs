//! [`Record`]: one log record as stored, an event with its sequence number and the
//! time it was appended, and how a record's bytes read back.
//!
//! A record written since `reel-log/5` is the MessagePack array `[appended at (ms
//! since the epoch), event]`; an older one is the bare event (a map), read back as
//! appended at the epoch. The first byte tells them apart: an event never encodes
//! as an array.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::event::from_msgpack;
use crate::{Event, StorageError};

/// One record of a run's log.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Its sequence number in the run's log.
    pub seq: u64,
    /// When it was appended (the epoch for records written before `reel-log/5`).
    pub at: SystemTime,
    /// The event.
    pub event: Event,
}

/// The MessagePack marker of a two-element array, which begins every timed record.
const TIMED: u8 = 0x92;

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Record {
    /// Encodes `event` as a record appended at `at_ms`.
    ///
    /// # Errors
    /// [`StorageError::Encode`] if serialization fails.
    pub fn encode(event: &Event, at_ms: u64) -> Result<Vec<u8>, StorageError> {
        let mut buf = Vec::with_capacity(64);
        Record::encode_into(event, at_ms, &mut buf)?;
        Ok(buf)
    }

    /// Encodes `event` as a record appended at `at_ms`, appending to `buf`.
    ///
    /// # Errors
    /// [`StorageError::Encode`] if serialization fails.
    pub fn encode_into(event: &Event, at_ms: u64, buf: &mut Vec<u8>) -> Result<(), StorageError> {
        rmp_serde::encode::write(buf, &(at_ms, event))
            .map_err(|e| StorageError::Encode(e.to_string()))
    }

    /// Decodes the record stored at `seq` of `run_id`'s log (both labels only
    /// name the error).
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] naming the run and sequence number.
    pub fn decode(bytes: &[u8], run_id: &str, seq: u64) -> Result<Record, StorageError> {
        let decoded = if bytes.first() == Some(&TIMED) {
            from_msgpack::<(u64, Event)>(bytes)
        } else {
            from_msgpack::<Event>(bytes).map(|e| (0, e))
        };
        let (at_ms, event) = decoded.map_err(|e| StorageError::Corrupt {
            run_id: run_id.to_owned(),
            seq,
            reason: e.to_string(),
        })?;
        Ok(Record {
            seq,
            at: UNIX_EPOCH + Duration::from_millis(at_ms),
            event,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Payload;

    #[test]
    fn timed_and_untimed_records_read_back() {
        let event = Event::StepCompleted {
            id: "charge".into(),
            output: Payload(vec![1, 2, 3]),
        };
        let timed = Record::encode(&event, 1_700_000_000_123).expect("encode");
        let r = Record::decode(&timed, "r", 4).expect("decode");
        assert_eq!(r.event, event);
        assert_eq!(r.seq, 4);
        assert_eq!(r.at, UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        // A record written before reel-log/5: the bare event.
        let old = event.encode().expect("encode");
        assert_ne!(old.first(), Some(&TIMED));
        let r = Record::decode(&old, "r", 0).expect("decode");
        assert_eq!((r.at, r.event), (UNIX_EPOCH, event));
        assert!(Record::decode(&[0x92, 0xc1], "r", 9).is_err());
    }
}
