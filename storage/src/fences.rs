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
