//! Acceptance: operating runs as the README's "Observability" and "Operating
//! runs" bullets and DESIGN's "Operating runs" promise them, checked where the
//! other suites are thin: `RunFilter::created_after`/`created_before` agree with
//! the `created_at` the listing reports ("Only runs started at or after / before
//! this time"); `RunInfo::updated_at` is "when its state last changed" and
//! `created_at` "when the run was started"; a fork "has no parent" (also the fork
//! of a child run) and carries "the timers pending at the cut (... the run's own
//! timeout included)"; a fork of a queued run gets "no de-duplication key"; a
//! paused (admitted, unfinished) run keeps its queue slot; wrong-state operations
//! are the documented typed errors; `count()` has every state, zeros included.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::workflows::Waiter;
use common::{status::until_status, within};
use reel::testing::TestClock;
use reel::{
    Ctx, Error, Host, QueueOptions, RunFilter, RunStatus, StartOptions, StatusKind, Workflow,
};

const LIMIT: Duration = Duration::from_secs(20);
const HOUR: Duration = Duration::from_secs(3600);

/// 2027-01-10T00:00:00Z.
fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_799_539_200_000)
}

/// Starts child `<own id>/kid` (a `Waiter`) and returns its output.
struct Parent;

impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let kid = format!("{}/kid", ctx.run_id());
        ctx.child::<Waiter>(&kid, ()).await
    }
}

async fn host_on(clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .in_memory()
        .clock(clock.clone())
        .register(Waiter)
        .register(Parent)
        .queue("q1", QueueOptions::default().concurrency(1))
        .queue("q5", QueueOptions::default().concurrency(5))
        .build()
        .await
}

/// The sequence number just past the run's last record: a cut at the end of its
/// log.
async fn end_of_log(host: &Host, run: &str) -> anyhow::Result<u64> {
    let records = host.run(run).records().await?;
    Ok(records.last().map_or(0, |r| r.seq) + 1)
}

fn ids(page: &reel::Page<reel::RunInfo>) -> Vec<String> {
    page.items.iter().map(|i| i.run_id.clone()).collect()
}

fn assert_invalid(r: reel::Result<()>, run: &str, state: StatusKind, action: &str) {
    match r {
        Err(Error::InvalidState {
            run_id,
            state: s,
            action: a,
        }) => {
            assert_eq!(run_id, run);
            assert_eq!(s, state, "state named for {action} of {run}");
            assert!(a.contains(action), "action `{a}` names {action}");
        }
        other => panic!("{action} of {run}: expected InvalidState({state:?}), got {other:?}"),
    }
}

/// "created_after: Only runs started at or after this time; created_before: Only
/// runs started before this time." A bound a fraction of a millisecond after the
/// `created_at` the listing itself reports must keep the run out of
/// `created_after` and in `created_before`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_bounds_agree_with_the_reported_created_at() -> anyhow::Result<()> {
    let clock = TestClock::new(t0() + Duration::from_micros(300));
    let host = host_on(&clock).await?;
    let run = host.start::<Waiter>("w", ()).await?;
    run.wait_until_suspended().await?;
    let created = run.info().await?.created_at;
    let just_after = created + Duration::from_micros(500);

    let inclusive = host
        .list(RunFilter::default().created(Some(created), Some(created + Duration::from_millis(1))))
        .await?;
    assert_eq!(
        ids(&inclusive),
        vec!["w".to_owned()],
        "[created, created+1ms)"
    );

    let before = host
        .list(RunFilter::default().created(None, Some(just_after)))
        .await?;
    let after = host
        .list(RunFilter::default().created(Some(just_after), None))
        .await?;
    assert_eq!(
        (ids(&before), ids(&after)),
        (vec!["w".to_owned()], Vec::new()),
        "a run created at {created:?} was started before {just_after:?} (so listed by \
         created_before, and not by created_after)"
    );
    host.shutdown().await?;
    Ok(())
}

/// `RunInfo::created_at` is when the run was started and stays; `updated_at` is
/// when its state last changed (suspended, paused, resumed, completed), on the
/// host's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updated_at_follows_each_state_change_and_created_at_stays() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    let run = host.start::<Waiter>("u", ()).await?;
    run.wait_until_suspended().await?;
    let info = run.info().await?;
    assert_eq!(info.created_at, t0());
    assert_eq!(info.updated_at, t0());

    clock.advance(HOUR);
    run.pause().await?;
    until_status(&run, "paused", |s| *s == RunStatus::Paused).await?;
    let info = run.info().await?;
    assert_eq!(info.created_at, t0());
    assert_eq!(info.updated_at, t0() + HOUR, "paused at hour 1");
    let listed = host.list(RunFilter::default()).await?;
    assert_eq!(
        listed.items[0].updated_at,
        t0() + HOUR,
        "the listing agrees"
    );

    clock.advance(HOUR);
    run.resume().await?;
    until_status(&run, "suspended again", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await?;
    assert_eq!(
        run.info().await?.updated_at,
        t0() + 2 * HOUR,
        "resumed at hour 2"
    );

    clock.advance(HOUR);
    run.signal("go", &7u32, "g").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 7);
    let info = run.info().await?;
    assert_eq!(info.status, RunStatus::Completed);
    assert_eq!(info.created_at, t0());
    assert_eq!(info.updated_at, t0() + 3 * HOUR, "completed at hour 3");
    host.shutdown().await?;
    Ok(())
}

/// "It has no parent": the fork of a child run is nobody's child, neither in its
/// info nor in the parent's listing or children, and the original child and its
/// parent go on untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fork_of_a_child_run_has_no_parent() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    let parent = host.start::<Parent>("p", ()).await?;
    let kid = host.run("p/kid");
    within(LIMIT, "the child waits", async {
        loop {
            match kid.wait_until_suspended().await {
                Ok(_) => return anyhow::Ok(()),
                Err(Error::UnknownRun(_)) => tokio::time::sleep(Duration::from_millis(2)).await,
                Err(e) => return Err(e.into()),
            }
        }
    })
    .await??;
    assert_eq!(kid.info().await?.parent.as_deref(), Some("p"));

    let cut = end_of_log(&host, "p/kid").await?;
    let fork = host.fork("p/kid", cut, "kid-fork").await?;
    fork.wait_until_suspended().await?;
    assert_eq!(fork.info().await?.parent, None, "a fork has no parent");
    let of_p = host.list(RunFilter::default().parent("p")).await?;
    assert_eq!(ids(&of_p), vec!["p/kid".to_owned()]);
    let children: Vec<String> = parent
        .children()
        .await?
        .into_iter()
        .map(|c| c.run_id)
        .collect();
    assert_eq!(children, vec!["p/kid".to_owned()]);

    fork.signal("go", &1u32, "f").await?;
    assert_eq!(within(LIMIT, "the fork", fork.result::<u32>()).await??, 1);
    assert!(matches!(
        parent.status().await?,
        RunStatus::Suspended { .. }
    ));
    kid.signal("go", &2u32, "k").await?;
    assert_eq!(within(LIMIT, "the parent", parent.result()).await??, 2);
    host.shutdown().await?;
    Ok(())
}

/// "timers pending at the cut (armed for the fork, due when they were due, the
/// run's own timeout included)": a fork of a run started with a one-hour timeout
/// is cancelled for its deadline when the original's deadline passes, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_keeps_the_originals_deadline() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    let run = host
        .start_with::<Waiter>("d", (), StartOptions::default().timeout(HOUR))
        .await?;
    run.wait_until_suspended().await?;
    clock.advance(Duration::from_secs(10 * 60));
    let cut = end_of_log(&host, "d").await?;
    let fork = host.fork("d", cut, "d-fork").await?;
    fork.wait_until_suspended().await?;

    clock.advance(Duration::from_secs(49 * 60));
    // Hour 0:59: neither is due.
    assert!(matches!(fork.status().await?, RunStatus::Suspended { .. }));
    clock.advance(Duration::from_secs(60));
    for r in [&*run, &fork] {
        match within(LIMIT, "the deadline", r.result::<u32>()).await? {
            Err(Error::Cancelled(reason)) => assert!(
                reason.starts_with("deadline exceeded"),
                "{}: {reason}",
                r.id()
            ),
            other => panic!("{} past its deadline: {other:?}", r.id()),
        }
    }
    host.shutdown().await?;
    Ok(())
}

/// "A fork of a run started on a queue is enqueued on that queue (same priority,
/// no de-duplication key)": the fork is not refused for the original's key, and
/// once the original ends the key is free although the fork still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_queued_run_holds_no_dedup_key() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    let keyed = || StartOptions::default().queue("q5").dedup_key("k");
    let a = host.start_with::<Waiter>("a", (), keyed()).await?;
    a.wait_until_suspended().await?;
    match host.start_with::<Waiter>("x", (), keyed()).await {
        Err(Error::Deduplicated { run_id, key, queue }) => {
            assert_eq!(
                (run_id.as_str(), key.as_str(), queue.as_str()),
                ("a", "k", "q5")
            );
        }
        other => panic!("a second start with the key: {other:?}"),
    }
    let cut = end_of_log(&host, "a").await?;
    let fork = host.fork("a", cut, "a-fork").await?;
    fork.wait_until_suspended().await?;
    assert_eq!(fork.info().await?.queue.as_deref(), Some("q5"));

    a.signal("go", &1u32, "g").await?;
    within(LIMIT, "a ends", a.result()).await??;
    let b = host.start_with::<Waiter>("b", (), keyed()).await?;
    b.wait_until_suspended().await?;
    assert!(matches!(fork.status().await?, RunStatus::Suspended { .. }));
    host.shutdown().await?;
    Ok(())
}

/// A queue's slot is held by its "admitted and unfinished" runs: a paused run
/// keeps it (the next run stays enqueued) until it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_keeps_its_queue_slot_until_it_ends() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    let a = host.start_on::<Waiter>("q1", "a", ()).await?;
    a.wait_until_suspended().await?;
    a.pause().await?;
    until_status(&a, "paused", |s| *s == RunStatus::Paused).await?;
    let b = host.start_on::<Waiter>("q1", "b", ()).await?;
    for _ in 0..50 {
        assert_eq!(b.status().await?, RunStatus::Enqueued, "a holds the slot");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    a.cancel("done").await?;
    assert_eq!(a.status().await?, RunStatus::Cancelled);
    within(LIMIT, "b admitted", b.wait_until_suspended()).await??;
    host.shutdown().await?;
    Ok(())
}

/// The wrong states the README and DESIGN name, each a typed error that changes
/// nothing: resume of a run that is not paused, retry of one not parked, delete
/// of an unfinished run (suspended or paused), pause of a finished run, fork at
/// a bad cut / of an unknown run / onto a taken id, cancel and terminate of a
/// completed run; cancel of a cancelled run does nothing; `wait_until_suspended`
/// of an ended or unknown run. `count()` has every state, zeros included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_state_operations_are_typed_errors() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let host = host_on(&clock).await?;
    let counts = host.count().await?;
    for kind in [
        StatusKind::Running,
        StatusKind::Suspended,
        StatusKind::Completed,
        StatusKind::Failed,
        StatusKind::Cancelled,
        StatusKind::Parked,
        StatusKind::Paused,
        StatusKind::Enqueued,
    ] {
        assert_eq!(counts.get(&kind), Some(&0), "{kind:?} on an empty host");
    }

    let w = host.start::<Waiter>("w", ()).await?;
    w.wait_until_suspended().await?;
    assert_invalid(w.resume().await, "w", StatusKind::Suspended, "resume");
    assert_invalid(w.retry().await, "w", StatusKind::Suspended, "retry");
    assert_invalid(w.delete().await, "w", StatusKind::Suspended, "delete");
    w.pause().await?;
    until_status(&w, "paused", |s| *s == RunStatus::Paused).await?;
    w.pause().await?; // pausing a paused run does nothing
    assert_invalid(w.delete().await, "w", StatusKind::Paused, "delete");
    assert_invalid(w.retry().await, "w", StatusKind::Paused, "retry");
    assert_eq!(w.status().await?, RunStatus::Paused);
    w.resume().await?;
    w.wait_until_suspended().await?;

    let done = host.start::<Waiter>("done", ()).await?;
    done.signal("go", &3u32, "g").await?;
    within(LIMIT, "done", done.result()).await??;
    assert_invalid(done.pause().await, "done", StatusKind::Completed, "pause");
    assert_invalid(done.resume().await, "done", StatusKind::Completed, "resume");
    assert!(matches!(done.cancel("x").await, Err(Error::RunFinished(_))));
    assert!(matches!(
        done.terminate("x").await,
        Err(Error::RunFinished(_))
    ));
    assert!(matches!(
        done.wait_until_suspended().await,
        Err(Error::RunFinished(_))
    ));
    assert!(matches!(
        host.run("nobody").wait_until_suspended().await,
        Err(Error::UnknownRun(_))
    ));

    // A finished run's last cut is the position of its end record.
    let end = end_of_log(&host, "done").await? - 1;
    assert!(matches!(
        host.fork("done", 0, "f0").await,
        Err(Error::InvalidCut { .. })
    ));
    assert!(matches!(
        host.fork("done", end + 1, "f1").await,
        Err(Error::InvalidCut { .. })
    ));
    assert!(matches!(
        host.fork("nobody", 2, "f2").await,
        Err(Error::UnknownRun(_))
    ));
    let onto = host.fork("done", end, "w").await;
    assert!(
        matches!(onto, Err(Error::RunExists { .. })),
        "fork onto a taken id: {onto:?}"
    );
    for id in ["f0", "f1", "f2"] {
        assert!(matches!(
            host.run(id).status().await,
            Err(Error::UnknownRun(_))
        ));
    }
    assert!(matches!(w.status().await?, RunStatus::Suspended { .. }));

    w.cancel("stop").await?;
    w.cancel("again").await?; // cancelling a cancelled run does nothing more
    assert!(matches!(w.result().await, Err(Error::Cancelled(r)) if r == "stop"));
    w.delete().await?;
    assert!(matches!(w.status().await, Err(Error::UnknownRun(_))));
    let counts = host.count().await?;
    assert_eq!(counts.get(&StatusKind::Completed), Some(&1));
    assert_eq!(counts.get(&StatusKind::Cancelled), Some(&0));
    host.shutdown().await?;
    Ok(())
}
