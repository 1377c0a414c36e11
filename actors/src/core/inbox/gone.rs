//! The letters a run acknowledged itself before it ended the log segment their
//! signals landed in (`Core::ack_letters`), kept until every read of the inbox
//! that may have returned them before has ended.
//!
//! A signal id is deduplicated within one log segment only, so a letter whose
//! signal landed in a segment that has ended must not be applied again: the run
//! acknowledges such letters before it ends the segment (the next owner does not
//! read them, if this host dies), and a read under way may have taken one before
//! that, to apply it after: its run's actor skips it ([`Gone::has`]).

use std::sync::Mutex;

use foldhash::HashMap;

/// Letter id -> how many reads of the inbox had begun when its acknowledgement
/// was written (`u64::MAX` while it is being written).
#[derive(Debug, Default)]
pub(crate) struct Gone(Mutex<HashMap<i64, u64>>);

impl Gone {
    /// Notes letters `ids`, acknowledged when `reads_begun` reads had begun.
    /// (`u64::MAX`: not yet; kept whatever reads end.)
    pub(super) fn add(&self, ids: &[i64], reads_begun: u64) {
        let mut gone = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            gone.insert(*id, reads_begun);
        }
    }

    /// Whether letter `id` was acknowledged by its run.
    pub(super) fn has(&self, id: i64) -> bool {
        let gone = self.0.lock().unwrap_or_else(|p| p.into_inner());
        gone.contains_key(&id)
    }

    /// Read `read` (counted from 1) has ended, and every one before it: letters
    /// acknowledged before a later one began are no read's any more.
    pub(super) fn read_ended(&self, read: u64) {
        let mut gone = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !gone.is_empty() {
            gone.retain(|_, begun| *begun > read);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_until_the_reads_begun_before_have_ended() {
        let gone = Gone::default();
        gone.add(&[1, 2], 3);
        gone.add(&[5], 4);
        assert!(gone.has(1) && gone.has(2) && gone.has(5));
        assert!(!gone.has(3));
        gone.read_ended(2);
        assert!(gone.has(1), "read 3 may hold it");
        gone.read_ended(3);
        assert!(!gone.has(1) && !gone.has(2));
        assert!(gone.has(5), "read 4 may hold it");
        gone.read_ended(4);
        assert!(!gone.has(5));
        gone.add(&[6], u64::MAX);
        gone.read_ended(9);
        assert!(gone.has(6), "its acknowledgement is being written");
    }
}
