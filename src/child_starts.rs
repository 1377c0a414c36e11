//! The child starts an execution has queued and not yet finished. A step body
//! waits for those queued before it: the log records a child as started when the
//! handler calls it (`ChildStarted`), and the start itself runs in a task of its
//! own once replay has caught up, so without the wait a body called after
//! `ctx.child` (a `ctx.signal` to that child, say) could reach the host before the
//! child exists. Synchronous: it hands back the wakers to wake.

use std::collections::BTreeSet;
use std::task::Waker;

/// Queued child starts, numbered in the order queued.
#[derive(Default)]
pub(crate) struct ChildStarts {
    next: u64,
    pending: BTreeSet<u64>,
    waiting: Vec<Waker>,
}

impl ChildStarts {
    /// Notes a start queued now; its number is handed to [`ChildStarts::finish`].
    pub(crate) fn queue(&mut self) -> u64 {
        let n = self.next;
        self.next += 1;
        self.pending.insert(n);
        n
    }

    /// The mark of everything queued until now, for [`ChildStarts::done_before`].
    pub(crate) fn mark(&self) -> u64 {
        self.next
    }

    /// Whether every start queued before `mark` has finished; if not, `waker` is
    /// woken when one finishes.
    pub(crate) fn done_before(&mut self, mark: u64, waker: &Waker) -> bool {
        if self.pending.first().is_none_or(|&first| first >= mark) {
            return true;
        }
        if !self.waiting.iter().any(|w| w.will_wake(waker)) {
            self.waiting.push(waker.clone());
        }
        false
    }

    /// Start `n` has finished (or was dropped): the wakers to wake.
    #[must_use]
    pub(crate) fn finish(&mut self, n: u64) -> Vec<Waker> {
        self.pending.remove(&n);
        std::mem::take(&mut self.waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::ChildStarts;
    use futures::task::noop_waker;

    #[test]
    fn a_mark_waits_only_for_starts_queued_before_it() {
        let waker = noop_waker();
        let mut starts = ChildStarts::default();
        assert!(starts.done_before(starts.mark(), &waker), "nothing queued");
        let first = starts.queue();
        let mark = starts.mark();
        let second = starts.queue();
        assert!(!starts.done_before(mark, &waker));
        assert_eq!(starts.finish(second).len(), 1, "the waiting waker");
        assert!(
            !starts.done_before(mark, &waker),
            "the first is still pending"
        );
        let _ = starts.finish(first);
        assert!(starts.done_before(mark, &waker));
        assert!(starts.done_before(starts.mark(), &waker), "all finished");
    }
}
