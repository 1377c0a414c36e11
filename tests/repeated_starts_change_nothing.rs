//! DBOS-style idempotency: starting a workflow twice with the same id returns the
//! same run and result and runs it once, also when the starts race, when the
//! second start carries another input or options, and across a restart.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use common::workflows::Waiter;
use common::{Counter, within};
use reel::testing::TestClock;
use reel::{
    Ctx, Error, Event, FjallStore, Host, QueueOptions, RunFilter, RunStatus, StartOptions, Workflow,
};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);

/// One step that counts its executions, then returns its input doubled.
#[derive(Clone)]
struct Once {
    runs: Counter,
}
impl Workflow for Once {
    const NAME: &'static str = "once";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("work", |_| async {
            self.runs.bump();
            Ok::<_, String>(n * 2)
        })
        .await
    }
}

/// Another workflow name.
struct Twin;
impl Workflow for Twin {
    const NAME: &'static str = "twin";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n)
    }
}

/// Sixteen starts of one new id at once, in ten rounds: one run, one result,
/// its step run once. A start whose write lands while a racing start's message
/// has activated the run (and run it on) from the store gives its actor no
/// stale first state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_starts_of_one_id_make_one_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let once = Once {
        runs: Counter::default(),
    };
    let host = common::hosts::open(dir.path(), once.clone()).await?;
    for round in 0..10u32 {
        let id = format!("dup{round}");
        let mut tasks = Vec::new();
        for i in 0..16u32 {
            let (host, id) = (host.clone(), id.clone());
            tasks.push(tokio::spawn(async move {
                let h = host.start::<Once>(&id, 10 + i).await?;
                h.result().await
            }));
        }
        let mut results = Vec::new();
        for t in tasks {
            results.push(within(LIMIT, "a racing start", t).await???);
        }
        let first = results[0];
        assert!(results.iter().all(|r| *r == first), "{results:?}");
        assert!((20..52).contains(&first) && first % 2 == 0, "{first}");
        assert_eq!(
            once.runs.get(),
            round + 1,
            "round {round}: the step ran once"
        );
        let started = host
            .run(&id)
            .events()
            .await?
            .iter()
            .filter(|e| matches!(e, Event::RunStarted { .. }))
            .count();
        assert_eq!(started, 1);
    }
    assert_eq!(host.list(RunFilter::default()).await?.items.len(), 10);
    host.shutdown().await?;
    Ok(())
}

/// What activates a new run while its start's answer is late.
enum Racing {
    /// Another start of the id.
    Start,
    /// A signal to the run.
    Signal,
}

/// The order the racing test above hits now and then, forced: a start's write
/// lands but its answer is late; meanwhile `racing` activates the run from the
/// store, the run goes on to its end, and its actor stops. The late start then
/// must not hand the run's next actor its state as written (the step not yet
/// run): that actor reads the store, where the run has ended, and the step has
/// run once. (Before the fix, the late start's actor ran the step again,
/// crashed on the sequence check and was restarted, reading the store then.)
async fn a_start_answered_late(racing: Racing) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let once = Once {
        runs: Counter::default(),
    };
    let host = Host::builder()
        .store(faults.clone())
        .register(once.clone())
        .build()
        .await?;
    // The first write of `late` lands; its answer waits.
    let (hold, written) = Fault::hold(Op::Submit);
    faults.inject(hold.for_run("late"));
    let first = {
        let host = host.clone();
        tokio::spawn(async move { host.start::<Once>("late", 1).await })
    };
    within(LIMIT, "the first write", written.wait_arrived()).await?;
    match racing {
        Racing::Start => {
            host.start::<Once>("late", 2).await?;
        }
        Racing::Signal => host.run("late").signal("ping", &(), "p1").await?,
    }
    let run = host.run("late");
    assert_eq!(within(LIMIT, "the result", run.result::<u32>()).await??, 2);
    within(LIMIT, "the run's actor to stop", async {
        while host.live_runs().await > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    // The next actor of the run reads it: its read is held, to be seen.
    let (hold, read) = Fault::hold(Op::ReadLog);
    faults.inject(hold.for_run("late"));
    written.release();
    let first = within(LIMIT, "the late start", first).await???;
    within(LIMIT, "the next actor's read", read.wait_arrived()).await?;
    read.release();
    assert_eq!(within(LIMIT, "the result", first.result()).await??, 2);
    assert_eq!(once.runs.get(), 1, "the step ran once");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_answered_late_after_a_racing_start_gives_no_stale_state() -> anyhow::Result<()> {
    a_start_answered_late(Racing::Start).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_answered_late_after_a_signal_gives_no_stale_state() -> anyhow::Result<()> {
    a_start_answered_late(Racing::Signal).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_with_other_input_returns_the_first_result_across_restarts()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let once = Once {
        runs: Counter::default(),
    };
    let host = common::hosts::open(dir.path(), once.clone()).await?;
    assert_eq!(host.start::<Once>("r", 1).await?.result().await?, 2);
    assert_eq!(host.start::<Once>("r", 100).await?.result().await?, 2);
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), once.clone()).await?;
    let again = host.start::<Once>("r", 7).await?;
    assert_eq!(within(LIMIT, "the result", again.result()).await??, 2);
    assert_eq!(again.status().await?, RunStatus::Completed);
    assert_eq!(once.runs.get(), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_starts_of_two_workflows_on_one_id_pick_one() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let once = Once {
        runs: Counter::default(),
    };
    let host = common::hosts::open_two(dir.path(), once.clone(), Twin).await?;
    let mut tasks = Vec::new();
    for i in 0..12u32 {
        let host = host.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                host.start::<Once>("contested", 1).await.map(|_| "once")
            } else {
                host.start::<Twin>("contested", 1).await.map(|_| "twin")
            }
        }));
    }
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for t in tasks {
        match t.await? {
            Ok(w) => winners.push(w),
            Err(Error::RunExists { run_id, workflow }) => {
                assert_eq!(run_id, "contested");
                losers.push(workflow);
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(winners.len(), 6, "{winners:?} {losers:?}");
    let winner = winners[0];
    assert!(winners.iter().all(|w| *w == winner), "{winners:?}");
    assert!(losers.iter().all(|w| w == winner), "{losers:?}");
    let info = host.run("contested").info().await?;
    assert_eq!(info.workflow, winner);
    if winner == "once" {
        assert_eq!(host.handle::<Once>("contested").result().await?, 2);
        assert_eq!(once.runs.get(), 1);
    } else {
        assert_eq!(host.handle::<Twin>("contested").result().await?, 1);
        assert_eq!(once.runs.get(), 0);
    }
    host.shutdown().await?;
    Ok(())
}

/// v2 of `once`, with another output type.
struct OnceV2;
impl Workflow for OnceV2 {
    const NAME: &'static str = "once";
    const VERSION: u32 = 2;
    type Input = u32;
    type Output = String;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<String> {
        Ok(format!("v2:{n}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_at_another_version_returns_the_existing_run_and_a_typed_decode_error()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let once = Once {
        runs: Counter::default(),
    };
    let host = common::hosts::open_two(dir.path(), once.clone(), OnceV2).await?;
    assert_eq!(host.start::<Once>("v", 4).await?.result().await?, 8);
    // Same name, other version: the id is taken by this workflow, so the start is
    // idempotent and the run stays on version 1.
    let h2 = host.start::<OnceV2>("v", 5).await?;
    assert_eq!(h2.info().await?.version, 1);
    // Its u32 output does not decode as v2's String: a typed error, no panic.
    assert!(
        matches!(h2.result().await, Err(Error::Codec(_))),
        "{:?}",
        h2.result().await
    );
    // Untyped reads in a wrong type are typed errors too.
    assert!(matches!(
        host.run("v").result::<Vec<String>>().await,
        Err(Error::Codec(_))
    ));
    assert_eq!(host.run("v").result::<u32>().await?, 8);
    assert_eq!(once.runs.get(), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_does_not_add_a_timeout() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let host = common::hosts::open_on(dir.path(), &clock, Waiter).await?;
    let run = host.start::<Waiter>("w", ()).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    host.start_with::<Waiter>(
        "w",
        (),
        StartOptions::default().timeout(Duration::from_secs(1)),
    )
    .await?;
    clock.advance(Duration::from_secs(60));
    // Give a (wrongly armed) deadline a chance to land, then check.
    let alive = host.start::<Waiter>("probe", ()).await?;
    within(LIMIT, "the probe", alive.wait_until_suspended()).await??;
    assert!(
        matches!(run.status().await?, RunStatus::Suspended { .. }),
        "{:?}",
        run.status().await?
    );
    run.signal("go", &3u32, "g").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 3);
    host.shutdown().await?;
    Ok(())
}

/// Enters (counted), waits for `go`.
#[derive(Clone, Default)]
struct Job {
    entered: Arc<AtomicU32>,
}
impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("enter", |_| async {
            self.entered.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(())
        })
        .await?;
        ctx.wait_for_signal("go").await
    }
}

/// A second start of a queued run (idempotent on the id) with another
/// de-duplication key changes nothing: the run keeps its own key, which is free
/// again once the run has ended. (The queue used to take the second key in place
/// of the first, and the first then stayed held for the finished run until the
/// host restarted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_queued_start_with_another_key_keeps_the_first() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Job::default())
        .queue("q", QueueOptions::default())
        .build()
        .await?;
    let keyed = |k: &str| StartOptions::default().queue("q").dedup_key(k);
    let a = host.start_with::<Job>("a", (), keyed("k1")).await?;
    host.start_with::<Job>("a", (), keyed("k2")).await?; // idempotent
    within(LIMIT, "a to wait", a.wait_until_suspended()).await??;
    a.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "a", a.result()).await??, 1);
    // `a` has ended, so no key of it may be held any more.
    match host.start_with::<Job>("b", (), keyed("k1")).await {
        Ok(_) => {}
        Err(e) => panic!("starting b with k1 after `a` ended: {e}"),
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_start_of_a_direct_run_takes_no_slot() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let job = Job::default();
    let host = common::hosts::open_queued(dir.path(), job.clone(), "q", 1).await?;
    let direct = host.start::<Job>("direct", ()).await?;
    within(LIMIT, "direct", direct.wait_until_suspended()).await??;
    // The id exists (not on a queue): the queued start is idempotent.
    host.start_on::<Job>("q", "direct", ()).await?;
    assert!(matches!(
        direct.status().await?,
        RunStatus::Suspended { .. }
    ));
    // The queue's one slot is free for a real queued run.
    let queued = host.start_on::<Job>("q", "queued", ()).await?;
    within(
        LIMIT,
        "queued to be admitted",
        queued.wait_until_suspended(),
    )
    .await??;
    // And the other way round: a direct start of an enqueued run waits its turn.
    let later = host.start_on::<Job>("q", "later", ()).await?;
    host.start::<Job>("later", ()).await?;
    assert_eq!(later.status().await?, RunStatus::Enqueued);
    queued.signal("go", &1u32, "g").await?;
    within(LIMIT, "queued", queued.result()).await??;
    within(LIMIT, "later to be admitted", later.wait_until_suspended()).await??;
    later.signal("go", &2u32, "g").await?;
    direct.signal("go", &3u32, "g").await?;
    assert_eq!(within(LIMIT, "later", later.result()).await??, 2);
    assert_eq!(within(LIMIT, "direct", direct.result()).await??, 3);
    assert_eq!(job.entered.load(Ordering::SeqCst), 3);
    host.shutdown().await?;
    Ok(())
}
