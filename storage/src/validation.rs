//! The contract every [`Store`] backend passes, written once (feature `validation`).
//!
//! Each check is a `pub async fn` taking a [`Backend`]: something that opens a
//! store on one location (a directory, a database) and, where the backend can,
//! damages one record. A backend's tests call [`run_all`] (or single checks) with a
//! fresh backend per check:
//!
//! ```ignore
//! reel_storage::validation::run_all(|| MyBackend::new()).await;
//! ```
//!
//! Checks panic with a message naming what broke, like any test assertion. A
//! backend that several hosts can share also passes [`run_cluster_checks`]
//! (`validation/cluster.rs`) with a [`ClusterBackend`].

use std::future::Future;
use std::sync::Arc;

mod cluster;
mod deletion;
mod fences;
mod listener;
mod listing;
mod schedules;

pub use cluster::{
    ClusterBackend, a_closed_member_gives_its_leases_back,
    a_creation_without_the_lease_wakes_the_owner, inbox_carries_mail_to_the_owner,
    leases_are_exclusive_and_shared, mail_stays_for_the_owner, mail_travels_with_a_creation,
    run_cluster_checks, writes_need_the_lease,
};
pub use deletion::delete_removes_only_the_run_checked;
pub use fences::a_refused_writer_is_fenced;
pub use listener::a_listener_that_begins_during_a_commit_hears_of_it;
pub use listing::{listing_follows_each_change, listing_pages_and_counts};
pub use schedules::schedules_swap_atomically;

use crate::{
    Append, Event, Payload, RunMeta, RunState, Scan, StorageError, Store, TimerEntry,
    store::LogSize,
};

/// A record a check asks the backend to damage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Damage {
    /// The log record at this sequence number of this run no longer decodes.
    LogRecord {
        /// The run.
        run_id: String,
        /// The record.
        seq: u64,
    },
    /// The run's metadata record (in `runs` and `active`) no longer decodes.
    Meta {
        /// The run.
        run_id: String,
    },
    /// A timer-index key that does not decode is added.
    TimerKey,
}

/// One location of a backend under test.
pub trait Backend: Send + Sync {
    /// Opens the store at this backend's location; after a [`Store::close`] it opens
    /// the same location again and sees what was written.
    fn open(&self) -> impl Future<Output = Arc<dyn Store>> + Send;

    /// Whether what a closed store wrote is there when it is opened again
    /// (false for an in-memory store: [`close_and_reopen`] checks less then).
    fn persistent(&self) -> bool {
        true
    }

    /// Damages a record of the closed store; false if the backend cannot (its
    /// records are not encoded), which skips the corruption checks.
    fn damage(&self, damage: Damage) -> impl Future<Output = bool> + Send {
        let _ = damage;
        async { false }
    }
}

/// Runs every check, each on a fresh backend from `new`.
pub async fn run_all<B: Backend, F: Fn() -> B>(new: F) {
    cas_refuses_stale_writer(&new()).await;
    batch_is_atomic(&new()).await;
    one_conflict_fails_only_itself(&new()).await;
    appends_of_many_runs_keep_their_order(&new()).await;
    reads_of_a_log(&new()).await;
    runs_and_active_set(&new()).await;
    timers_in_due_order(&new()).await;
    invalid_input_refused(&new()).await;
    close_and_reopen(&new()).await;
    corruption_is_reported(&new()).await;
    listing_pages_and_counts(&new()).await;
    listing_follows_each_change(&new()).await;
    schedules_swap_atomically(&new()).await;
    delete_removes_only_the_run_checked(&new()).await;
    a_refused_writer_is_fenced(&new()).await;
}

fn ev(i: u64) -> Event {
    Event::StepCompleted {
        id: format!("s{i}"),
        output: Payload(i.to_le_bytes().to_vec()),
    }
}

fn started() -> Event {
    Event::RunStarted {
        workflow: "w".into(),
        version: 1,
        input: Payload(vec![1]),
    }
}

fn meta(run_id: &str, state: RunState) -> RunMeta {
    RunMeta {
        run_id: run_id.to_owned(),
        workflow: "w".into(),
        version: 1,
        state,
        created_at: 1,
        updated_at: 2,
        parent: None,
        segment_start: 0,
        segment: 0,
        queue: None,
    }
}

fn suspended() -> RunState {
    RunState::Suspended {
        waiting_on: "timer".into(),
        awaits_child: false,
    }
}

fn events(run_id: &str, expected_seq: u64, events: Vec<Event>) -> Append {
    Append {
        run_id: run_id.to_owned(),
        expected_seq: Some(expected_seq),
        events,
        durable: true,
        ..Append::default()
    }
}

/// Asserts that `r` is a conflict; `what` names the write in the message.
fn conflict(what: &str, r: Result<(), StorageError>) {
    assert!(
        matches!(r, Err(StorageError::Conflict { .. })),
        "{what}: {r:?}"
    );
}

fn timer(fire_at: u64, run_id: &str, timer_id: &str) -> TimerEntry {
    TimerEntry {
        fire_at,
        run_id: run_id.to_owned(),
        timer_id: timer_id.to_owned(),
    }
}

fn ids(scan: &Scan<RunMeta>) -> Vec<&str> {
    scan.items.iter().map(|m| m.run_id.as_str()).collect()
}

/// An append whose expected sequence number is stale is refused with a conflict
/// naming the real one, and writes nothing.
pub async fn cas_refuses_stale_writer<B: Backend>(b: &B) {
    let s = b.open().await;
    s.submit(events("r", 0, vec![started(), ev(1)]))
        .await
        .expect("first append");
    let mut stale = events("r", 1, vec![ev(9)]);
    stale.meta = Some(meta("r", RunState::Completed));
    match s.submit(stale).await {
        Err(StorageError::Conflict {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (1, 2)),
        other => panic!("a stale append must conflict, got {other:?}"),
    }
    assert_eq!(s.read_log("r").expect("read"), vec![started(), ev(1)]);
    assert_eq!(
        s.get_run("r").expect("meta"),
        None,
        "a refused append wrote its metadata"
    );
    s.submit(events("r", 2, vec![ev(2)]))
        .await
        .expect("append at the right seq");
    assert_eq!(s.next_seq("r").expect("next"), 3);
    // A compare-and-set without events: metadata conditional on the log.
    let mut cond = Append {
        run_id: "r".into(),
        expected_seq: Some(2),
        meta: Some(meta("r", RunState::Completed)),
        ..Append::default()
    };
    assert!(matches!(
        s.submit(cond.clone()).await,
        Err(StorageError::Conflict { .. })
    ));
    cond.expected_seq = Some(3);
    s.submit(cond).await.expect("conditional metadata");
    assert_eq!(s.read_log("r").expect("read").len(), 3);
    s.close();
}

/// Events, metadata, active set and timer changes of one append land together; a
/// finished run leaves the active set.
pub async fn batch_is_atomic<B: Backend>(b: &B) {
    let s = b.open().await;
    let mut a = events("r", 0, vec![started(), ev(1)]);
    a.meta = Some(meta("r", suspended()));
    a.add_timers = vec![timer(50, "r", "t1"), timer(10, "r", "t0")];
    s.submit(a).await.expect("append");
    assert_eq!(s.read_log("r").expect("log").len(), 2);
    assert_eq!(s.get_run("r").expect("meta"), Some(meta("r", suspended())));
    assert_eq!(ids(&s.unfinished_runs().expect("active")), ["r"]);
    assert_eq!(
        s.timers().expect("timers").items,
        [timer(10, "r", "t0"), timer(50, "r", "t1")]
    );
    let mut done = events("r", 2, vec![ev(2)]);
    done.meta = Some(meta("r", RunState::Completed));
    done.remove_timers = vec![timer(10, "r", "t0"), timer(50, "r", "t1")];
    s.submit(done).await.expect("finish");
    assert!(s.unfinished_runs().expect("active").items.is_empty());
    assert_eq!(ids(&s.list_runs().expect("runs")), ["r"]);
    assert!(s.timers().expect("timers").items.is_empty());
    // A refused append changes none of it.
    let mut stale = events("r", 0, vec![ev(7)]);
    stale.meta = Some(meta("r", suspended()));
    stale.add_timers = vec![timer(5, "r", "x")];
    assert!(s.submit(stale).await.is_err());
    assert!(s.timers().expect("timers").items.is_empty());
    assert!(s.unfinished_runs().expect("active").items.is_empty());
    s.close();
}

/// Appends submitted together (one group commit): the one with a stale sequence
/// number fails, every other one lands.
pub async fn one_conflict_fails_only_itself<B: Backend>(b: &B) {
    let s = b.open().await;
    s.submit(events("bad", 0, vec![started()]))
        .await
        .expect("seed");
    let mut tickets = Vec::new();
    for i in 0..20u64 {
        let mut a = events(&format!("r{i:02}"), 0, vec![started(), ev(i)]);
        a.meta = Some(meta(&format!("r{i:02}"), RunState::Running));
        tickets.push(s.submit(a));
        if i == 10 {
            tickets.push(s.submit(events("bad", 0, vec![ev(0)])));
        }
    }
    let results = futures_join(tickets).await;
    let failed: Vec<_> = results.iter().filter(|r| r.is_err()).collect();
    assert_eq!(
        failed.len(),
        1,
        "exactly the stale append fails: {results:?}"
    );
    assert!(matches!(failed[0], Err(StorageError::Conflict { .. })));
    assert_eq!(s.list_runs().expect("runs").items.len(), 20);
    assert_eq!(s.read_log("bad").expect("log"), vec![started()]);
    s.close();
}

async fn futures_join<T>(tickets: Vec<T>) -> Vec<T::Output>
where
    T: Future,
{
    let mut out = Vec::with_capacity(tickets.len());
    for t in tickets {
        out.push(t.await);
    }
    out
}

/// Many runs appending concurrently (from many tasks) each get their events in
/// submission order with gapless sequence numbers.
pub async fn appends_of_many_runs_keep_their_order<B: Backend>(b: &B) {
    let s = b.open().await;
    let mut tasks = Vec::new();
    for r in 0..16u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let run = format!("run-{r}");
            for i in 0..10u64 {
                let durable = i % 3 == 0;
                let mut a = events(&run, i, vec![ev(i)]);
                a.durable = durable;
                s.submit(a).await.expect("append");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    for r in 0..16u64 {
        let log = s.read_log(&format!("run-{r}")).expect("log");
        assert_eq!(log, (0..10).map(ev).collect::<Vec<_>>());
    }
    s.close();
}

/// `read_log`, `read_log_from`, `read_records`, `log_size`, `last_event` and
/// `next_seq` on a known and an unknown run.
pub async fn reads_of_a_log<B: Backend>(b: &B) {
    let s = b.open().await;
    assert!(s.read_log("nobody").expect("empty").is_empty());
    assert_eq!(s.next_seq("nobody").expect("next"), 0);
    assert_eq!(s.last_event("nobody").expect("last"), None);
    assert_eq!(s.log_size("nobody", 0).expect("size"), LogSize::default());
    assert_eq!(s.get_run("nobody").expect("meta"), None);
    let before = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    s.submit(events("r", 0, vec![started(), ev(1), ev(2), ev(3)]))
        .await
        .expect("append");
    // A run whose id extends another's reads none of its records.
    s.submit(events("r2", 0, vec![ev(7)]))
        .await
        .expect("append");
    assert_eq!(s.read_log("r").expect("log").len(), 4);
    assert_eq!(s.read_log_from("r", 2).expect("from"), vec![ev(2), ev(3)]);
    assert!(s.read_log_from("r", 9).expect("past the end").is_empty());
    let records = s.read_records("r", 1).expect("records");
    assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(records[0].event, ev(1));
    assert!(
        records.iter().all(|r| r.at >= before),
        "append time recorded"
    );
    assert_eq!(s.last_event("r").expect("last"), Some((3, ev(3))));
    assert_eq!(s.next_seq("r").expect("next"), 4);
    let all = s.log_size("r", 0).expect("size");
    let tail = s.log_size("r", 2).expect("size");
    assert_eq!((all.events, tail.events), (4, 2));
    assert!(all.bytes > tail.bytes && tail.bytes > 0);
    s.close();
}

/// `list_runs` is ordered by run id; `unfinished_runs` holds exactly the runs not
/// finished, with their latest metadata.
pub async fn runs_and_active_set<B: Backend>(b: &B) {
    let s = b.open().await;
    for (run, state) in [
        ("c", RunState::Running),
        ("a", RunState::Completed),
        ("b", suspended()),
        ("d", RunState::Cancelled { reason: "x".into() }),
    ] {
        let mut a = events(run, 0, vec![started()]);
        a.meta = Some(meta(run, state));
        s.submit(a).await.expect("append");
    }
    assert_eq!(ids(&s.list_runs().expect("runs")), ["a", "b", "c", "d"]);
    assert_eq!(ids(&s.unfinished_runs().expect("active")), ["b", "c"]);
    // Metadata alone, without events or a sequence check.
    let only_meta = Append {
        run_id: "c".into(),
        meta: Some(meta("c", RunState::Completed)),
        durable: true,
        ..Append::default()
    };
    s.submit(only_meta).await.expect("meta");
    assert_eq!(ids(&s.unfinished_runs().expect("active")), ["b"]);
    let b_meta = s.unfinished_runs().expect("active").items.remove(0);
    assert_eq!(b_meta, meta("b", suspended()));
    s.close();
}

/// The timer index is read in due-time order, and adds and removes apply in order
/// (a remove then an add of one entry in one append keeps it).
pub async fn timers_in_due_order<B: Backend>(b: &B) {
    let s = b.open().await;
    let add = |run: &str, timers: Vec<TimerEntry>| Append {
        run_id: run.to_owned(),
        add_timers: timers,
        durable: true,
        ..Append::default()
    };
    s.submit(add("b", vec![timer(300, "b", "x"), timer(5, "b", "y")]))
        .await
        .expect("timers");
    s.submit(add(
        "a",
        vec![timer(300, "a", "x"), timer(1 << 40, "a", "late")],
    ))
    .await
    .expect("timers");
    let items = s.timers().expect("timers").items;
    assert_eq!(
        items,
        [
            timer(5, "b", "y"),
            timer(300, "a", "x"),
            timer(300, "b", "x"),
            timer(1 << 40, "a", "late")
        ]
    );
    let mut moved = add("b", vec![timer(5, "b", "y")]);
    moved.remove_timers = vec![timer(5, "b", "y"), timer(300, "b", "x")];
    s.submit(moved).await.expect("remove and re-add");
    assert_eq!(s.timers().expect("timers").items.len(), 3);
    s.close();
}

/// Run ids a key cannot hold and events without a sequence check are refused before
/// anything is written.
pub async fn invalid_input_refused<B: Backend>(b: &B) {
    let s = b.open().await;
    for bad in ["", "a\0b"] {
        let r = s.submit(events(bad, 0, vec![ev(0)])).await;
        assert!(
            matches!(r, Err(StorageError::InvalidRunId(_))),
            "{bad:?}: {r:?}"
        );
    }
    let no_seq = Append {
        run_id: "r".into(),
        events: vec![ev(0)],
        ..Append::default()
    };
    assert!(matches!(
        s.submit(no_seq).await,
        Err(StorageError::Encode(_))
    ));
    let mut other = events("r", 0, vec![ev(0)]);
    other.meta = Some(meta("someone-else", RunState::Running));
    assert!(s.submit(other).await.is_err());
    assert!(s.read_log("r").expect("log").is_empty());
    s.close();
}

/// Writes made before `close` (durable or not) are there when the location is
/// opened again; a closed store refuses writes and reads; `close` is idempotent.
pub async fn close_and_reopen<B: Backend>(b: &B) {
    let s = b.open().await;
    let mut a = events("r", 0, vec![started(), ev(1)]);
    a.meta = Some(meta("r", suspended()));
    a.add_timers = vec![timer(9, "r", "t")];
    s.submit(a).await.expect("append");
    let mut lazy = events("r", 2, vec![ev(2)]);
    lazy.durable = false;
    let lazy = s.submit(lazy);
    s.close();
    lazy.await.expect("a write queued before close lands");
    s.close();
    assert!(matches!(
        s.submit(events("r", 3, vec![ev(3)])).await,
        Err(StorageError::Closed)
    ));
    assert!(matches!(s.read_log("r"), Err(StorageError::Closed)));
    drop(s);
    if !b.persistent() {
        return;
    }
    let s = b.open().await;
    assert_eq!(s.read_log("r").expect("log"), vec![started(), ev(1), ev(2)]);
    assert_eq!(ids(&s.unfinished_runs().expect("active")), ["r"]);
    assert_eq!(s.timers().expect("timers").items, [timer(9, "r", "t")]);
    s.submit(events("r", 3, vec![ev(3)]))
        .await
        .expect("append after reopen");
    s.close();
}

/// A damaged log record fails the reads of its run only, naming the record; a
/// damaged metadata record or timer key is reported in [`Scan::corrupt`] while every
/// other run still reads. Skipped for a backend that cannot damage records.
pub async fn corruption_is_reported<B: Backend>(b: &B) {
    let s = b.open().await;
    for run in ["good", "bad-log", "bad-meta"] {
        let mut a = events(run, 0, vec![started(), ev(1)]);
        a.meta = Some(meta(run, RunState::Running));
        a.add_timers = vec![timer(7, run, "t")];
        s.submit(a).await.expect("append");
    }
    s.close();
    drop(s);
    let log = Damage::LogRecord {
        run_id: "bad-log".into(),
        seq: 1,
    };
    if !b.damage(log).await {
        return;
    }
    assert!(
        b.damage(Damage::Meta {
            run_id: "bad-meta".into()
        })
        .await
    );
    assert!(b.damage(Damage::TimerKey).await);
    let s = b.open().await;
    match s.read_log("bad-log") {
        Err(StorageError::Corrupt { run_id, seq, .. }) => {
            assert_eq!((run_id.as_str(), seq), ("bad-log", 1))
        }
        other => panic!("a damaged record must be reported, got {other:?}"),
    }
    assert!(s.last_event("bad-log").is_err());
    assert_eq!(s.next_seq("bad-log").expect("next_seq reads keys only"), 2);
    assert_eq!(s.read_log("good").expect("log").len(), 2);
    let runs = s.list_runs().expect("runs");
    assert_eq!(ids(&runs), ["bad-log", "good"]);
    assert_eq!(runs.corrupt.len(), 1);
    assert_eq!(runs.corrupt[0].run_id.as_deref(), Some("bad-meta"));
    let active = s.unfinished_runs().expect("active");
    assert_eq!(active.corrupt.len(), 1);
    assert!(matches!(
        s.get_run("bad-meta"),
        Err(StorageError::CorruptRecord(_))
    ));
    let timers = s.timers().expect("timers");
    assert_eq!(timers.items.len(), 3);
    assert_eq!(timers.corrupt.len(), 1);
    s.close();
}
