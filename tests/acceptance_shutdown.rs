//! Acceptance, DESIGN invariant 8 and "No panic reaches the host": operations
//! during and after `Host::shutdown`. After shutdown every fallible public method
//! answers `Error::Shutdown` at once (no hang, no panic, nothing written); calls
//! racing a shutdown each end with a value or a typed error, and whatever was
//! acknowledged is there when a new host opens the path; a shutdown with a step body
//! stuck mid-flight still returns, and the step runs again in the next host.

mod common;

use std::time::Duration;

use common::{Gate, within};
use futures::StreamExt;
use reel::{Ctx, Error, Host, RunFilter, RunStatus, ScheduleSpec, StartOptions, Workflow};

const LIMIT: Duration = Duration::from_secs(30);
const QUICK: Duration = Duration::from_secs(5);

/// Waits for `go` (a u32) and returns it plus one.
struct Echo;
impl Workflow for Echo {
    const NAME: &'static str = "acc-sd-echo";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let n: u32 = ctx.wait_for_signal("go").await?;
        ctx.step("add", |_| async move { Ok::<_, String>(n + 1) })
            .await
    }
}

async fn open(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Echo)
        .queue("q", reel::QueueOptions::default().concurrency(1))
        .build()
        .await
}

fn shut<T: std::fmt::Debug>(what: &str, r: reel::Result<T>) {
    if let Some(m) = not_shut(what, r) {
        panic!("{m}");
    }
}

fn not_shut<T: std::fmt::Debug>(what: &str, r: reel::Result<T>) -> Option<String> {
    match r {
        Err(Error::Shutdown) => None,
        other => Some(format!(
            "{what} after shutdown: expected Error::Shutdown, got {other:?}"
        )),
    }
}

/// Every fallible method of `Host`, `RunHandle` and `AnyRun`, called after
/// `shutdown()` returned (through a clone of the host and handles made before),
/// answers `Error::Shutdown` within a bound; `watch` yields it and ends; a second
/// `shutdown()` is fine; and nothing the calls asked for was done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_after_shutdown_answers_shutdown() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let waiting = host.start::<Echo>("w", ()).await?;
    within(LIMIT, "w waits", waiting.wait_until_suspended()).await??;
    let done = host.start::<Echo>("d", ()).await?;
    done.signal("go", &1u32, "d-1").await?;
    assert_eq!(within(LIMIT, "d", done.result()).await??, 2);
    let clone = host.clone();
    let any = host.run("w");
    let finished = host.run("d");
    let ghost = host.run("ghost");
    within(LIMIT, "shutdown", host.shutdown()).await??;

    let mut wrong: Vec<String> = Vec::new();
    macro_rules! check {
        ($what:expr, $call:expr) => {
            wrong.extend(not_shut($what, within(QUICK, $what, $call).await?))
        };
    }
    // Host.
    check!("start", clone.start::<Echo>("new", ()));
    check!(
        "start_with",
        clone.start_with::<Echo>("new", (), StartOptions::default())
    );
    check!("start_on", clone.start_on::<Echo>("q", "new", ()));
    check!(
        "signal_with_start",
        clone.signal_with_start::<Echo, _>("new", (), "go", &1u32, "s")
    );
    check!(
        "signal_with_start on w",
        clone.signal_with_start::<Echo, _>("w", (), "go", &1u32, "s")
    );
    check!("runs", clone.runs());
    check!("list", clone.list(RunFilter::default()));
    check!("count", clone.count());
    check!("fork", clone.fork("d", 2, "forked"));
    check!(
        "schedule",
        clone.schedule::<Echo>("s", ScheduleSpec::every(Duration::from_secs(60)), ())
    );
    check!(
        "update_schedule",
        clone.update_schedule::<Echo>("s", ScheduleSpec::every(Duration::from_secs(60)), ())
    );
    check!("pause_schedule", clone.pause_schedule("s"));
    check!("resume_schedule", clone.resume_schedule("s"));
    check!("delete_schedule", clone.delete_schedule("s"));
    check!("schedules", clone.schedules());
    check!("enforce_retention", clone.enforce_retention());
    check!("reclaim_space", clone.reclaim_space());
    let _ = within(QUICK, "live_runs", clone.live_runs()).await?;

    // Handles: a waiting run, a finished run, an unknown run, a fresh handle.
    let fresh = clone.handle::<Echo>("w");
    for (name, h) in [
        ("waiting", any.clone()),
        ("finished", finished.clone()),
        ("ghost", ghost.clone()),
        ("fresh", fresh.untyped()),
    ] {
        check!(&format!("{name}.signal"), h.signal("go", &1u32, "late"));
        check!(&format!("{name}.approve"), h.approve("ok", true, None));
        check!(&format!("{name}.status"), h.status());
        check!(
            &format!("{name}.wait_until_suspended"),
            h.wait_until_suspended()
        );
        check!(&format!("{name}.cancel"), h.cancel("x"));
        check!(&format!("{name}.request_cancel"), h.request_cancel("x"));
        check!(&format!("{name}.terminate"), h.terminate("x"));
        check!(&format!("{name}.children"), h.children());
        check!(&format!("{name}.info"), h.info());
        check!(&format!("{name}.records"), h.records());
        check!(&format!("{name}.events"), h.events());
        check!(&format!("{name}.result"), h.result::<u32>());
        check!(&format!("{name}.pause"), h.pause());
        check!(&format!("{name}.resume"), h.resume());
        check!(&format!("{name}.retry"), h.retry());
        check!(&format!("{name}.delete"), h.delete());
        check!(&format!("{name}.typed"), h.typed::<Echo>());
        let items: Vec<reel::Result<reel::Record>> =
            within(QUICK, "watch", h.watch().collect::<Vec<_>>()).await?;
        if !matches!(items.as_slice(), [Err(Error::Shutdown)]) {
            wrong.push(format!("{name}.watch after shutdown: {items:?}"));
        }
        let items: Vec<reel::Result<reel::Record>> =
            within(QUICK, "watch_from", h.watch_from(1).collect::<Vec<_>>()).await?;
        if !matches!(items.as_slice(), [Err(Error::Shutdown)]) {
            wrong.push(format!("{name}.watch_from after shutdown: {items:?}"));
        }
    }
    check!("typed result", fresh.result());
    within(QUICK, "a second shutdown", clone.shutdown()).await??;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // Nothing was done: the waiting run still waits, the finished one is as it was,
    // no new run or schedule exists.
    let host = open(dir.path()).await?;
    let ids: Vec<String> = host.runs().await?.into_iter().map(|r| r.run_id).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(host.schedules().await?.is_empty());
    let w = host.handle::<Echo>("w");
    assert!(matches!(w.status().await?, RunStatus::Suspended { .. }));
    assert!(
        w.events()
            .await?
            .iter()
            .all(|e| e.kind() != "SignalReceived" && e.kind() != "CancelRequested")
    );
    assert_eq!(host.handle::<Echo>("d").result().await?, 2);
    w.signal("go", &4u32, "w-1").await?;
    assert_eq!(within(LIMIT, "w", w.result()).await??, 5);
    host.shutdown().await?;
    Ok(())
}

/// Calls racing a shutdown (starts, signals, status, results, listings, cancels
/// from many tasks) each end within a bound with a value or a typed error (no
/// panic, no hang); a start or signal that was acknowledged is there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_a_shutdown_end_and_keep_what_they_were_told() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let mut tasks = Vec::new();
    for t in 0..8u32 {
        let host = host.clone();
        tasks.push(tokio::spawn(async move {
            let mut started = Vec::new();
            let mut signalled = Vec::new();
            for i in 0..40u32 {
                let id = format!("r-{t}-{i}");
                match host.start::<Echo>(&id, ()).await {
                    Ok(_) => started.push(id.clone()),
                    Err(Error::Shutdown) => break,
                    Err(e) => panic!("start {id}: {e:?}"),
                }
                let h = host.handle::<Echo>(&id);
                if i % 2 == 0 {
                    match h.signal("go", &i, "s").await {
                        Ok(()) => signalled.push(id.clone()),
                        Err(Error::Shutdown) => break,
                        Err(e) => panic!("signal {id}: {e:?}"),
                    }
                }
                match h.status().await {
                    Ok(_) | Err(Error::Shutdown) => {}
                    Err(e) => panic!("status {id}: {e:?}"),
                }
                if i % 5 == 0 {
                    match host.list(RunFilter::default()).await {
                        Ok(_) | Err(Error::Shutdown) => {}
                        Err(e) => panic!("list: {e:?}"),
                    }
                }
                if i % 7 == 3 {
                    match h.cancel("bye").await {
                        Ok(()) | Err(Error::Shutdown) | Err(Error::RunFinished(_)) => {}
                        Err(e) => panic!("cancel {id}: {e:?}"),
                    }
                }
            }
            (started, signalled)
        }));
    }
    // Results awaited by others while the host goes down.
    let waiter = {
        let h = host.handle::<Echo>("r-0-1");
        tokio::spawn(async move { h.result().await })
    };
    // Let the tasks get going, then shut down in the middle of them.
    within(LIMIT, "some starts", async {
        loop {
            match host.count().await {
                Ok(c) if c.values().sum::<u64>() >= 20 => break,
                _ => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
    })
    .await?;
    within(LIMIT, "shutdown", host.shutdown()).await??;
    let mut started = Vec::new();
    let mut signalled = Vec::new();
    for t in tasks {
        let (s, g) = within(LIMIT, "a racing task", t).await??;
        started.extend(s);
        signalled.extend(g);
    }
    match within(LIMIT, "a pending result", waiter).await?? {
        Ok(_) | Err(Error::Shutdown) | Err(Error::Cancelled(_)) | Err(Error::UnknownRun(_)) => {}
        other => panic!("a pending result across shutdown: {other:?}"),
    }

    let host = open(dir.path()).await?;
    for id in &started {
        let st = host.run(id).status().await;
        assert!(st.is_ok(), "acknowledged start of {id} lost: {st:?}");
    }
    for id in &signalled {
        let events = host.run(id).events().await?;
        let cancelled = events.iter().any(|e| e.kind() == "CancelRequested");
        let received = events.iter().any(|e| e.kind() == "SignalReceived");
        assert!(
            received || cancelled,
            "acknowledged signal to {id} lost: {events:?}"
        );
    }
    host.shutdown().await?;
    Ok(())
}

static STEP_ENTERED: Gate = Gate::new();
static STEP_RELEASE: Gate = Gate::new();

/// A step that blocks until released.
struct Stuck;
impl Workflow for Stuck {
    const NAME: &'static str = "acc-sd-stuck";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("stuck", |_| async {
            STEP_ENTERED.open();
            STEP_RELEASE.wait().await;
            Ok::<_, String>(11u32)
        })
        .await
    }
}

/// A shutdown while a step body is stuck returns within a bound (the step's
/// completion is not recorded), a second host opens the path, and the run resumes
/// there and completes once the body can finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_stuck_step_returns_and_the_run_resumes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let build = || Host::builder().path(dir.path()).register(Stuck).build();
    let host = build().await?;
    let run = host.start::<Stuck>("s", ()).await?;
    within(LIMIT, "the step starts", STEP_ENTERED.wait()).await?;
    within(LIMIT, "shutdown with a stuck step", host.shutdown()).await??;
    shut("status after shutdown", run.status().await);

    let host = within(LIMIT, "a second host", build()).await??;
    let run = host.handle::<Stuck>("s");
    STEP_RELEASE.open();
    assert_eq!(within(LIMIT, "s", run.result()).await??, 11);
    host.shutdown().await?;
    Ok(())
}

/// A second host on a directory a live host holds is refused with
/// `Error::StoreLocked` (also while the first is busy), and harms nothing: the
/// first host goes on, and after it shuts down the second opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_host_on_a_held_directory_is_refused_and_harms_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let first = open(dir.path()).await?;
    let run = first.start::<Echo>("w", ()).await?;
    within(LIMIT, "w waits", run.wait_until_suspended()).await??;
    for _ in 0..3 {
        match within(LIMIT, "a second host", open(dir.path())).await? {
            Err(Error::StoreLocked { path }) => {
                assert!(path.ends_with(dir.path().file_name().unwrap_or_default()))
            }
            Err(e) => panic!("expected StoreLocked, got {e:?}"),
            Ok(_) => panic!("a second host opened a held directory"),
        }
    }
    // The first host is unharmed.
    run.signal("go", &1u32, "s").await?;
    assert_eq!(within(LIMIT, "w", run.result()).await??, 2);
    let more = first.start::<Echo>("m", ()).await?;
    within(LIMIT, "m waits", more.wait_until_suspended()).await??;
    first.shutdown().await?;
    let second = within(LIMIT, "the second host", open(dir.path())).await??;
    assert_eq!(second.handle::<Echo>("w").result().await?, 2);
    let m = second.handle::<Echo>("m");
    m.signal("go", &2u32, "s").await?;
    assert_eq!(within(LIMIT, "m", m.result()).await??, 3);
    second.shutdown().await?;
    Ok(())
}

/// `Host::enforce_retention` after shutdown answers `Error::Shutdown` (as its doc
/// says it may), with or without a retention policy, and deletes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforce_retention_after_shutdown_answers_shutdown() -> anyhow::Result<()> {
    for policy in [
        reel::Retention::keep_all().completed_after(Duration::from_millis(1)),
        reel::Retention::keep_all(),
    ] {
        let dir = tempfile::tempdir()?;
        let host = Host::builder()
            .path(dir.path())
            .register(Echo)
            .retention(policy.clone())
            .build()
            .await?;
        let clone = host.clone();
        within(LIMIT, "shutdown", host.shutdown()).await??;
        let r = within(QUICK, "enforce_retention", clone.enforce_retention()).await?;
        assert!(
            matches!(r, Err(Error::Shutdown)),
            "enforce_retention after shutdown with {policy:?}: {r:?}"
        );
    }
    Ok(())
}
