//! The fence contract (`Append::writer`): once one append of a writer is refused,
//! each later one is refused too, even one whose sequence number matches the log
//! by then, since it assumed the refused one landed. Other writers go on.

use super::{Backend, conflict, ev, events, meta, started, suspended};
use crate::{Append, RunState};

fn of(writer: u64, mut append: Append) -> Append {
    append.writer = Some(writer);
    append
}

/// Two writers read a log at the same length; the other's append lands first.
/// This writer's append is refused, and so are its next ones, submitted before
/// the answer came (one group commit) or after it: with events (whose sequence
/// number now matches the log), without events, with a sequence number read
/// again. A writer that never had a refusal, and a write without a writer, go on.
pub async fn a_refused_writer_is_fenced<B: Backend>(b: &B) {
    let s = b.open().await;
    s.submit(events("f", 0, vec![started()]))
        .await
        .expect("seed");
    let theirs = s.submit(of(2, events("f", 1, vec![ev(1)])));
    let mine = s.submit(of(1, events("f", 1, vec![ev(7)])));
    // Assumes `mine` landed: 2 is where its events would go after it.
    let next = s.submit(of(1, events("f", 2, vec![ev(8), ev(9)])));
    theirs.await.expect("the other writer's append");
    conflict("the stale append", mine.await);
    conflict("an append that assumed a refused one", next.await);
    assert_eq!(s.read_log("f").expect("log"), vec![started(), ev(1)]);
    // Later, one at a time.
    conflict(
        "an append of a fenced writer at the log's end",
        s.submit(of(1, events("f", 2, vec![ev(8)]))).await,
    );
    let status = Append {
        run_id: "f".into(),
        meta: Some(meta("f", suspended())),
        ..Append::default()
    };
    conflict(
        "a status write of a fenced writer",
        s.submit(of(1, status.clone())).await,
    );
    assert_eq!(s.get_run("f").expect("meta"), None);
    // The other writer, and a write of no writer, go on.
    s.submit(of(2, events("f", 2, vec![ev(2)])))
        .await
        .expect("the writer that won");
    s.submit(status).await.expect("a write of no writer");
    let mut done = events("f", 3, vec![ev(3)]);
    done.meta = Some(meta("f", RunState::Completed));
    s.submit(of(3, done)).await.expect("a new writer");
    assert_eq!(
        s.read_log("f").expect("log"),
        vec![started(), ev(1), ev(2), ev(3)]
    );
    s.close();
}
