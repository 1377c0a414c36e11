//! Acceptance: published values (`ctx.publish`, `published`, `wait_published`) and
//! approvals (`ctx.approval`, `approve`), as the README describes them.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, RunStatus, StepError, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Publishes `stage` = "one", waits for `go`, publishes `stage` = what it got and
/// `count` = 2, then waits for `end` and returns.
struct Stages;
impl Workflow for Stages {
    const NAME: &'static str = "stages";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.publish("stage", "one").await?;
        let go: String = ctx.wait_for_signal("go").await?;
        ctx.publish("stage", &go).await?;
        ctx.publish("count", &2u32).await?;
        let _: () = ctx.wait_for_signal("end").await?;
        Ok(go)
    }
}

/// Waits for `go`; then fails for good if told so, else ends without publishing.
struct Silent;
impl Workflow for Silent {
    const NAME: &'static str = "silent";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let fail: bool = ctx.wait_for_signal("go").await?;
        if fail {
            ctx.step("boom", |_| async {
                Err::<(), _>(StepError::non_retryable("no"))
            })
            .await?;
        }
        Ok(())
    }
}

/// Publishes under `a` and `b` in its first segment, continues as new, publishes
/// `b` again and waits for `end`.
struct Segments;
impl Workflow for Segments {
    const NAME: &'static str = "segments";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        if segment == 0 {
            ctx.publish("a", &1u32).await?;
            ctx.publish("b", &10u32).await?;
            return ctx.continue_as_new::<Segments>(1).await;
        }
        ctx.publish("b", &20u32).await?;
        let _: () = ctx.wait_for_signal("end").await?;
        Ok(segment)
    }
}

static FIXED: AtomicBool = AtomicBool::new(false);

/// Panics outside a step until `FIXED` is set (a crash loop parks it); once fixed,
/// publishes `ready` and ends.
struct Crashy;
impl Workflow for Crashy {
    const NAME: &'static str = "crashy";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.step("first", |_| async { Ok::<_, String>(()) }).await?;
        if !FIXED.load(Ordering::SeqCst) {
            panic!("broken code");
        }
        ctx.publish("ready", &7u32).await?;
        Ok(())
    }
}

/// Two approvals on one name, one after the other.
struct TwoApprovals;
impl Workflow for TwoApprovals {
    const NAME: &'static str = "two-approvals";
    type Input = ();
    type Output = Vec<(bool, Option<String>)>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<(bool, Option<String>)>> {
        let a = ctx.approval("ship").await?;
        let b = ctx.approval("ship").await?;
        Ok(vec![(a.approved, a.feedback), (b.approved, b.feedback)])
    }
}

/// Waits for the signal `first`, then for the approval `ship`.
struct LateApproval;
impl Workflow for LateApproval {
    const NAME: &'static str = "late-approval";
    type Input = ();
    type Output = (bool, Option<String>);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(bool, Option<String>)> {
        let _: () = ctx.wait_for_signal("first").await?;
        let a = ctx.approval("ship").await?;
        Ok((a.approved, a.feedback))
    }
}

async fn host(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .restart_limit(2, Duration::from_secs(60))
        .register(Stages)
        .register(Silent)
        .register(Segments)
        .register(Crashy)
        .register(TwoApprovals)
        .register(LateApproval)
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_on_a_key_is_woken_and_keys_are_independent() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<Stages>("s-1", ()).await?;
    run.wait_until_suspended().await?;
    assert_eq!(
        run.published::<String>("stage").await?.as_deref(),
        Some("one")
    );
    assert_eq!(run.published::<u32>("count").await?, None);

    // Several callers wait for a key not published yet: all of them get it.
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let run = run.clone();
            tokio::spawn(async move { run.wait_published::<u32>("count").await })
        })
        .collect();
    run.signal("go", "two", "g-1").await?;
    for w in waiters {
        assert_eq!(within(LIMIT, "a waiter on count", w).await???, 2);
    }
    assert_eq!(
        run.published::<String>("stage").await?.as_deref(),
        Some("two")
    );
    // Another key's value does not answer a wait on this one.
    assert_eq!(run.wait_published::<String>("stage").await?, "two");

    run.signal("end", &(), "e-1").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, "two");
    // A finished run still answers with its latest values.
    assert_eq!(
        run.published::<String>("stage").await?.as_deref(),
        Some("two")
    );
    assert_eq!(run.wait_published::<u32>("count").await?, 2);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_of_the_wrong_type_gets_a_codec_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<Stages>("s-2", ()).await?;
    run.wait_until_suspended().await?;
    let got = run.published::<u64>("stage").await;
    assert!(matches!(got, Err(Error::Codec(_))), "{got:?}");
    let got = within(LIMIT, "wait_published", run.wait_published::<u64>("stage")).await?;
    assert!(matches!(got, Err(Error::Codec(_))), "{got:?}");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_runs_are_errors_for_readers() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let ghost = host.handle::<Stages>("nobody");
    let got = ghost.published::<String>("stage").await;
    assert!(matches!(got, Err(Error::UnknownRun(_))), "{got:?}");
    let got = within(
        LIMIT,
        "wait on an unknown run",
        ghost.wait_published::<String>("stage"),
    )
    .await?;
    assert!(matches!(got, Err(Error::UnknownRun(_))), "{got:?}");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_ending_cancelled_or_failed_without_the_key_answer_run_finished() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;

    let cancelled = host.start::<Silent>("cancelled", ()).await?;
    cancelled.wait_until_suspended().await?;
    let waiter = {
        let run = cancelled.clone();
        tokio::spawn(async move { run.wait_published::<u32>("x").await })
    };
    cancelled.cancel("stop").await?;
    let got = within(LIMIT, "a waiter on a cancelled run", waiter).await??;
    assert!(matches!(got, Err(Error::RunFinished(_))), "{got:?}");

    let failed = host.start::<Silent>("failed", ()).await?;
    failed.wait_until_suspended().await?;
    let waiter = {
        let run = failed.clone();
        tokio::spawn(async move { run.wait_published::<u32>("x").await })
    };
    failed.signal("go", &true, "g").await?;
    let got = within(LIMIT, "a waiter on a failed run", waiter).await??;
    assert!(matches!(got, Err(Error::RunFinished(_))), "{got:?}");
    // And a wait that starts after the end answers at once.
    let got = within(LIMIT, "a late waiter", failed.wait_published::<u32>("x")).await?;
    assert!(matches!(got, Err(Error::RunFinished(_))), "{got:?}");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_shutdown_when_the_host_stops() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<Silent>("waits", ()).await?;
    run.wait_until_suspended().await?;
    let waiter = {
        let run = run.clone();
        tokio::spawn(async move { run.wait_published::<u32>("x").await })
    };
    // Let the waiter register before the host stops (bounded: it may already have).
    tokio::task::yield_now().await;
    host.shutdown().await?;
    let got = within(LIMIT, "a waiter across shutdown", waiter).await??;
    assert!(matches!(got, Err(Error::Shutdown)), "{got:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_published_in_an_earlier_segment_stay_readable() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<Segments>("seg", 0).await?;
    within(LIMIT, "the second segment to wait", async {
        loop {
            if run.info().await?.segment == 1
                && matches!(run.status().await?, RunStatus::Suspended { .. })
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    assert_eq!(
        run.published::<u32>("b").await?,
        Some(20),
        "the latest value wins"
    );
    assert_eq!(
        run.published::<u32>("a").await?,
        Some(1),
        "the latest value published under `a` by this run is 1"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_runs_waiters_keep_waiting_until_fixed_code_publishes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<Crashy>("crashy", ()).await?;
    within(LIMIT, "the crash loop to park the run", async {
        loop {
            if matches!(run.status().await?, RunStatus::Parked { .. }) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await??;
    let waiter = {
        let run = run.clone();
        tokio::spawn(async move { run.wait_published::<u32>("ready").await })
    };
    // A parked run has not ended: its waiter must not be answered.
    let early = tokio::time::timeout(Duration::from_millis(300), async {
        while !waiter.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(early.is_err(), "the waiter on a parked run returned early");
    FIXED.store(true, Ordering::SeqCst);
    run.retry().await?;
    let got = within(LIMIT, "the value from fixed code", waiter).await??;
    assert_eq!(got?, 7);
    within(LIMIT, "the result", run.result()).await??;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_approve_is_one_decision_in_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<TwoApprovals>("two", ()).await?;
    let status = run.wait_until_suspended().await?;
    match &status {
        RunStatus::Suspended { waiting_on } => {
            assert!(waiting_on.contains("approval `ship`"), "{waiting_on}")
        }
        other => panic!("not suspended: {other:?}"),
    }
    run.approve("ship", false, Some("not yet".into())).await?;
    run.approve("ship", true, None).await?;
    let got = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(got, vec![(false, Some("not yet".to_owned())), (true, None)]);
    // The run has ended: another decision is refused; an unknown run too.
    let late = run.approve("ship", true, None).await;
    assert!(matches!(late, Err(Error::RunFinished(_))), "{late:?}");
    let ghost = host
        .handle::<TwoApprovals>("ghost")
        .approve("ship", true, None)
        .await;
    assert!(matches!(ghost, Err(Error::UnknownRun(_))), "{ghost:?}");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_sent_early_is_buffered_and_a_signal_of_its_name_is_not_one()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<LateApproval>("late", ()).await?;
    run.wait_until_suspended().await?;
    // A plain signal named like the approval is not a decision.
    run.signal("ship", &true, "not-a-decision").await?;
    run.approve("ship", true, Some("fine".into())).await?;
    run.signal("first", &(), "f-1").await?;
    let got = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(got, (true, Some("fine".to_owned())));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_survive_a_restart_of_the_host() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<TwoApprovals>("restart", ()).await?;
    run.wait_until_suspended().await?;
    run.approve("ship", true, Some("first".into())).await?;
    within(LIMIT, "the second wait", async {
        loop {
            let waits = run
                .events()
                .await?
                .iter()
                .filter(|e| matches!(e, reel::Event::SignalAwaited { .. }))
                .count();
            if waits == 2 {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    host.shutdown().await?;
    let host = self::host(dir.path()).await?;
    let run = host.handle::<TwoApprovals>("restart");
    run.approve("ship", false, None).await?;
    let got = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(got, vec![(true, Some("first".to_owned())), (false, None)]);
    host.shutdown().await?;
    Ok(())
}
