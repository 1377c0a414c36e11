//! A cancel reaches the handler instead of stopping it dead: its waits end with
//! `Error::Cancelled`, `ctx.cancelled()` resolves, cleanup steps run through
//! `ctx.shielded()`, a running step body sees `StepCtx::cancelled()`, and a handler
//! that will not end is cancelled hard after the grace. Durable across restarts.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use common::{Gate, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, RunStatus, StartOptions, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
const HOUR: Duration = Duration::from_secs(3600);

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(Event::kind).collect()
}

/// Reserves, waits for a confirmation, and releases the reservation if cancelled.
struct Booking;

static RELEASED: AtomicU32 = AtomicU32::new(0);

impl Workflow for Booking {
    const NAME: &'static str = "booking";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("reserve", |_| async { Ok::<_, String>(()) })
            .await?;
        match ctx.wait_for_signal::<bool>("confirm").await {
            Err(Error::Cancelled(reason)) => {
                assert!(ctx.is_cancelled());
                // An unshielded call fails at once after the request...
                let refused = ctx.step("not-run", |_| async { Ok::<_, String>(()) }).await;
                assert!(matches!(refused, Err(Error::Cancelled(_))), "{refused:?}");
                // ...while the shielded handle cleans up, and may even wait.
                let cleanup = ctx.shielded();
                cleanup
                    .step("release", |_| async {
                        RELEASED.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, String>(())
                    })
                    .await?;
                let ack: bool = cleanup.wait_for_signal("released-ack").await?;
                assert!(ack);
                Err(Error::Cancelled(reason))
            }
            other => Ok(format!("confirmed: {}", other?)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_runs_after_cancel_and_survives_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Booking).await?;
    let run = host.start::<Booking>("b-1", ()).await?;
    run.wait_until_suspended().await?;
    run.request_cancel("customer left").await?;
    // The cleanup waits on a shielded signal wait: the run is suspended there.
    let status = within(LIMIT, "suspension in cleanup", run.wait_until_suspended()).await??;
    assert!(
        matches!(&status, RunStatus::Suspended { waiting_on } if waiting_on.contains("released-ack")),
        "{status:?}"
    );
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1);
    run.request_cancel("again").await?; // already cancelling: nothing more
    host.shutdown().await?;

    // The request is durable: the cleanup goes on after a restart, without running
    // the release again.
    let host = common::hosts::open(dir.path(), Booking).await?;
    let run = host.handle::<Booking>("b-1");
    run.signal("released-ack", &true, "ack-1").await?;
    assert_eq!(
        within(LIMIT, "result", run.result()).await?,
        Err(Error::Cancelled("customer left".into()))
    );
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1, "release ran once");
    let events = run.events().await?;
    let k = kinds(&events);
    let requested = k.iter().position(|k| *k == "CancelRequested");
    let released = events
        .iter()
        .position(|e| matches!(e, Event::StepCompleted { id, .. } if id == "release"));
    assert!(requested < released, "{k:?}");
    assert_eq!(k.last(), Some(&"RunCancelled"));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::StepStarted { id, .. } if id == "not-run")),
        "a refused step records nothing"
    );
    host.shutdown().await?;
    Ok(())
}

static BODY_STARTED: Gate = Gate::new();
static AFTER_STEP: AtomicU32 = AtomicU32::new(0);

/// A long shielded step body that stops early when the run is cancelled.
struct LongWork;

impl Workflow for LongWork {
    const NAME: &'static str = "long-work";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let done = ctx
            .shielded()
            .step("crunch", |s| async move {
                BODY_STARTED.open();
                tokio::select! {
                    reason = s.cancelled() => Ok::<_, String>(format!("stopped early: {reason}")),
                    () = std::future::pending() => unreachable!(),
                }
            })
            .await?;
        AFTER_STEP.fetch_add(1, Ordering::SeqCst);
        assert!(done.starts_with("stopped early"), "{done}");
        // The next unshielded call ends the run.
        ctx.step("next", |_| async { Ok::<_, String>(()) }).await?;
        Ok(done)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_shielded_step_body_sees_the_cancel() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), LongWork).await?;
    let run = host.start::<LongWork>("w-1", ()).await?;
    BODY_STARTED.wait().await;
    within(LIMIT, "cancel", run.cancel("enough")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert_eq!(AFTER_STEP.load(Ordering::SeqCst), 1);
    let events = run.events().await?;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::StepCompleted { id, .. } if id == "crunch")),
        "the body's result is recorded: {:?}",
        kinds(&events)
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::StepStarted { id, .. } if id == "next"))
    );
    host.shutdown().await?;
    Ok(())
}

static ENDLESS_STARTED: Gate = Gate::new();

/// An ordinary step whose body never ends.
struct Endless;

impl Workflow for Endless {
    const NAME: &'static str = "endless";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.step("forever", |_| async {
            ENDLESS_STARTED.open();
            std::future::pending::<Result<(), String>>().await
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_running_step_is_abandoned_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // A grace far longer than the test's limit: the cancel must not need it.
    let host = Host::builder()
        .path(dir.path())
        .register(Endless)
        .cancel_grace(Duration::from_secs(3600))
        .build()
        .await?;
    let run = host.start::<Endless>("e-1", ()).await?;
    ENDLESS_STARTED.wait().await;
    within(LIMIT, "cancel", run.cancel("stop")).await??;
    assert_eq!(run.result().await, Err(Error::Cancelled("stop".into())));
    host.shutdown().await?;
    Ok(())
}

/// Ignores the cancel: its shielded cleanup never ends.
struct Stubborn;

impl Workflow for Stubborn {
    const NAME: &'static str = "stubborn";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let reason = ctx.cancelled().await;
        ctx.shielded()
            .wait_for_signal::<()>(&format!("never ({reason})"))
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_past_its_grace_is_cancelled_hard() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Stubborn)
        .cancel_grace(Duration::from_millis(100))
        .build()
        .await?;
    let run = host.start::<Stubborn>("s-1", ()).await?;
    run.wait_until_suspended().await?;
    within(LIMIT, "cancel past the grace", run.cancel("stop")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert_eq!(run.result().await, Err(Error::Cancelled("stop".into())));
    let k = kinds(&run.events().await?);
    assert_eq!(k.last(), Some(&"RunCancelled"), "{k:?}");
    assert!(k.contains(&"Deadline"), "{k:?}");

    // Terminate does not wait for any grace.
    let run = host.start::<Stubborn>("s-2", ()).await?;
    run.wait_until_suspended().await?;
    within(LIMIT, "terminate", run.terminate("now")).await??;
    assert_eq!(run.result().await, Err(Error::Cancelled("now".into())));
    host.shutdown().await?;
    Ok(())
}

/// A run that would wait for ever, and a cancel-aware loop.
struct Patient;

impl Workflow for Patient {
    const NAME: &'static str = "patient";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let mut ticks = 0;
        loop {
            tokio::select! {
                biased;
                _ = ctx.cancelled() => return Ok(ticks),
                r = ctx.wait_for_signal::<u32>("tick") => { ticks += r?; }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_may_complete_after_a_cancel() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Patient).await?;
    let run = host.start::<Patient>("p-1", ()).await?;
    run.signal("tick", &2u32, "t1").await?;
    run.signal("tick", &3u32, "t2").await?;
    run.wait_until_suspended().await?;
    run.cancel("wrap up").await?;
    assert_eq!(run.result().await?, 5);
    assert_eq!(run.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_deadline_cancels_it_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let open = || common::hosts::open_on(dir.path(), &clock, Patient);
    let host = open().await?;
    let options = StartOptions::default().timeout(HOUR);
    let run = host.start_with::<Patient>("d-1", (), options).await?;
    run.signal("tick", &1u32, "t1").await?;
    run.wait_until_suspended().await?;
    host.shutdown().await?;

    // The deadline is in the store: a new host fires it, at once as it has passed
    // while no host ran.
    clock.advance(2 * HOUR);
    let host = open().await?;
    let run = host.handle::<Patient>("d-1");
    // Patient completes when cancelled: the deadline's cancel reached its handler.
    assert_eq!(within(LIMIT, "deadline", run.result()).await??, 1);
    let events = run.events().await?;
    let reason = events.iter().find_map(|e| match e {
        Event::CancelRequested { reason } => Some(reason.clone()),
        _ => None,
    });
    assert!(
        reason
            .as_deref()
            .is_some_and(|r| r.starts_with("deadline exceeded")),
        "{reason:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// Waits on a child that waits for ever.
struct Parent;
/// Waits for a signal that never comes.
struct Child;

impl Workflow for Child {
    const NAME: &'static str = "cancel-child";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal::<()>("never").await
    }
}

impl Workflow for Parent {
    const NAME: &'static str = "cancel-parent";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.child::<Child>("cancel-parent/child", ()).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_children_the_run_waits_on() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Parent, Child).await?;
    let parent = host.start::<Parent>("cancel-parent", ()).await?;
    let child = host.handle::<Child>("cancel-parent/child");
    within(LIMIT, "child waits", async {
        loop {
            if let Ok(RunStatus::Suspended { .. }) = child.status().await {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await?;
    parent.wait_until_suspended().await?;
    within(LIMIT, "cancel", parent.cancel("order void")).await??;
    assert_eq!(parent.status().await?, RunStatus::Cancelled);
    assert_eq!(
        within(LIMIT, "child result", child.result()).await?,
        Err(Error::Cancelled("parent cancelled: order void".into()))
    );
    host.shutdown().await?;
    Ok(())
}
