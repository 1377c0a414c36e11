//! A new run's first execution runs before the run's first write, which carries
//! what it recorded (issue 11, starts). A run that first only waits is written
//! once, already waiting, and no actor runs it until something wakes it; a run
//! that first does something else (a step, a child) goes on under its actor with
//! that same execution: the handler runs once, each body once. What the first
//! execution observed is in the log, so later executions observe the same.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use reel::{Ctx, FjallStore, Host, RunStatus, Workflow};

use common::counting::{CountingStore, Op};

/// Counts its executions; records a random number, then waits for `go`.
#[derive(Clone, Default)]
struct Waiter {
    executions: Arc<AtomicU32>,
}
impl Workflow for Waiter {
    const NAME: &'static str = "first-waiter";
    type Input = ();
    type Output = (u64, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u64, u32)> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        let drawn = ctx.random_u64().await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok((drawn, go))
    }
}

/// Counts its executions and its body's runs; one step, then a child it waits on.
#[derive(Clone, Default)]
struct Stepper {
    executions: Arc<AtomicU32>,
    bodies: Arc<AtomicU32>,
}
impl Workflow for Stepper {
    const NAME: &'static str = "first-stepper";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        let bodies = &self.bodies;
        let one = ctx
            .step("one", |_| async {
                bodies.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(1u32)
            })
            .await?;
        Ok(one)
    }
}

/// Starts a child waiter first thing and returns what it returned.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "first-parent";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let (_, go) = ctx.child::<Waiter>("first-kid", ()).await?;
        Ok(go)
    }
}

async fn host_over(
    path: &std::path::Path,
    waiter: &Waiter,
    stepper: &Stepper,
) -> anyhow::Result<(Host, Arc<CountingStore>)> {
    let store = CountingStore::new(FjallStore::open(path)?);
    let host = Host::builder()
        .store(store.clone())
        .register(waiter.clone())
        .register(stepper.clone())
        .register(Parent)
        .build()
        .await?;
    Ok((host, store))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_first_waits_is_written_once_waiting() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (waiter, stepper) = (Waiter::default(), Stepper::default());
    let (host, store) = host_over(dir.path(), &waiter, &stepper).await?;
    let run = host.start::<Waiter>("w", ()).await?;
    assert!(
        matches!(run.status().await?, RunStatus::Suspended { .. }),
        "waiting as soon as start returns"
    );
    assert_eq!(store.count(Op::Submit, |r| r == "w"), 1, "one write");
    assert_eq!(
        store.count(Op::ReadLog, |r| r == "w"),
        0,
        "no activation read its log"
    );
    // Repeated, the start finds the run and executes nothing.
    host.start::<Waiter>("w", ()).await?;
    assert_eq!(waiter.executions.load(Ordering::SeqCst), 1);
    let drawn = match run.events().await?.get(1) {
        Some(reel::Event::Recorded { value, .. }) => rmp_serde::from_slice::<u64>(&value.0)?,
        other => anyhow::bail!("expected the drawn number second, got {other:?}"),
    };

    // The run is on disk only: it survives a restart, and the wake replays what
    // the first execution recorded.
    host.shutdown().await?;
    let (host, _) = host_over(dir.path(), &waiter, &stepper).await?;
    let run = host.handle::<Waiter>("w");
    run.signal("go", &7u32, "go-1").await?;
    assert_eq!(run.result().await?, (drawn, 7));
    assert_eq!(waiter.executions.load(Ordering::SeqCst), 2);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_first_runs_a_step_executes_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (waiter, stepper) = (Waiter::default(), Stepper::default());
    let (host, _) = host_over(dir.path(), &waiter, &stepper).await?;
    let run = host.start::<Stepper>("s", ()).await?;
    assert_eq!(run.result().await?, 1);
    assert_eq!(
        stepper.executions.load(Ordering::SeqCst),
        1,
        "one execution"
    );
    assert_eq!(stepper.bodies.load(Ordering::SeqCst), 1, "one body run");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_called_first_starts_once_its_parent_is_written() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (waiter, stepper) = (Waiter::default(), Stepper::default());
    let (host, store) = host_over(dir.path(), &waiter, &stepper).await?;
    let parent = host.start::<Parent>("p", ()).await?;
    let kid = host.handle::<Waiter>("first-kid");
    common::within(
        std::time::Duration::from_secs(30),
        "the child's start",
        async {
            loop {
                match kid.status().await {
                    Ok(RunStatus::Suspended { .. }) => return Ok::<_, anyhow::Error>(()),
                    _ => tokio::task::yield_now().await,
                }
            }
        },
    )
    .await??;
    kid.signal("go", &5u32, "go-1").await?;
    assert_eq!(parent.result().await?, 5);
    assert_eq!(store.count(Op::Start, |r| r == "first-kid"), 1);
    assert_eq!(waiter.executions.load(Ordering::SeqCst), 2);
    host.shutdown().await?;
    Ok(())
}
