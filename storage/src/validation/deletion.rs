//! The delete contract: a delete removes the run it names (its log, metadata and
//! timers) and nothing else, and only if the run is still the one the caller
//! checked: finished, its log where the caller saw it end, and created when the
//! caller's copy says (a run that took a deleted run's id is another run).

use super::{Backend, conflict, ev, events, meta, started, timer};
use crate::RunState;

/// Refused: a delete at a stale sequence number, of an unfinished run, of a run
/// created at another time, of a run that does not exist. Done: a delete of the
/// run checked, which leaves the other runs alone, and after which its id starts
/// a new run from nothing.
pub async fn delete_removes_only_the_run_checked<B: Backend>(b: &B) {
    let s = b.open().await;
    for id in ["del-a", "del-b"] {
        let mut create = events(id, 0, vec![started(), ev(1)]);
        create.meta = Some(meta(id, RunState::Completed));
        create.add_timers = vec![timer(50, id, "t")];
        s.submit(create).await.expect("create");
    }
    let created = meta("del-a", RunState::Completed).created_at;
    let stale = s.delete("del-a", 1, created, Vec::new()).await;
    conflict("a delete at a stale sequence number", stale);
    let other = s.delete("del-a", 2, created + 1, Vec::new()).await;
    conflict("a delete of a run created at another time", other);
    let missing = s.delete("del-none", 0, created, Vec::new()).await;
    conflict("a delete of a run that does not exist", missing);
    assert!(
        s.get_run("del-a").expect("read a").is_some(),
        "a refused delete removed the run"
    );

    s.delete("del-a", 2, created, vec![timer(50, "del-a", "t")])
        .await
        .expect("delete a");
    assert_eq!(s.get_run("del-a").expect("read a"), None);
    assert!(s.read_log("del-a").expect("log a").is_empty());
    assert_eq!(s.read_log("del-b").expect("log b").len(), 2);
    assert!(s.get_run("del-b").expect("read b").is_some());
    let timers = s.timers().expect("timers").items;
    assert_eq!(timers, [timer(50, "del-b", "t")], "timers after the delete");

    // Its id taken by an unfinished run: that one is not deleted.
    let mut again = events("del-a", 0, vec![started()]);
    again.meta = Some(meta("del-a", RunState::Running));
    s.submit(again).await.expect("create a again");
    let unfinished = s.delete("del-a", 1, created, Vec::new()).await;
    conflict("a delete of an unfinished run", unfinished);
    assert_eq!(s.read_log("del-a").expect("log a again").len(), 1);
    s.close();
}
