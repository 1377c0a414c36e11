//! Several hosts over one store: partitions, leases, the inbox and notices.
//!
//! A backend that several hosts share (PostgreSQL) implements [`Cluster`] and hands
//! it out through [`Store::cluster`](crate::Store::cluster). Run ids hash into
//! [`PARTITIONS`] partitions ([`partition_of`]); each host leases some of them and
//! owns their runs: only the owner runs them, fires their timers and appends to
//! their logs (the backend refuses a write to a run whose partition the writer does
//! not hold, with [`StorageError::NotOwner`](crate::StorageError::NotOwner)). Any
//! host may create a run; what would wake a run owned elsewhere is posted as
//! [`Mail`] to the owner's inbox, which the owner drains. A backend without
//! `Cluster` is one host's own.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::{Failure, Payload, Result, StorageError, TimerEntry};

/// How many partitions run ids hash into.
pub const PARTITIONS: u16 = 256;

/// The partition of a run: FNV-1a of the run id modulo [`PARTITIONS`], stable across
/// builds and platforms.
pub fn partition_of(run_id: &str) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for b in run_id.as_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    u16::try_from(h % u32::from(PARTITIONS)).unwrap_or(0)
}

/// What one host asks of a run another host owns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Mail {
    /// Run the handler (the run was created elsewhere, or changed there); `timers`
    /// are the run's timers written with it, for the owner's timer service.
    Wake {
        /// Timers written with the run (a deadline).
        timers: Vec<(u64, String)>,
    },
    /// A signal, deduplicated by its id.
    Signal {
        /// Signal name.
        name: String,
        /// Deduplication id.
        signal_id: String,
        /// Payload.
        payload: Payload,
    },
    /// A waited-for child run ended.
    ChildDone {
        /// The parent's wait id.
        wait_id: String,
        /// The child run.
        child: String,
        /// Its result.
        result: std::result::Result<Payload, Failure>,
    },
    /// A detached child was started, or could not be.
    ChildDetached {
        /// The parent's wait id.
        wait_id: String,
        /// The child run.
        child: String,
        /// Why it could not be started.
        error: Option<Failure>,
    },
    /// Cancel the run.
    Cancel {
        /// Why.
        reason: String,
        /// End it at once, without a grace period.
        hard: bool,
        /// The parent asking, when a parent cancels its children: a run that is
        /// not that parent's child (one it only attached to) ignores the request.
        #[serde(default)]
        from_parent: Option<String>,
    },
    /// Pause the run.
    Pause {
        /// Why.
        reason: String,
    },
    /// Resume a paused run.
    Unpause,
    /// Activate a parked run again.
    Retry,
}

impl Mail {
    /// The timers of a [`Mail::Wake`] as index entries of `run_id`.
    pub fn timer_entries(&self, run_id: &str) -> Vec<TimerEntry> {
        match self {
            Mail::Wake { timers } => timers
                .iter()
                .map(|(fire_at, timer_id)| TimerEntry {
                    fire_at: *fire_at,
                    run_id: run_id.to_owned(),
                    timer_id: timer_id.clone(),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The mail as stored.
    ///
    /// # Errors
    /// [`StorageError::Encode`].
    pub fn encode(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec(self).map_err(|e| StorageError::Encode(e.to_string()))
    }

    /// A stored mail.
    ///
    /// # Errors
    /// [`StorageError::Encode`] when the bytes are not a mail.
    pub fn decode(bytes: &[u8]) -> Result<Mail> {
        rmp_serde::from_slice(bytes).map_err(|e| StorageError::Encode(format!("inbox mail: {e}")))
    }
}

/// One mail in an owner's inbox.
#[derive(Clone, Debug, PartialEq)]
pub struct Letter {
    /// Its place in the inbox (what [`Cluster::ack`] takes).
    pub id: i64,
    /// The run it is for.
    pub run_id: String,
    /// What it asks; `Err` with the reason when the stored mail does not decode.
    pub mail: std::result::Result<Mail, String>,
}

/// What a lease renewal changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseChange {
    /// Partitions this host holds now, gained ones included.
    pub held: BTreeSet<u16>,
    /// Partitions newly taken: their runs are to be recovered.
    pub gained: BTreeSet<u16>,
    /// Partitions this host thought it held and no longer does (its lease expired
    /// and another host took it): their runs are to be stopped here.
    pub lost: BTreeSet<u16>,
    /// Partitions held beyond this host's fair share: to give back (stop their
    /// runs, then [`Cluster::release`]) so a host that joined gets some.
    pub surplus: BTreeSet<u16>,
}

/// What another host did, as the backend heard it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Mail was posted for runs of this partition.
    Mail(u16),
    /// A run's state changed (its metadata was written).
    Changed(String),
    /// A slot of this queue was given back ([`Admission`](crate::Admission)):
    /// runs waiting for it may be admitted now.
    Queue(String),
    /// Notices may have been missed (the listening connection dropped): read
    /// everything again.
    Missed,
}

/// Several hosts sharing one store: leases over partitions, the inbox, notices.
pub trait Cluster: Send + Sync {
    /// This host's id, unique among the hosts sharing the store.
    fn host_id(&self) -> &str;

    /// How long a lease lasts unless renewed; hosts renew at a third of it.
    fn lease_ttl(&self) -> Duration;

    /// Whether this host holds the lease of `partition`, as last renewed.
    fn holds(&self, partition: u16) -> bool;

    /// The partitions this host holds, as last renewed.
    fn held(&self) -> BTreeSet<u16>;

    /// Renews this host's heartbeat and leases, takes free or expired partitions up
    /// to its fair share, and reports what changed. Blocks.
    ///
    /// # Errors
    /// I/O; the leases held are unchanged then (they expire if this keeps failing).
    fn renew(&self) -> Result<LeaseChange>;

    /// Gives partitions back (their runs stopped here first). Blocks.
    ///
    /// # Errors
    /// I/O.
    fn release(&self, partitions: &BTreeSet<u16>) -> Result<()>;

    /// Posts `mail` for `run_id` to its owner's inbox and tells the owner. Blocks.
    ///
    /// # Errors
    /// [`StorageError::InvalidRunId`], I/O.
    fn post(&self, run_id: &str, mail: &Mail) -> Result<()>;

    /// Up to `limit` letters for runs of `partitions`, oldest first; only of those
    /// partitions the backend (not this host's last renewal) says it holds. Blocks.
    ///
    /// # Errors
    /// I/O.
    fn letters(&self, partitions: &BTreeSet<u16>, limit: usize) -> Result<Vec<Letter>>;

    /// Every letter for `run_id`, oldest first, if the backend says this host holds
    /// its partition (none otherwise). Blocks. The default reads all the letters
    /// of the partition and keeps the run's.
    ///
    /// # Errors
    /// I/O.
    fn letters_of(&self, run_id: &str) -> Result<Vec<Letter>> {
        let partition = BTreeSet::from([crate::partition_of(run_id)]);
        let mut letters = self.letters(&partition, usize::MAX)?;
        letters.retain(|l| l.run_id == run_id);
        Ok(letters)
    }

    /// Removes handled letters, but not those of a partition this host no longer
    /// holds: they stay for its new owner. Blocks.
    ///
    /// # Errors
    /// I/O.
    fn ack(&self, ids: &[i64]) -> Result<()>;

    /// The unfinished runs of `partitions` (as [`MetaReader::unfinished_runs`](crate::MetaReader::unfinished_runs)).
    ///
    /// # Errors
    /// I/O.
    fn unfinished_in(&self, partitions: &BTreeSet<u16>) -> Result<crate::Scan<crate::RunMeta>>;

    /// The pending timers of runs of `partitions`, in due-time order.
    ///
    /// # Errors
    /// I/O.
    fn timers_in(&self, partitions: &BTreeSet<u16>) -> Result<crate::Scan<TimerEntry>>;

    /// Notices of what other hosts did, from now on.
    fn subscribe(&self) -> broadcast::Receiver<Notice>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_stable_and_in_range() {
        assert_eq!(partition_of(""), (0x811c_9dc5u32 % 256) as u16);
        for i in 0..1000 {
            assert!(partition_of(&format!("run-{i}")) < PARTITIONS);
        }
    }

    #[test]
    fn mail_round_trips() {
        let mail = Mail::Signal {
            name: "go".into(),
            signal_id: "s1".into(),
            payload: Payload(vec![1, 2]),
        };
        assert_eq!(Mail::decode(&mail.encode().unwrap()).unwrap(), mail);
        assert!(Mail::decode(b"\xc1").is_err());
    }
}
