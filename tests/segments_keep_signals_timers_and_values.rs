//! Adversarial continue-as-new and recorded-value tests: signal ids across
//! segments, a timer abandoned by the old segment, a cancel carried over, many
//! segments, published values across segments, recorded values stable across a
//! restart.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, RunStatus, Uuid, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
const HOUR: Duration = Duration::from_secs(3600);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn segments(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::RunStarted { .. }))
        .count()
}

/// Takes one "x" per segment; ends when it has `until`.
struct OnePer;
impl Workflow for OnePer {
    const NAME: &'static str = "one-per";
    type Input = (Vec<u32>, usize);
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, input: (Vec<u32>, usize)) -> reel::Result<Vec<u32>> {
        let (mut got, until) = input;
        if got.len() == until {
            return Ok(got);
        }
        got.push(ctx.wait_for_signal("x").await?);
        ctx.continue_as_new::<OnePer>((got, until)).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_segments_each_take_one_signal_of_a_burst_in_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), OnePer).await?;
    let run = host.start::<OnePer>("op", (Vec::new(), 50)).await?;
    for i in 0..50u32 {
        run.signal("x", &i, &format!("s-{i}")).await?;
    }
    assert_eq!(
        within(LIMIT, "result", run.result()).await??,
        (0..50).collect::<Vec<_>>()
    );
    assert_eq!(segments(&run.events().await?), 51);
    host.shutdown().await?;
    Ok(())
}

/// Each segment waits for "gate", then takes one "x".
struct Gated;
impl Workflow for Gated {
    const NAME: &'static str = "gated";
    type Input = (Vec<u32>, usize);
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, input: (Vec<u32>, usize)) -> reel::Result<Vec<u32>> {
        let (mut got, until) = input;
        if got.len() == until {
            return Ok(got);
        }
        let _: () = ctx.wait_for_signal("gate").await?;
        got.push(ctx.wait_for_signal("x").await?);
        ctx.continue_as_new::<Gated>((got, until)).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_signal_keeps_its_id_so_a_resend_is_dropped() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Gated).await?;
    let run = host.start::<Gated>("g", (Vec::new(), 3)).await?;
    run.signal("x", &1u32, "a").await?;
    run.signal("x", &2u32, "b").await?;
    run.signal("gate", &(), "g1").await?;
    // Segment 2 waits for its gate with "b" carried over, unconsumed: a resend of
    // "b" is a duplicate (README: ids are remembered while carried over).
    common::until_log(&run, LIMIT, "second segment", |e| segments(e) == 2).await?;
    run.wait_until_suspended().await?;
    run.signal("x", &2u32, "b").await?;
    run.signal("x", &3u32, "c").await?;
    run.signal("gate", &(), "g2").await?;
    common::until_log(&run, LIMIT, "third segment", |e| segments(e) == 3).await?;
    run.signal("gate", &(), "g3").await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, vec![1, 2, 3]);
    host.shutdown().await?;
    Ok(())
}

/// Segment 0 schedules a 1-hour timer and continues as new without waiting for
/// it; segment 1 sleeps 2 hours: the old timer must not end the new sleep.
struct Abandon;
impl Workflow for Abandon {
    const NAME: &'static str = "abandon";
    type Input = u32;
    type Output = SystemTime;
    async fn run(&self, ctx: Ctx, seg: u32) -> reel::Result<SystemTime> {
        if seg == 0 {
            // Still pending (not dropped, so not cancelled) when the segment ends.
            let _pending = ctx.sleep(HOUR);
            let _: () = ctx.wait_for_signal("next").await?;
            return ctx.continue_as_new::<Abandon>(1).await;
        }
        if seg == 9 {
            // The probe: a plain one-hour sleep.
            ctx.sleep(HOUR).await?;
            return ctx.now().await;
        }
        ctx.sleep(HOUR * 2).await?;
        ctx.now().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_of_an_earlier_segment_does_not_end_a_sleep_of_the_new_one() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, Abandon).await?;
    let run = host.start::<Abandon>("ab", 0).await?;
    run.wait_until_suspended().await?;
    run.signal("next", &(), "n").await?;
    common::until_log(&run, LIMIT, "second segment's sleep", |e| {
        segments(e) == 2
            && e.iter()
                .rev()
                .take_while(|e| !matches!(e, Event::RunStarted { .. }))
                .any(|e| matches!(e, Event::TimerScheduled { .. }))
    })
    .await?;
    let probe = host.start::<Abandon>("probe", 9).await?;
    probe.wait_until_suspended().await?;
    clock.advance(HOUR);
    // The old timer came due with the probe's: once the probe has ended, the old
    // entry has been delivered (and must have been dropped).
    within(LIMIT, "probe", probe.result()).await??;
    run.wait_until_suspended().await?;
    let events = run.events().await?;
    let fired_in_new = events
        .iter()
        .rev()
        .take_while(|e| !matches!(e, Event::RunStarted { .. }))
        .any(|e| matches!(e, Event::TimerFired { .. }));
    assert!(
        !fired_in_new,
        "{:?}",
        events.iter().map(|e| e.kind()).collect::<Vec<_>>()
    );
    clock.advance(HOUR);
    assert_eq!(
        within(LIMIT, "result", run.result()).await??,
        t0() + HOUR * 2
    );
    host.shutdown().await?;
    Ok(())
}

/// A cancel requested while the run is about to continue as new reaches the new
/// segment.
struct Spin;
impl Workflow for Spin {
    const NAME: &'static str = "spin";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let _: () = ctx.wait_for_signal("tick").await?;
        ctx.continue_as_new::<Spin>(n + 1).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_run_of_continuations_ends_it_cancelled() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Spin).await?;
    let run = host.start::<Spin>("spin", 0).await?;
    for i in 0..5 {
        run.signal("tick", &(), &format!("t-{i}")).await?;
    }
    within(LIMIT, "cancel", run.cancel("halt")).await??;
    assert_eq!(run.result().await, Err(Error::Cancelled("halt".into())));
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert_eq!(
        run.signal("tick", &(), "after").await,
        Err(Error::RunFinished("spin".into()))
    );
    host.shutdown().await?;
    Ok(())
}

/// Publishes a value, then continues as new and waits.
struct PubThenContinue;
impl Workflow for PubThenContinue {
    const NAME: &'static str = "pub-continue";
    type Input = u32;
    type Output = ();
    async fn run(&self, ctx: Ctx, seg: u32) -> reel::Result<()> {
        if seg == 0 {
            ctx.publish("stage", "first segment").await?;
            return ctx.continue_as_new::<PubThenContinue>(1).await;
        }
        ctx.wait_for_signal("done").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_published_before_continuing_as_new_is_still_readable() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), PubThenContinue).await?;
    let run = host.start::<PubThenContinue>("pc", 0).await?;
    common::until_log(&run, LIMIT, "second segment", |e| segments(e) == 2).await?;
    run.wait_until_suspended().await?;
    assert_eq!(
        run.published::<String>("stage").await?,
        Some("first segment".to_owned())
    );
    assert_eq!(
        within(
            LIMIT,
            "wait_published",
            run.wait_published::<String>("stage")
        )
        .await??,
        "first segment"
    );
    run.signal("done", &(), "d").await?;
    run.result().await?;
    assert_eq!(
        run.published::<String>("stage").await?,
        Some("first segment".to_owned())
    );
    host.shutdown().await?;
    Ok(())
}

/// Records values, publishes them, waits, then returns them again.
struct Recorder;
impl Workflow for Recorder {
    const NAME: &'static str = "recorder";
    type Input = ();
    type Output = (Uuid, Uuid, u64, SystemTime);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(Uuid, Uuid, u64, SystemTime)> {
        let (a, b) = futures::join!(ctx.uuid(), ctx.uuid());
        let (a, b) = (a?, b?);
        let r = ctx.random_u64().await?;
        let now = ctx.now().await?;
        ctx.publish("values", &(a, b, r, now)).await?;
        let _: () = ctx.wait_for_signal("go").await?;
        Ok((a, b, r, now))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_values_are_the_same_after_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let clock = TestClock::new(t0());
    let open = || common::hosts::open_on(&path, &clock, Recorder);
    let host = open().await?;
    let run = host.start::<Recorder>("r", ()).await?;
    let seen: (Uuid, Uuid, u64, SystemTime) =
        within(LIMIT, "values", run.wait_published("values")).await??;
    assert_ne!(seen.0, seen.1);
    assert_eq!(seen.3, t0());
    run.wait_until_suspended().await?;
    host.shutdown().await?;
    clock.advance(HOUR);
    let host = open().await?;
    let run = host.handle::<Recorder>("r");
    run.signal("go", &(), "g").await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, seen);
    let published = run
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, Event::Published { .. }))
        .count();
    assert_eq!(published, 1);
    host.shutdown().await?;
    Ok(())
}
