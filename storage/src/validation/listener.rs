//! The commit listener contract of a backend whose writer asks
//! [`CommitListener::wants`] before it commits a batch (fjall, Postgres): a
//! listener that begins listening during the commit hears of it (`missed`), so a
//! log watch taken then, which may have read the log before the commit landed,
//! reads it again. Not for a backend that asks only after its commit (the
//! in-memory store), which owes such a listener nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Backend, events, started};
use crate::CommitListener;

/// Says no to its first `wants`, yes to every later one (someone began watching
/// right after the writer first asked), and counts what it hears.
#[derive(Default)]
struct BeginsDuringTheCommit {
    asked: AtomicUsize,
    grew: AtomicUsize,
    missed: AtomicUsize,
}

impl CommitListener for BeginsDuringTheCommit {
    fn wants(&self) -> bool {
        self.asked.fetch_add(1, Ordering::SeqCst) > 0
    }

    fn grew(&self, _run_id: &str, _next_seq: u64) {
        self.grew.fetch_add(1, Ordering::SeqCst);
    }

    fn missed(&self) {
        self.missed.fetch_add(1, Ordering::SeqCst);
    }
}

impl BeginsDuringTheCommit {
    fn heard(&self) -> (usize, usize) {
        (
            self.grew.load(Ordering::SeqCst),
            self.missed.load(Ordering::SeqCst),
        )
    }
}

/// A listener that begins during a commit is told to re-read before the append
/// is answered (the writer collected nothing for it); one listening when the next
/// batch begins is told what grew.
pub async fn a_listener_that_begins_during_a_commit_hears_of_it<B: Backend>(b: &B) {
    let s = b.open().await;
    let listener = Arc::new(BeginsDuringTheCommit::default());
    s.set_commit_listener(listener.clone());
    s.submit(events("listen-a", 0, vec![started()]))
        .await
        .expect("append");
    assert_eq!(
        listener.heard(),
        (0, 1),
        "(grew, missed): no one watched when the writer asked, so it collected \
         nothing and must tell the listener that began during the commit to re-read"
    );
    s.submit(events("listen-b", 0, vec![started()]))
        .await
        .expect("append");
    assert_eq!(
        listener.heard(),
        (1, 1),
        "(grew, missed): a listener watching when the batch began hears what grew"
    );
    s.close();
}
