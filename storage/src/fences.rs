//! Fences for writers whose appends build on each other ([`Append::writer`]).
//!
//! A run actor's journal pipelines its appends: it submits the next before the
//! last has landed, with sequence numbers that assume the last one lands. When a
//! backend refuses one of them (its sequence check found another writer's
//! records there), the later ones still in its queue assumed records that are not
//! in the log. Their own sequence check may pass all the same, when the other
//! writer's records fill exactly the slots the refused append claimed: the log
//! would then hold the other writer's records followed by this writer's, which
//! no execution produced (a wait recorded twice, seen as a divergence on every
//! replay). So a backend fences the writer of a refused append, and refuses each
//! of its later appends.
//!
//! A backend keeps the fences of the latest [`KEPT`] refused writers: a writer
//! hears of its refusal within one commit and submits nothing more, so only its
//! appends already queued meet the fence.
//!
//! An append refused before it reaches the backend's queue (it does not encode)
//! fences nothing: the writer's later appends then expect sequence numbers past
//! the log's end, which the sequence check refuses by itself.
//!
//! [`Append::writer`]: crate::Append::writer

use std::collections::{HashSet, VecDeque};

/// Fences kept: refused writers remembered at once.
pub(crate) const KEPT: usize = 4096;

/// The writers a backend refuses, since one of their appends was refused.
#[derive(Debug, Default)]
pub struct WriterFences {
    fenced: HashSet<u64>,
    /// In the order fenced: the oldest is forgotten first.
    order: VecDeque<u64>,
}

impl WriterFences {
    /// Whether an append of `writer` must be refused.
    pub fn refuses(&self, writer: Option<u64>) -> bool {
        // Most of the time none is fenced: no hashing then.
        !self.fenced.is_empty() && writer.is_some_and(|w| self.fenced.contains(&w))
    }

    /// The sequence check of an append of `writer`, with its fence: `Ok(Some(n))`
    /// to write it, its events from sequence number `n` on (its `expected_seq`),
    /// `Ok(None)` when it places no events (nothing to check), or
    /// `Err((expected, actual))` when it is
    /// refused as a conflict, its writer fenced from then on. `actual` reads how
    /// many records the run's log holds, only when needed. An append of a writer
    /// fenced here or `fenced_elsewhere` (a backend's other set) is refused
    /// whatever the numbers: as expecting 0, if it expected nothing.
    ///
    /// # Errors
    /// The error of `actual`, the writer fenced (its next appends assumed this
    /// one would land).
    pub fn check<E>(
        &mut self,
        writer: Option<u64>,
        expected_seq: Option<u64>,
        fenced_elsewhere: bool,
        actual: impl FnOnce() -> Result<u64, E>,
    ) -> Result<Result<Option<u64>, (u64, u64)>, E> {
        let fenced = fenced_elsewhere || self.refuses(writer);
        let Some(expected) = expected_seq.or(fenced.then_some(0)) else {
            return Ok(Ok(None));
        };
        let actual = actual().inspect_err(|_| self.fence(writer))?;
        if actual != expected || fenced {
            self.fence(writer);
            return Ok(Err((expected, actual)));
        }
        Ok(Ok(Some(expected)))
    }

    /// Refuses every later append of `writer` (one of its appends was refused).
    pub fn fence(&mut self, writer: Option<u64>) {
        let Some(w) = writer else {
            return;
        };
        if !self.fenced.insert(w) {
            return;
        }
        self.order.push_back(w);
        if self.order.len() > KEPT
            && let Some(old) = self.order.pop_front()
        {
            self.fenced.remove(&old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_writer_is_refused_and_others_are_not() {
        let mut f = WriterFences::default();
        assert!(!f.refuses(Some(1)));
        f.fence(Some(1));
        f.fence(None);
        assert!(f.refuses(Some(1)));
        assert!(!f.refuses(Some(2)));
        assert!(!f.refuses(None));
    }

    #[test]
    fn a_check_places_refuses_and_fences() {
        let mut f = WriterFences::default();
        let len = |n: u64| move || Ok::<_, ()>(n);
        assert_eq!(f.check(Some(1), Some(3), false, len(3)), Ok(Ok(Some(3))));
        assert_eq!(f.check(Some(1), None, false, len(3)), Ok(Ok(None)));
        // A mismatch refuses and fences: the writer's next append is refused
        // even where it matches, and one with no events too.
        assert_eq!(f.check(Some(1), Some(4), false, len(3)), Ok(Err((4, 3))));
        assert_eq!(f.check(Some(1), Some(3), false, len(3)), Ok(Err((3, 3))));
        assert_eq!(f.check(Some(1), None, false, len(3)), Ok(Err((0, 3))));
        // Fenced elsewhere: refused here too, and fenced here from then on.
        assert_eq!(f.check(Some(2), Some(3), true, len(3)), Ok(Err((3, 3))));
        assert!(f.refuses(Some(2)));
        // A failed read fences the writer.
        assert_eq!(
            f.check(Some(5), Some(0), false, || Err::<u64, _>("io")),
            Err("io")
        );
        assert!(f.refuses(Some(5)));
        assert_eq!(f.check(None, Some(0), false, len(0)), Ok(Ok(Some(0))));
    }

    #[test]
    fn the_oldest_fences_are_forgotten_past_the_bound() {
        let mut f = WriterFences::default();
        for w in 0..=KEPT as u64 {
            f.fence(Some(w));
            f.fence(Some(w));
        }
        assert!(!f.refuses(Some(0)));
        assert!(f.refuses(Some(1)));
        assert!(f.refuses(Some(KEPT as u64)));
        assert_eq!(f.order.len(), KEPT);
    }
}
