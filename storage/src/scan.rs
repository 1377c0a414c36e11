//! What a scan of a keyspace returns: the records that decode, and a report of each
//! one that does not, so that one damaged record costs one run, not the store.

use std::fmt;

use crate::Failure;

/// A record a scan or a read could not decode: where it is and why.
///
/// The scans of the metadata, active-set and timer keyspaces skip such a record and
/// report it here instead of failing as a whole, so every other run still resumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptRecord {
    /// The keyspace holding it: `log`, `runs`, `active`, `timers`, `listing` or
    /// `schedules`.
    pub keyspace: String,
    /// The run it belongs to, when the key still names one.
    pub run_id: Option<String>,
    /// Its sequence number, for a log record.
    pub seq: Option<u64>,
    /// The raw key.
    pub key: Vec<u8>,
    /// What is wrong with it.
    pub reason: String,
}

impl CorruptRecord {
    /// The key as text: printable ASCII as is, other bytes as `\xNN`.
    pub fn key_text(&self) -> String {
        self.key.escape_ascii().to_string()
    }

    /// The failure a run with this record is parked with; `None` when the key names
    /// no run.
    pub fn failure(&self) -> Option<Failure> {
        Some(Failure::Corrupt {
            keyspace: self.keyspace.clone(),
            run_id: self.run_id.clone()?,
            seq: self.seq,
            key: self.key_text(),
            reason: self.reason.clone(),
        })
    }
}

impl fmt::Display for CorruptRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "corrupt record in keyspace `{}`", self.keyspace)?;
        if let Some(run) = &self.run_id {
            write!(f, " of run `{run}`")?;
        }
        match self.seq {
            Some(seq) => write!(f, " at sequence {seq}")?,
            None => write!(f, " (key `{}`)", self.key_text())?,
        }
        write!(f, ": {}", self.reason)
    }
}

/// The result of a keyspace scan: every record that decoded, in key order, plus the
/// ones that did not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan<T> {
    /// The records that decoded.
    pub items: Vec<T>,
    /// The records that did not; empty for a healthy store.
    pub corrupt: Vec<CorruptRecord>,
}

impl<T> Default for Scan<T> {
    fn default() -> Self {
        Scan {
            items: Vec::new(),
            corrupt: Vec::new(),
        }
    }
}

impl<T> Scan<T> {
    /// A scan that found only good records.
    pub fn clean(items: Vec<T>) -> Scan<T> {
        Scan {
            items,
            corrupt: Vec::new(),
        }
    }
}
