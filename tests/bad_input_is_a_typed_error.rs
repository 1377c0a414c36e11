//! Invariant 8: bad input gets a clear, typed error, loses nothing, and one bad run
//! never harms another.

mod common;

use std::time::Duration;

use common::Counter;
use reel::{Approval, Ctx, Error, Host, RunStatus, Workflow};

struct Echo;
impl Workflow for Echo {
    const NAME: &'static str = "echo";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, s: String) -> reel::Result<String> {
        // A payload that does not decode is an error the handler can see.
        match ctx.wait_for_signal::<u32>("number").await {
            Ok(n) => Ok(format!("{s}:{n}")),
            Err(Error::Codec(m)) => Ok(format!("{s}:bad payload ({})", !m.is_empty())),
            Err(e) => Err(e),
        }
    }
}

struct Other;
impl Workflow for Other {
    const NAME: &'static str = "other";
    type Input = u64;
    type Output = u64;
    async fn run(&self, _: Ctx, n: u64) -> reel::Result<u64> {
        Ok(n)
    }
}

struct NotRegistered;
impl Workflow for NotRegistered {
    const NAME: &'static str = "nope";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

/// Panics outside any step on every execution: a crash loop.
struct Crashy {
    executions: Counter,
}
impl Workflow for Crashy {
    const NAME: &'static str = "crashy";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.step("fine", |_| async { Ok::<_, String>(()) }).await?;
        self.executions.bump();
        panic!("handler bug");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_typed_errors() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Echo, Other).await?;

    assert_eq!(
        host.start::<NotRegistered>("x", ()).await.map(|_| ()),
        Err(Error::UnknownWorkflow("nope".into()))
    );
    let echo = host.start::<Echo>("e-1", "hi".into()).await?;
    // Idempotent start: same id, same workflow.
    host.start::<Echo>("e-1", "ignored".into()).await?;
    match host.start::<Other>("e-1", 5).await {
        Err(Error::RunExists { run_id, workflow }) => {
            assert_eq!((run_id.as_str(), workflow.as_str()), ("e-1", "echo"));
        }
        other => panic!("expected RunExists, got {other:?}"),
    }
    assert!(matches!(
        host.start::<Echo>("", "x".into()).await,
        Err(Error::InvalidArgument(_))
    ));

    let ghost = host.handle::<Echo>("ghost");
    assert_eq!(ghost.status().await, Err(Error::UnknownRun("ghost".into())));
    assert_eq!(ghost.result().await, Err(Error::UnknownRun("ghost".into())));
    assert_eq!(
        ghost.signal("number", &1u32, "s").await,
        Err(Error::UnknownRun("ghost".into()))
    );
    assert_eq!(
        ghost.cancel("why").await,
        Err(Error::UnknownRun("ghost".into()))
    );
    assert!(matches!(ghost.events().await, Err(Error::UnknownRun(_))));

    echo.signal("number", "not a number", "s-1").await?;
    assert_eq!(echo.result().await?, "hi:bad payload (true)");
    assert_eq!(
        echo.signal("number", &1u32, "s-2").await,
        Err(Error::RunFinished("e-1".into()))
    );
    assert_eq!(
        echo.cancel("late").await,
        Err(Error::RunFinished("e-1".into()))
    );

    // Reading a run as the wrong workflow type is refused by name, not decoded.
    let wrong = host.handle::<Other>("e-1");
    match wrong.result().await {
        Err(
            ref e @ Error::WorkflowMismatch {
                ref run_id,
                ref expected,
                ref found,
            },
        ) => {
            assert_eq!(
                (run_id.as_str(), expected.as_str(), found.as_str()),
                ("e-1", "other", "echo")
            );
            assert!(e.to_string().contains("`echo`"), "{e}");
        }
        other => panic!("expected WorkflowMismatch, got {other:?}"),
    }

    assert_eq!(host.start::<Other>("o-1", 7).await?.result().await?, 7);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_loop_is_parked_and_harms_no_other_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let executions = Counter::default();
    let host = Host::builder()
        .path(dir.path())
        .register(Crashy {
            executions: executions.clone(),
        })
        .register(Other)
        .restart_limit(2, Duration::from_secs(60))
        .build()
        .await?;
    let bad = host.start::<Crashy>("bad", ()).await?;
    let good = host.start::<Other>("good", 42).await?;
    match bad.result().await {
        Err(Error::Crashed(m)) => assert!(m.contains("handler bug"), "{m}"),
        other => panic!("expected Crashed, got {other:?}"),
    }
    match bad.status().await? {
        RunStatus::Parked { error } => assert!(error.contains("handler bug"), "{error}"),
        other => panic!("expected parked, got {other:?}"),
    }
    assert_eq!(executions.get(), 3, "first run + 2 supervisor restarts");
    assert_eq!(good.result().await?, 42);
    let after_good = host.start::<Other>("good-2", 1).await?;
    assert_eq!(after_good.result().await?, 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_waiting_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Echo).await?;
    let run = host.start::<Echo>("c-1", "x".into()).await?;
    run.wait_until_suspended().await?;
    run.cancel("customer left").await?;
    run.cancel("again").await?; // no-op
    assert_eq!(
        run.result().await,
        Err(Error::Cancelled("customer left".into()))
    );
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert_eq!(
        run.signal("number", &1u32, "s").await,
        Err(Error::RunFinished("c-1".into()))
    );
    let kinds: Vec<&str> = run.events().await?.iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        [
            "RunStarted",
            "SignalAwaited",
            "CancelRequested",
            "Deadline",
            "RunCancelled"
        ]
    );
    host.shutdown().await?;
    Ok(())
}

/// Waits for a human decision.
struct Review;
impl Workflow for Review {
    const NAME: &'static str = "review";
    type Input = ();
    type Output = bool;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<bool> {
        Ok(ctx.approval("boss").await?.approved)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_signal_names_are_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Review).await?;
    let run = host.start::<Review>("r-1", ()).await?;
    run.wait_until_suspended().await?;
    // A plain signal cannot forge an approval.
    let forged = Approval {
        approved: true,
        feedback: None,
    };
    match run.signal("approval:boss", &forged, "forged-1").await {
        Err(ref e @ Error::ReservedName(ref name)) => {
            assert_eq!(name, "approval:boss");
            assert!(e.to_string().contains("approve"), "{e}");
        }
        other => panic!("expected ReservedName, got {other:?}"),
    }
    assert!(matches!(run.status().await?, RunStatus::Suspended { .. }));
    assert!(
        run.events()
            .await?
            .iter()
            .all(|e| e.kind() != "SignalReceived")
    );
    run.approve("boss", false, Some("no".into())).await?;
    assert!(!run.result().await?);
    host.shutdown().await?;
    Ok(())
}
