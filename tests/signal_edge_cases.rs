//! DBOS send/recv and set_event/get_event analogues: signals with timeouts
//! (including a zero timeout with a signal already buffered), de-duplication of a
//! re-sent signal id after it was consumed, a run signalling itself, approvals in
//! order, payload type mismatches, and published values read while a run is
//! enqueued, cancelled or restarted.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Error, Host, QueueOptions, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// Waits for `ready` (so the test can buffer `msg` first), then for `msg` with a
/// zero timeout.
struct ZeroTimeout;
impl Workflow for ZeroTimeout {
    const NAME: &'static str = "zero-timeout";
    type Input = ();
    type Output = Option<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Option<u32>> {
        let _: () = ctx.wait_for_signal("ready").await?;
        ctx.wait_for_signal_timeout("msg", Duration::ZERO).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_timeout_takes_a_signal_already_buffered() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), ZeroTimeout).await?;
    let run = host.start::<ZeroTimeout>("z", ()).await?;
    within(LIMIT, "the first wait", run.wait_until_suspended()).await??;
    run.signal("msg", &7u32, "m").await?;
    run.signal("ready", &(), "r").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, Some(7));
    host.shutdown().await?;
    Ok(())
}

/// Takes `n` twice: the second with a timeout.
struct Twice;
impl Workflow for Twice {
    const NAME: &'static str = "twice";
    type Input = ();
    type Output = (u32, Option<u32>);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u32, Option<u32>)> {
        let first: u32 = ctx.wait_for_signal("n").await?;
        let second = ctx
            .wait_for_signal_timeout("n", Duration::from_secs(3600))
            .await?;
        Ok((first, second))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_id_sent_again_after_it_was_consumed_is_dropped() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, Twice).await?;
    let run = host.start::<Twice>("t", ()).await?;
    run.signal("n", &1u32, "same").await?;
    within(LIMIT, "the second wait", async {
        loop {
            let events = run.events().await?;
            if common::waits_on(&events, "n") == 2 {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    // A webhook retrying the same delivery: dropped, the second wait times out.
    run.signal("n", &2u32, "same").await?;
    clock.advance(Duration::from_secs(3601));
    assert_eq!(within(LIMIT, "the result", run.result()).await??, (1, None));
    host.shutdown().await?;
    Ok(())
}

/// Sends itself a signal, then waits for it.
struct Selfie;
impl Workflow for Selfie {
    const NAME: &'static str = "selfie";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let me = ctx.run_id().to_owned();
        ctx.signal(&me, "note", &(n + 1), "to-self").await?;
        ctx.wait_for_signal("note").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_can_signal_itself() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Selfie).await?;
    let run = host.start::<Selfie>("me", 41).await?;
    assert_eq!(within(LIMIT, "the self signal", run.result()).await??, 42);
    host.shutdown().await?;
    Ok(())
}

/// Two approvals of one name, then a signal whose type the sender gets wrong.
struct Approvals;
impl Workflow for Approvals {
    const NAME: &'static str = "approvals";
    type Input = ();
    type Output = (bool, bool, String);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(bool, bool, String)> {
        let a = ctx.approval("boss").await?;
        let b = ctx.approval("boss").await?;
        let typed = match ctx
            .wait_for_signal_timeout::<u32>("n", Duration::from_secs(3600))
            .await
        {
            Ok(v) => format!("ok {v:?}"),
            Err(Error::Codec(_)) => "codec".to_owned(),
            Err(e) => format!("other {e}"),
        };
        Ok((a.approved, b.approved, typed))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_in_order_and_a_mistyped_timed_signal_is_a_codec_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Approvals).await?;
    let run = host.start::<Approvals>("a", ()).await?;
    run.approve("boss", true, None).await?;
    run.approve("boss", false, Some("second".into())).await?;
    run.signal("n", "not a number", "n1").await?;
    assert_eq!(
        within(LIMIT, "the result", run.result()).await??,
        (true, false, "codec".to_owned())
    );
    host.shutdown().await?;
    Ok(())
}

/// Publishes its stage, waits for `go`, publishes again.
struct Stages;
impl Workflow for Stages {
    const NAME: &'static str = "stages";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.publish("stage", &"started").await?;
        let _: () = ctx.wait_for_signal("go").await?;
        ctx.publish("stage", &"done").await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_values_of_enqueued_and_cancelled_runs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = || {
        Host::builder()
            .path(dir.path())
            .register(Stages)
            .queue("q", QueueOptions::default().concurrency(1))
            .build()
    };
    let host = open().await?;
    let first = host.start_on::<Stages>("q", "first", ()).await?;
    assert_eq!(
        within(
            LIMIT,
            "the first stage",
            first.wait_published::<String>("stage")
        )
        .await??,
        "started"
    );
    let queued = host.start_on::<Stages>("q", "queued", ()).await?;
    assert_eq!(queued.status().await?, RunStatus::Enqueued);
    assert_eq!(queued.published::<String>("stage").await?, None);
    // A reader waiting on an enqueued run that is then cancelled is told so.
    let waiter = tokio::spawn({
        let q = queued.clone();
        async move { q.wait_published::<String>("stage").await }
    });
    queued.cancel("not needed").await?;
    assert_eq!(
        within(LIMIT, "the waiter", waiter).await??,
        Err(Error::RunFinished("queued".into()))
    );
    // A value read with the wrong type is a codec error.
    assert!(matches!(
        first.published::<u64>("stage").await,
        Err(Error::Codec(_))
    ));
    host.shutdown().await?;

    // After a restart the latest value is still there; a new wait returns the
    // next one.
    let host = open().await?;
    let first = host.handle::<Stages>("first");
    assert_eq!(
        first.published::<String>("stage").await?,
        Some("started".into())
    );
    first.signal("go", &(), "g").await?;
    within(LIMIT, "first", first.result()).await??;
    assert_eq!(
        first.wait_published::<String>("stage").await?,
        "done".to_owned()
    );
    host.shutdown().await?;
    Ok(())
}
