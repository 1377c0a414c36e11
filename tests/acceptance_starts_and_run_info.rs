//! Acceptance: `StartOptions` (run deadlines, idempotent starts), `signal_with_start`
//! on existing runs, child cycles through attached waits and across restarts, and
//! the fields of `RunInfo` (`info()`, `runs()`).

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, QueueOptions, RunStatus, StartOptions, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Waits for `go`, returns its input and the signal.
struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, input: String) -> reel::Result<String> {
        let go: String = ctx.wait_for_signal("go").await?;
        Ok(format!("{input}:{go}"))
    }
}

/// Three steps, then waits for `go`; then continues as new once, and waits again.
struct Stepper;
impl Workflow for Stepper {
    const NAME: &'static str = "stepper";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        for i in 0..3 {
            ctx.step("s", |_| async move { Ok::<_, String>(i) }).await?;
        }
        let _: () = ctx.wait_for_signal("go").await?;
        if segment == 0 {
            return ctx.continue_as_new::<Stepper>(1).await;
        }
        Ok(segment)
    }
}

/// Starts a child `Waiter` with the id it is given and waits for it.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, child: String) -> reel::Result<String> {
        ctx.child::<Waiter>(&child, "kid".into()).await
    }
}

/// Waits for a run id on `to`, then waits on that run as its child; a cycle is
/// reported as its output.
struct Linker;
impl Workflow for Linker {
    const NAME: &'static str = "linker";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let to: String = ctx.wait_for_signal("to").await?;
        match ctx.child::<Linker>(&to, ()).await {
            Err(Error::ChildCycle { cycle }) => Ok(cycle),
            Ok(v) => Ok(v),
            Err(e) => Err(e),
        }
    }
}

fn start_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

async fn host(dir: &std::path::Path, clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .queue("q", QueueOptions::default().concurrency(1))
        .register(Waiter)
        .register(Stepper)
        .register(Parent)
        .register(Linker)
        .build()
        .await
}

/// Waits until the clock has a timer due (timers are armed a moment after a run is
/// seen waiting) at or before `by`.
async fn armed(clock: &TestClock, by: SystemTime) -> anyhow::Result<SystemTime> {
    within(LIMIT, "a timer to be armed", async {
        loop {
            if let Some(t) = clock.next_due()
                && t <= by
            {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

async fn suspended<W: Workflow>(run: &reel::RunHandle<W>) -> anyhow::Result<()> {
    within(LIMIT, "the run to wait", run.wait_until_suspended()).await??;
    Ok(())
}

fn cancelled_by_deadline<T: std::fmt::Debug>(r: &reel::Result<T>) -> bool {
    matches!(r, Err(Error::Cancelled(reason)) if reason.starts_with("deadline exceeded"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_cancels_with_its_reason_and_a_repeated_start_keeps_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(start_time());
    let host = host(dir.path(), &clock).await?;
    let hour = Duration::from_secs(3600);
    let run = host
        .start_with::<Waiter>("d-1", "a".into(), StartOptions::default().timeout(hour))
        .await?;
    suspended(&run).await?;
    // Starting it again, with other options, returns the same run and changes nothing.
    let again = host
        .start_with::<Waiter>(
            "d-1",
            "b".into(),
            StartOptions::default().timeout(Duration::from_secs(60)),
        )
        .await?;
    assert_eq!(again.id(), "d-1");
    let due = armed(&clock, start_time() + hour).await?;
    assert_eq!(due, start_time() + hour, "the deadline of the first start");
    clock.advance(Duration::from_secs(600));
    assert!(matches!(run.status().await?, RunStatus::Suspended { .. }));
    clock.advance(hour);
    let got = within(LIMIT, "the deadline to end the run", run.result()).await?;
    assert!(cancelled_by_deadline(&got), "{got:?}");
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_counts_from_the_start_across_restarts_and_while_no_host_ran()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(start_time());
    let host = host(dir.path(), &clock).await?;
    let hour = Duration::from_secs(3600);
    let a = host
        .start_with::<Waiter>("across", "a".into(), StartOptions::default().timeout(hour))
        .await?;
    let b = host
        .start_with::<Waiter>("down", "b".into(), StartOptions::default().timeout(hour))
        .await?;
    suspended(&a).await?;
    suspended(&b).await?;
    armed(&clock, start_time() + hour).await?;
    clock.advance(Duration::from_secs(1800));
    host.shutdown().await?;

    // `down` passes its deadline while no host runs.
    clock.advance(Duration::from_secs(2 * 3600));
    let host = self::host(dir.path(), &clock).await?;
    let b = host.handle::<Waiter>("down");
    let got = within(LIMIT, "the passed deadline", b.result()).await?;
    assert!(cancelled_by_deadline(&got), "{got:?}");
    let a = host.handle::<Waiter>("across");
    let got = within(LIMIT, "the passed deadline", a.result()).await?;
    assert!(cancelled_by_deadline(&got), "{got:?}");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_is_kept_after_a_restart_that_happens_before_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(start_time());
    let host = host(dir.path(), &clock).await?;
    let hour = Duration::from_secs(3600);
    let run = host
        .start_with::<Waiter>("kept", "a".into(), StartOptions::default().timeout(hour))
        .await?;
    suspended(&run).await?;
    armed(&clock, start_time() + hour).await?;
    clock.advance(Duration::from_secs(1800));
    host.shutdown().await?;
    let host = self::host(dir.path(), &clock).await?;
    let run = host.handle::<Waiter>("kept");
    let due = armed(&clock, start_time() + hour).await?;
    assert_eq!(
        due,
        start_time() + hour,
        "counted from the start, not the restart"
    );
    clock.advance(Duration::from_secs(1801));
    let got = within(LIMIT, "the deadline", run.result()).await?;
    assert!(cancelled_by_deadline(&got), "{got:?}");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_start_keeps_the_first_input_and_another_workflow_is_refused()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(start_time());
    let host = host(dir.path(), &clock).await?;
    let run = host.start::<Waiter>("same", "first".into()).await?;
    suspended(&run).await?;
    let before = run.events().await?.len();
    host.start::<Waiter>("same", "second".into()).await?;
    assert_eq!(
        run.events().await?.len(),
        before,
        "a repeated start writes nothing"
    );
    let other = host.start::<Linker>("same", ()).await;
    assert!(matches!(other, Err(Error::RunExists { .. })), "{other:?}");
    run.signal("go", "x", "g").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, "first:x");
    // Starting an ended run again is still idempotent: the run stays as it ended.
    let again = host.start::<Waiter>("same", "third".into()).await?;
    assert_eq!(
        within(LIMIT, "the result", again.result()).await??,
        "first:x"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_with_start_on_an_existing_run_keeps_its_input_and_has_no_deadline()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(start_time());
    let host = host(dir.path(), &clock).await?;
    let run = host.start::<Waiter>("sws", "orig".into()).await?;
    suspended(&run).await?;
    // Paused runs take the signal too, and apply it on resume.
    run.pause().await?;
    host.signal_with_start_with::<Waiter, _>(
        "sws",
        "new".into(),
        StartOptions::default().timeout(Duration::from_secs(1)),
        "go",
        "sig",
        "id-1",
    )
    .await?;
    assert_eq!(clock.next_due(), None, "an existing run gets no deadline");
    clock.advance(Duration::from_secs(3600));
    assert_eq!(run.status().await?, RunStatus::Paused);
    run.resume().await?;
    assert_eq!(
        within(LIMIT, "the result", run.result()).await??,
        "orig:sig"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_id_is_one_delivery_whatever_its_name_through_signal_with_start()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(start_time());
    let host = host(dir.path(), &clock).await?;
    let run = host
        .signal_with_start::<Waiter, _>("dedup", "in".into(), "other", "x", "same-id")
        .await?;
    suspended(&run).await?;
    // The same id under another name is the same delivery: dropped.
    host.signal_with_start::<Waiter, _>("dedup", "in".into(), "go", "y", "same-id")
        .await?;
    let received = run
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, Event::SignalReceived { .. }))
        .count();
    assert_eq!(received, 1);
    assert!(matches!(run.status().await?, RunStatus::Suspended { .. }));
    host.signal_with_start::<Waiter, _>("dedup", "in".into(), "go", "z", "id-2")
        .await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, "in:z");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_through_a_wait_on_a_run_not_started_by_the_waiter_fails() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(start_time());
    let host = host(dir.path(), &clock).await?;
    let p = host.start::<Linker>("p", ()).await?;
    let q = host.start::<Linker>("q", ()).await?;
    suspended(&p).await?;
    suspended(&q).await?;
    p.signal("to", "q", "t-1").await?;
    within(LIMIT, "p to wait on q", async {
        loop {
            if let RunStatus::Suspended { waiting_on } = p.status().await?
                && !waiting_on.contains("signal")
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    q.signal("to", "p", "t-2").await?;
    let cycle = within(LIMIT, "q's child call", q.result()).await??;
    assert_eq!(cycle, ["q", "p", "q"]);
    // p waited on q, and gets its output.
    assert_eq!(within(LIMIT, "p's result", p.result()).await??, cycle);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_is_seen_after_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(start_time());
    let host = host(dir.path(), &clock).await?;
    let p = host.start::<Linker>("rp", ()).await?;
    suspended(&p).await?;
    p.signal("to", "rq", "t-1").await?;
    let q = host.handle::<Linker>("rq");
    within(LIMIT, "the child to exist and wait", async {
        loop {
            if let Ok(RunStatus::Suspended { .. }) = q.status().await
                && let RunStatus::Suspended { waiting_on } = p.status().await?
                && !waiting_on.contains("signal")
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    host.shutdown().await?;

    let host = self::host(dir.path(), &clock).await?;
    let q = host.handle::<Linker>("rq");
    let p = host.handle::<Linker>("rp");
    q.signal("to", "rp", "t-2").await?;
    let cycle = within(LIMIT, "the child's call on its parent", q.result()).await??;
    assert_eq!(cycle, ["rq", "rp", "rq"]);
    assert_eq!(
        within(LIMIT, "the parent's result", p.result()).await??,
        cycle
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_tells_parent_queue_segment_and_the_current_segments_size() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(start_time());
    let host = host(dir.path(), &clock).await?;

    let run = host.start::<Stepper>("info", 0).await?;
    suspended(&run).await?;
    let info = run.info().await?;
    let events = run.events().await?;
    assert_eq!(info.run_id, "info");
    assert_eq!(info.workflow, "stepper");
    assert_eq!(info.version, 1);
    assert_eq!(info.segment, 0);
    assert_eq!(info.parent, None);
    assert_eq!(info.queue, None);
    assert!(info.created_at <= info.updated_at);
    let log = info.log.expect("info() fills in the log size");
    assert_eq!(log.events, events.len() as u64, "{events:?}");
    assert!(log.bytes > 0);

    run.signal("go", &(), "g-1").await?;
    within(LIMIT, "the second segment to wait", async {
        loop {
            let info = run.info().await?;
            if info.segment == 1 && matches!(info.status, RunStatus::Suspended { .. }) {
                return anyhow::Ok(info);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    let info = run.info().await?;
    let events = run.events().await?;
    let last_start = events
        .iter()
        .rposition(|e| matches!(e, Event::RunStarted { .. }))
        .expect("a RunStarted");
    let current = (events.len() - last_start) as u64;
    let size = info.log.expect("log size");
    assert_eq!(
        size.events, current,
        "the current segment's events only: {events:?}"
    );
    assert!(size.events < events.len() as u64);

    // A child names its parent; a run on a queue names its queue.
    let parent = host.start::<Parent>("mom", "kid-1".into()).await?;
    let kid = host.handle::<Waiter>("kid-1");
    within(LIMIT, "the child to wait", async {
        loop {
            if let Ok(RunStatus::Suspended { .. }) = kid.status().await {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    assert_eq!(kid.info().await?.parent.as_deref(), Some("mom"));
    let children = parent.children().await?;
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].run_id, "kid-1");
    let queued = host.start_on::<Waiter>("q", "on-q", "x".into()).await?;
    assert_eq!(queued.info().await?.queue.as_deref(), Some("q"));

    // `runs()` lists every run, with the same fields.
    let runs = host.runs().await?;
    let ids: std::collections::BTreeSet<_> = runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(
        ids,
        ["info", "kid-1", "mom", "on-q"].into_iter().collect(),
        "{runs:?}"
    );
    let listed_kid = runs.iter().find(|r| r.run_id == "kid-1").expect("kid");
    assert_eq!(listed_kid.parent.as_deref(), Some("mom"));
    assert_eq!(listed_kid.workflow, "waiter");
    let listed = runs.iter().find(|r| r.run_id == "info").expect("info");
    assert_eq!(listed.segment, 1);
    let listed_q = runs.iter().find(|r| r.run_id == "on-q").expect("on-q");
    assert_eq!(listed_q.queue.as_deref(), Some("q"));
    host.shutdown().await?;
    Ok(())
}
