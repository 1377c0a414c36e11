//! Acceptance: signals and external events, ported from Temporal's and Restate's
//! own suites: a handler's send to a missing or finished run is recorded and
//! replays as such after that id has a live run (sdk-core `signals.rs`), the
//! life of a signalled run from "no such run" to "terminated" (temporal
//! `tests/signal_workflow_test.go`), and Restate's signal combinators
//! (restatedev/e2e, `sdk-tests/.../tests/Combinators.kt`) mapped onto
//! approvals (Restate's resolve / reject) and step failures under
//! `FuturesUnordered` and `join!`, replayed after a restart and by
//! `reel::testing::replay`. Real stores in temp dirs.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use common::{until_log, waits_on, within};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use reel::testing::{Replayed, replay};
use reel::{Ctx, Error, Event, Host, RunStatus, StatusKind, StepError, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

fn received(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::SignalReceived {
                name, signal_id, ..
            } => Some((name.clone(), signal_id.clone())),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------

/// Sends one signal to each of two runs, then waits for `go`.
#[derive(Clone)]
struct Sender;

fn outcome(r: reel::Result<()>) -> String {
    match r {
        Ok(()) => "sent".into(),
        Err(Error::UnknownRun(id)) => format!("unknown {id}"),
        Err(Error::RunFinished(id)) => format!("finished {id}"),
        Err(e) => format!("other: {e}"),
    }
}

impl Workflow for Sender {
    const NAME: &'static str = "sender";
    type Input = (String, String);
    type Output = (String, String);
    async fn run(
        &self,
        ctx: Ctx,
        (missing, finished): (String, String),
    ) -> reel::Result<Self::Output> {
        let a = ctx.signal(&missing, "hi", &1u32, "s-1").await;
        let b = ctx.signal(&finished, "hi", &2u32, "s-2").await;
        ctx.wait_for_signal::<()>("go").await?;
        Ok((outcome(a), outcome(b)))
    }
}

/// Waits for `hi` when told to, else ends at once.
#[derive(Clone)]
struct Receiver;

impl Workflow for Receiver {
    const NAME: &'static str = "receiver";
    type Input = bool;
    type Output = u32;
    async fn run(&self, ctx: Ctx, wait: bool) -> reel::Result<u32> {
        if wait {
            ctx.wait_for_signal("hi").await
        } else {
            Ok(0)
        }
    }
}

async fn open_senders(path: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(Sender)
        .register(Receiver)
        .build()
        .await
}

/// Ports sdk-core `crates/sdk-core/tests/integ_tests/workflow_tests/signals.rs::sends_signal_to_missing_wf`
/// (a workflow's signal to a missing workflow fails, and the workflow goes on),
/// with a finished receiver beside it: both sends answer with their error
/// (`UnknownRun`, `RunFinished`), recorded; after a run under the missing id has
/// been started and the host restarted, the sender's replay answers the same
/// and sends nothing, so the new run never sees the signal meant before it
/// existed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_to_missing_and_finished_runs_replay_as_recorded() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open_senders(dir.path()).await?;
    let done = host.start::<Receiver>("done", false).await?;
    assert_eq!(within(LIMIT, "done", done.result()).await??, 0);
    let sender = host
        .start::<Sender>("tx", ("later".into(), "done".into()))
        .await?;
    until_log(&sender, LIMIT, "the sender's wait", |e| {
        waits_on(e, "go") == 1
    })
    .await?;
    let later = host.start::<Receiver>("later", true).await?;
    within(LIMIT, "later waits", later.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = open_senders(dir.path()).await?;
    let sender = host.handle::<Sender>("tx");
    sender.signal("go", &(), "go-1").await?;
    assert_eq!(
        within(LIMIT, "the sender", sender.result()).await??,
        ("unknown later".to_owned(), "finished done".to_owned())
    );
    let later = host.handle::<Receiver>("later");
    assert!(
        received(&later.events().await?).is_empty(),
        "the replay sent the recorded failed signal"
    );
    assert_eq!(later.status().await?.kind(), StatusKind::Suspended);
    later.signal("hi", &9u32, "hi-9").await?;
    assert_eq!(within(LIMIT, "later", later.result()).await??, 9);
    assert!(received(&host.handle::<Receiver>("done").events().await?).is_empty());
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// Takes `my signal`, then `another signal`, then waits for ever.
#[derive(Clone)]
struct Listener;

impl Workflow for Listener {
    const NAME: &'static str = "listener";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let _: String = ctx.wait_for_signal("my signal").await?;
        let _: String = ctx.wait_for_signal("another signal").await?;
        ctx.wait_for_signal::<()>("never").await
    }
}

/// Ports temporal `tests/signal_workflow_test.go::TestSignalWorkflow` and
/// `::TestSignalWorkflow_DuplicateRequest`: a signal to an id with no run is
/// refused and creates nothing; once started, the run records each signal with
/// its name (a repeated request id is one delivery); after the run is
/// terminated, a signal is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signalled_run_from_no_such_run_to_terminated() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Listener).await?;
    assert!(matches!(
        host.run("wf").signal("failed signal", &(), "f-0").await,
        Err(Error::UnknownRun(_))
    ));
    assert!(matches!(
        host.run("wf").status().await,
        Err(Error::UnknownRun(_))
    ));

    let run = host.start::<Listener>("wf", ()).await?;
    run.signal("my signal", "my signal input", "s-1").await?;
    run.signal("my signal", "my signal input", "s-1").await?;
    run.signal("another signal", "another signal input", "s-2")
        .await?;
    until_log(&run, LIMIT, "both consumed", |e| waits_on(e, "never") == 1).await?;
    assert_eq!(
        received(&run.events().await?),
        [
            ("my signal".to_owned(), "s-1".to_owned()),
            ("another signal".to_owned(), "s-2".to_owned())
        ]
    );

    within(LIMIT, "the terminate", run.terminate("test signal")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let before = run.events().await?;
    assert!(matches!(
        run.signal("failed signal 1", &(), "f-1").await,
        Err(Error::RunFinished(_))
    ));
    assert_eq!(run.events().await?, before);
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// Waits on three approvals at once and returns the first one approved, or
/// every rejection in the order they arrived (Restate's "await first
/// successful or all failed" over three signals, resolve = approve, reject =
/// a rejection with feedback).
#[derive(Clone)]
struct FirstApproved;

impl Workflow for FirstApproved {
    const NAME: &'static str = "first-approved";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let mut waits: FuturesUnordered<_> = ["sig0", "sig1", "sig2"]
            .into_iter()
            .map(|name| {
                let wait = ctx.approval(name);
                async move { (name, wait.await) }
            })
            .collect();
        let mut rejected = Vec::new();
        while let Some((name, decision)) = waits.next().await {
            let decision = decision?;
            if decision.approved {
                return Ok(format!("{name}:{}", decision.feedback.unwrap_or_default()));
            }
            rejected.push(format!("{name}:{}", decision.feedback.unwrap_or_default()));
        }
        Ok(format!("all failed {}", rejected.join("|")))
    }
}

/// Ports restatedev/e2e `Combinators.kt::signalFirstSuccessfulOrAllFailed` (and
/// `::signalFirstCompleted`) onto approvals: with `sig0` and `sig2` rejected and
/// `sig1` approved (a host restart between the decisions), the run returns
/// `sig1`'s; with all three rejected it reports them in arrival order. Both
/// logs replay to the same result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_approval_among_rejections_wins_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), FirstApproved).await?;
    let run = host.start::<FirstApproved>("one", ()).await?;
    within(LIMIT, "the waits", run.wait_until_suspended()).await??;
    run.approve("sig0", false, Some("fail0".into())).await?;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), FirstApproved).await?;
    let run = host.handle::<FirstApproved>("one");
    run.approve("sig2", false, Some("fail2".into())).await?;
    run.approve("sig1", true, Some("success1".into())).await?;
    assert_eq!(
        within(LIMIT, "the first approval", run.result()).await??,
        "sig1:success1"
    );
    assert_eq!(
        replay(FirstApproved, &run.events().await?).await?,
        Replayed::Completed("sig1:success1".to_owned())
    );

    let all = host.start::<FirstApproved>("all", ()).await?;
    within(LIMIT, "the waits", all.wait_until_suspended()).await??;
    all.approve("sig2", false, Some("e2".into())).await?;
    all.approve("sig0", false, Some("e0".into())).await?;
    all.approve("sig1", false, Some("e1".into())).await?;
    let expected = "all failed sig2:e2|sig0:e0|sig1:e1".to_owned();
    assert_eq!(
        within(LIMIT, "all rejected", all.result()).await??,
        expected
    );
    assert_eq!(
        replay(FirstApproved, &all.events().await?).await?,
        Replayed::Completed(expected)
    );
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

type Branch<'a> = Pin<Box<dyn Future<Output = reel::Result<String>> + Send + 'a>>;

fn show(r: reel::Result<String>) -> String {
    match r {
        Ok(v) => format!("ok:{v}"),
        Err(Error::Step { message, .. }) => format!("err:{message}"),
        Err(e) => format!("other:{e}"),
    }
}

/// `true`: all of a step that returns, a signal and a step that fails for
/// good (Restate's "await all completed"); `false`: the first success of a
/// failing step and a signal ("await first succeeded or all failed").
#[derive(Clone)]
struct Mixed;

impl Workflow for Mixed {
    const NAME: &'static str = "mixed";
    type Input = bool;
    type Output = String;
    async fn run(&self, ctx: Ctx, all: bool) -> reel::Result<String> {
        if all {
            let (a, b, c) = futures::join!(
                ctx.step("run", |_| async { Ok::<_, StepError>("runval".to_owned()) }),
                ctx.wait_for_signal::<String>("sig"),
                ctx.step("fail", |_| async {
                    Err::<String, _>(StepError::non_retryable("fail"))
                }),
            );
            return Ok([show(a), show(b), show(c)].join("|"));
        }
        let mut branches: FuturesUnordered<Branch<'_>> = FuturesUnordered::new();
        branches.push(Box::pin(ctx.step("fail", |_| async {
            Err::<String, _>(StepError::non_retryable("fail"))
        })));
        branches.push(Box::pin(ctx.wait_for_signal::<String>("sig")));
        let mut failures = Vec::new();
        while let Some(r) = branches.next().await {
            match r {
                Ok(v) => return Ok(v),
                Err(e) => failures.push(show(Err(e))),
            }
        }
        Ok(format!("all failed {}", failures.join("|")))
    }
}

/// Ports restatedev/e2e `Combinators.kt::mixedAllCompletedRunSignalAndFailedRun`
/// and `::mixedSignalWinsAfterRunFails`: a join of a step that returns, a
/// signal and a step that fails with a terminal (non-retryable) error yields
/// `ok:runval|ok:sigval|err:fail`; the first success of a failing step and a
/// signal skips the failure and takes the signal. The failing steps run once,
/// across a restart, and both logs replay to the same results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_steps_and_signals_combine_like_restate_combinators() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Mixed).await?;
    let all = host.start::<Mixed>("all", true).await?;
    let first = host.start::<Mixed>("first", false).await?;
    within(LIMIT, "all waits", all.wait_until_suspended()).await??;
    within(LIMIT, "first waits", first.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), Mixed).await?;
    let all = host.handle::<Mixed>("all");
    let first = host.handle::<Mixed>("first");
    all.signal("sig", "sigval", "sig-1").await?;
    first.signal("sig", "sigval", "sig-1").await?;
    let expected = "ok:runval|ok:sigval|err:fail".to_owned();
    assert_eq!(within(LIMIT, "all", all.result()).await??, expected);
    assert_eq!(within(LIMIT, "first", first.result()).await??, "sigval");
    for run in [&all, &first] {
        let events = run.events().await?;
        let fails = events
            .iter()
            .filter(|e| matches!(e, Event::StepFailed { id, .. } if id == "fail"))
            .count();
        assert_eq!(fails, 1, "{}: the failing step ran again", run.id());
    }
    assert_eq!(
        replay(Mixed, &all.events().await?).await?,
        Replayed::Completed(expected)
    );
    assert_eq!(
        replay(Mixed, &first.events().await?).await?,
        Replayed::Completed("sigval".to_owned())
    );
    host.shutdown().await?;
    Ok(())
}
