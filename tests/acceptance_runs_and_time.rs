//! Acceptance: what a Temporal/DBOS user expects of runs, timers and recorded
//! values, on a hand-moved test clock: a cancel reaches a run waiting on a timer
//! and the timer never wakes it afterwards; `ctx.now()`, `uuid()` and
//! `random_u64()` are recorded once and replay unchanged after a restart even when
//! the clock moved; `sleep_until` a past time returns at once; `host.runs()` lists
//! runs with workflow, version, status and parent (DESIGN "Observability");
//! `start` is idempotent on the run id, a duplicate id with another workflow is
//! `Error::RunExists`, an unregistered workflow `Error::UnknownWorkflow`.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, RunStatus, Uuid, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Records a time, a uuid and a number, sleeps an hour, sleeps until a past
/// time, records the time again, then waits for `go`.
struct Clocked {
    bodies: Counter,
}
impl Workflow for Clocked {
    const NAME: &'static str = "clocked";
    const VERSION: u32 = 3;
    type Input = ();
    type Output = (SystemTime, Uuid, u64, SystemTime, SystemTime);
    async fn run(
        &self,
        ctx: Ctx,
        _: (),
    ) -> reel::Result<(SystemTime, Uuid, u64, SystemTime, SystemTime)> {
        let start = ctx.now().await?;
        let id = ctx.uuid().await?;
        let n = ctx.random_u64().await?;
        ctx.sleep(Duration::from_secs(3600)).await?;
        // Already past: returns at once, on replay too.
        ctx.sleep_until(start).await?;
        let after = ctx.now().await?;
        let bodies = self.bodies.clone();
        ctx.step("mark", move |_| {
            let bodies = bodies.clone();
            async move {
                bodies.bump();
                Ok::<_, String>(())
            }
        })
        .await?;
        let _: u32 = ctx.wait_for_signal("go").await?;
        let end = ctx.now().await?;
        Ok((start, id, n, after, end))
    }
}

/// Sleeps a day, then runs a step.
struct Nap {
    bodies: Counter,
}
impl Workflow for Nap {
    const NAME: &'static str = "nap";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.sleep(Duration::from_secs(86_400)).await?;
        let bodies = self.bodies.clone();
        ctx.step("after-nap", move |_| {
            let bodies = bodies.clone();
            async move {
                bodies.bump();
                Ok::<_, String>(())
            }
        })
        .await
    }
}

/// Calls a `Nap` child and returns.
struct NapParent;
impl Workflow for NapParent {
    const NAME: &'static str = "nap-parent";
    type Input = String;
    type Output = ();
    async fn run(&self, ctx: Ctx, child: String) -> reel::Result<()> {
        ctx.child::<Nap>(&child, ()).await
    }
}

/// A timed wait that gets its signal in time, then an hour's sleep.
struct InTime;
impl Workflow for InTime {
    const NAME: &'static str = "in-time";
    type Input = ();
    type Output = (Option<u32>, Option<u32>);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(Option<u32>, Option<u32>)> {
        let first = ctx
            .wait_for_signal_timeout("x", Duration::from_secs(10))
            .await?;
        ctx.sleep(Duration::from_secs(3600)).await?;
        let second = ctx
            .wait_for_signal_timeout("x", Duration::from_secs(10))
            .await?;
        Ok((first, second))
    }
}

struct NotRegistered;
impl Workflow for NotRegistered {
    const NAME: &'static str = "not-registered";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

fn builder(dir: &std::path::Path, clock: &TestClock, bodies: &Counter) -> reel::HostBuilder {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .register(Clocked {
            bodies: bodies.clone(),
        })
        .register(Nap {
            bodies: bodies.clone(),
        })
        .register(NapParent)
        .register(InTime)
        .register(common::workflows::Quick)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_values_replay_unchanged_after_the_clock_moved_and_a_restart() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let bodies = Counter::default();
    let host = builder(dir.path(), &clock, &bodies).build().await?;
    let run = host.start::<Clocked>("clocked", ()).await?;
    within(LIMIT, "the hour's sleep", run.wait_until_suspended()).await??;
    // The timer service arms the sleep's timer after the run's write: poll for it.
    within(LIMIT, "the sleep's timer on the clock", async {
        while clock.next_due().is_none() {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    assert_eq!(
        clock.next_due(),
        Some(t0() + Duration::from_secs(3600)),
        "the sleep's timer is due an hour after the start"
    );
    clock.advance(Duration::from_secs(3600));
    common::until_log(&run, LIMIT, "the wait on go", |e| {
        common::waits_on(e, "go") == 1
    })
    .await?;
    host.shutdown().await?;

    // Time goes on while no host runs; the new host replays the recorded values.
    clock.advance(Duration::from_secs(5 * 86_400));
    let host = builder(dir.path(), &clock, &bodies).build().await?;
    let run = host.handle::<Clocked>("clocked");
    run.signal("go", &1u32, "go-1").await?;
    let (start, id, n, after, end) = within(LIMIT, "the end", run.result()).await??;
    assert_eq!(start, t0(), "ctx.now() reads the host's clock");
    assert_eq!(
        after,
        t0() + Duration::from_secs(3600),
        "the second now() is the time recorded after the sleep, not the time of the replay"
    );
    assert_eq!(end, t0() + Duration::from_secs(3600 + 5 * 86_400));
    assert_eq!(bodies.get(), 1, "the recorded step ran again on replay");
    // The values the handler returned are the ones in the log.
    let log = run.events().await?;
    let recorded = log
        .iter()
        .filter(|e| matches!(e, Event::Recorded { .. }))
        .count();
    assert_eq!(
        recorded, 5,
        "now, uuid, random, now, now: one record each: {log:?}"
    );
    assert_ne!(id, Uuid::nil());
    let _ = n;
    let info = host
        .runs()
        .await?
        .into_iter()
        .find(|r| r.run_id == "clocked")
        .ok_or_else(|| anyhow::anyhow!("runs() lacks the run"))?;
    assert_eq!(
        (info.workflow.as_str(), info.version, info.status),
        ("clocked", 3, RunStatus::Completed)
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_sleeping_tree_ends_both_and_the_timers_never_wake_them() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let bodies = Counter::default();
    let host = builder(dir.path(), &clock, &bodies).build().await?;
    let parent = host.start::<NapParent>("parent", "kid".into()).await?;
    let kid = host.handle::<Nap>("kid");
    within(LIMIT, "the child's start", async {
        loop {
            if let Ok(RunStatus::Suspended { .. }) = kid.status().await {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await?;
    within(LIMIT, "the parent's wait", parent.wait_until_suspended()).await??;

    // The listing shows both, with the child's parent.
    let runs = host.runs().await?;
    let kid_info = runs
        .iter()
        .find(|r| r.run_id == "kid")
        .ok_or_else(|| anyhow::anyhow!("runs() lacks the child"))?;
    assert_eq!(kid_info.parent.as_deref(), Some("parent"));
    assert_eq!(kid_info.workflow, "nap");
    assert!(
        matches!(kid_info.status, RunStatus::Suspended { .. }),
        "{:?}",
        kid_info.status
    );

    within(LIMIT, "the cancel", parent.cancel("order withdrawn")).await??;
    assert_eq!(
        within(LIMIT, "the parent's result", parent.result()).await?,
        Err(Error::Cancelled("order withdrawn".into()))
    );
    let kid_result = within(LIMIT, "the child's result", kid.result()).await?;
    assert!(
        matches!(&kid_result, Err(Error::Cancelled(r)) if r.contains("order withdrawn")),
        "the child is cancelled in its parent's words: {kid_result:?}"
    );

    // A day later, nothing wakes either run.
    clock.advance(Duration::from_secs(2 * 86_400));
    host.shutdown().await?;
    let host = builder(dir.path(), &clock, &bodies).build().await?;
    let parent = host.handle::<NapParent>("parent");
    let kid = host.handle::<Nap>("kid");
    assert_eq!(parent.status().await?, RunStatus::Cancelled);
    assert_eq!(kid.status().await?, RunStatus::Cancelled);
    assert_eq!(
        bodies.get(),
        0,
        "a cancelled run's step ran after its timer"
    );
    let log = kid.events().await?;
    assert!(
        !log.iter().any(|e| matches!(e, Event::TimerFired { .. })),
        "a cancelled run's timer fired: {log:?}"
    );
    assert!(
        matches!(log.last(), Some(Event::RunCancelled { .. })),
        "{log:?}"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_are_idempotent_and_wrong_starts_are_typed_errors() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let bodies = Counter::default();
    let host = builder(dir.path(), &clock, &bodies).build().await?;
    let first = host.start::<common::workflows::Quick>("order-1", 1).await?;
    assert_eq!(within(LIMIT, "first", first.result()).await??, 1);
    // Same id, same workflow, another input: the existing run, unchanged.
    let again = host.start::<common::workflows::Quick>("order-1", 2).await?;
    assert_eq!(within(LIMIT, "again", again.result()).await??, 1);
    // Same id, another workflow.
    match host.start::<NapParent>("order-1", "x".into()).await {
        Err(Error::RunExists { run_id, workflow }) => {
            assert_eq!((run_id.as_str(), workflow.as_str()), ("order-1", "quick"));
        }
        other => panic!(
            "expected RunExists, got {:?}",
            other.map(|h| h.id().to_owned())
        ),
    }
    match host.start::<NotRegistered>("nr-1", ()).await {
        Err(Error::UnknownWorkflow(name)) => assert_eq!(name, "not-registered"),
        other => panic!(
            "expected UnknownWorkflow, got {:?}",
            other.map(|h| h.id().to_owned())
        ),
    }
    let listed: Vec<String> = host.runs().await?.into_iter().map(|r| r.run_id).collect();
    assert_eq!(
        listed,
        vec!["order-1".to_owned()],
        "a refused start stored a run"
    );
    assert_eq!(
        host.handle::<NapParent>("order-1")
            .result()
            .await
            .map(|_| ()),
        Err(Error::WorkflowMismatch {
            run_id: "order-1".into(),
            expected: "nap-parent".into(),
            found: "quick".into()
        })
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_answered_in_time_is_not_timed_out_later_by_its_deadline() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let bodies = Counter::default();
    let host = builder(dir.path(), &clock, &bodies).build().await?;
    let run = host.start::<InTime>("in-time", ()).await?;
    within(LIMIT, "the timed wait", run.wait_until_suspended()).await??;
    run.signal("x", &1u32, "x-1").await?;
    common::until_log(&run, LIMIT, "the sleep", |e| {
        e.iter().any(|e| {
            matches!(e, Event::TimerScheduled { fire_at, .. }
            if *fire_at == 1_800_003_600_000)
        })
    })
    .await?;
    host.shutdown().await?;

    // Past the first wait's deadline and the sleep, while no host runs.
    clock.advance(Duration::from_secs(3600));
    let host = builder(dir.path(), &clock, &bodies).build().await?;
    let run = host.handle::<InTime>("in-time");
    common::until_log(&run, LIMIT, "the second wait", |e| {
        common::waits_on(e, "x") == 2
    })
    .await?;
    within(LIMIT, "the second wait", run.wait_until_suspended()).await??;
    run.signal("x", &2u32, "x-2").await?;
    assert_eq!(
        within(LIMIT, "the end", run.result()).await??,
        (Some(1), Some(2)),
        "a deadline of an answered wait took a later signal or ended a later wait"
    );
    host.shutdown().await?;
    Ok(())
}
