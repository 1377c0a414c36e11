//! Generations: the numbers that tell a run actor's messages to itself (an
//! execution's reports, a passivation check) from stale ones. They are drawn from
//! one counter for the whole process, not counted per actor: an actor that its
//! supervisor restarts in place starts afresh but keeps its mailbox, which may
//! still hold its predecessor's messages, and must never take one of them for its
//! own.

use std::sync::atomic::{AtomicU64, Ordering};

/// The last generation handed out; none is 0, the value an actor starts with.
static LAST: AtomicU64 = AtomicU64::new(0);

/// A generation no actor of this process has had.
pub(super) fn next() -> u64 {
    LAST.fetch_add(1, Ordering::Relaxed) + 1
}

#[cfg(test)]
mod tests {
    #[test]
    fn generations_are_never_handed_out_twice_nor_zero() {
        let a = super::next();
        let b = super::next();
        assert!(a > 0 && b > a);
    }
}
