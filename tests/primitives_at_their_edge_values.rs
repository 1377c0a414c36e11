//! Primitives at their edge values, on a `TestClock` that only a test moves:
//! `sleep(Duration::ZERO)` and `sleep_until` a time already past are timers that
//! are due at once (they fire without the clock moving, recorded like any timer);
//! one signal id sent under two names is one delivery (signals are deduplicated
//! by their signal id, README "Guarantees"); `now()`, `uuid()` and `random_u64()`
//! answer the same after a host restart mid-run; a retry policy with a
//! multiplier below 1 waits `initial_backoff` between every two attempts ("below
//! 1 counts as 1"), one with `max_attempts` 1 never retries; and a step error of
//! several megabytes is kept whole, in `Error::Step` and in the `RunFailed`
//! record, also after a restart.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Failure, Host, RetryPolicy, RunStatus, Uuid, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_900_000_000)
}

/// Sleeps zero, then until a past time, then until now, then returns `now()`.
struct Instant;
impl Workflow for Instant {
    const NAME: &'static str = "instant";
    type Input = ();
    type Output = SystemTime;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<SystemTime> {
        ctx.sleep(Duration::ZERO).await?;
        ctx.sleep_until(UNIX_EPOCH).await?;
        let now = ctx.now().await?;
        ctx.sleep_until(now - Duration::from_secs(3600)).await?;
        ctx.sleep_until(now).await?;
        ctx.now().await
    }
}

/// Waits on `a`, then on `b`.
struct TwoNames;
impl Workflow for TwoNames {
    const NAME: &'static str = "two-names";
    type Input = ();
    type Output = (u32, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u32, u32)> {
        let a = ctx.wait_for_signal("a").await?;
        let b = ctx.wait_for_signal("b").await?;
        Ok((a, b))
    }
}

type Drawn = (SystemTime, Uuid, u64);

/// Draws a time, a uuid and a number, publishes them, waits for `go`, and
/// returns them with a second time.
struct Draws;
impl Workflow for Draws {
    const NAME: &'static str = "draws";
    type Input = ();
    type Output = (Drawn, SystemTime);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(Drawn, SystemTime)> {
        let drawn = (ctx.now().await?, ctx.uuid().await?, ctx.random_u64().await?);
        ctx.publish("drawn", &drawn).await?;
        let _: () = ctx.wait_for_signal("go").await?;
        Ok((drawn, ctx.now().await?))
    }
}

/// A step failing `attempts` times under a policy with a multiplier below 1
/// (attempt `n` fails while `n <= attempts`), and one that fails with a huge
/// error under `max_attempts` 1.
struct Policies {
    bodies: Counter,
}
impl Workflow for Policies {
    const NAME: &'static str = "policies";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, attempts: u32) -> reel::Result<u32> {
        if attempts == 0 {
            let huge = "e".repeat(3 << 20);
            return ctx
                .step_with(
                    "huge",
                    RetryPolicy::default().with_max_attempts(1),
                    |_| async {
                        self.bodies.bump();
                        Err::<u32, _>(huge.clone())
                    },
                )
                .await;
        }
        let policy = RetryPolicy::default()
            .with_max_attempts(attempts + 1)
            .with_backoff(Duration::from_secs(10), Duration::from_secs(1000))
            .with_multiplier(0.25);
        ctx.step_with("shrinking", policy, |s| async move {
            if s.attempt() <= attempts {
                Err(format!("attempt {}", s.attempt()))
            } else {
                Ok(s.attempt())
            }
        })
        .await
    }
}

fn builder(dir: &std::path::Path, clock: &TestClock, bodies: &Counter) -> reel::HostBuilder {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .register(Instant)
        .register(TwoNames)
        .register(Draws)
        .register(Policies {
            bodies: bodies.clone(),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_and_past_timers_fire_without_the_clock_moving() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock, &Counter::default())
        .build()
        .await?;
    let run = host.start::<Instant>("i", ()).await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, t0());
    let events = run.events().await?;
    let scheduled =
        common::log_checks::count(&events, |e| matches!(e, Event::TimerScheduled { .. }));
    let fired = common::log_checks::count(&events, |e| matches!(e, Event::TimerFired { .. }));
    assert_eq!((scheduled, fired), (4, 4), "{events:?}");
    // Replayed from the top: the same answer.
    host.shutdown().await?;
    let host = builder(dir.path(), &clock, &Counter::default())
        .build()
        .await?;
    assert_eq!(host.handle::<Instant>("i").result().await?, t0());
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_signal_id_under_two_names_is_one_delivery() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock, &Counter::default())
        .build()
        .await?;
    let run = host.start::<TwoNames>("n", ()).await?;
    run.signal("a", &1u32, "same").await?;
    run.signal("b", &2u32, "same").await?; // a duplicate by its id: dropped
    run.signal("b", &3u32, "other").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, (1, 3));
    let received = common::log_checks::count(&run.events().await?, |e| {
        matches!(e, Event::SignalReceived { .. })
    });
    assert_eq!(received, 2);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_values_answer_the_same_after_a_restart_mid_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = builder(dir.path(), &clock, &Counter::default())
        .build()
        .await?;
    let run = host.start::<Draws>("d", ()).await?;
    let published: Drawn = within(LIMIT, "the draw", run.wait_published("drawn")).await??;
    run.wait_until_suspended().await?;
    host.shutdown().await?;

    clock.advance(Duration::from_secs(7200));
    let host = builder(dir.path(), &clock, &Counter::default())
        .build()
        .await?;
    let run = host.handle::<Draws>("d");
    run.signal("go", &(), "go-1").await?;
    let (drawn, later) = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(drawn, published, "replay answers the recorded values");
    assert_eq!(drawn.0, t0());
    assert_eq!(later, t0() + Duration::from_secs(7200));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multiplier_below_one_keeps_the_initial_backoff() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let host = builder(dir.path(), &clock, &Counter::default())
        .build()
        .await?;
    let run = host.start::<Policies>("p", 3).await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 4);
    let waits: Vec<u64> = run
        .records()
        .await?
        .iter()
        .filter_map(|r| match &r.event {
            Event::StepFailed {
                retry_at: Some(at), ..
            } => {
                let failed = r.at.duration_since(UNIX_EPOCH).ok()?.as_millis() as u64;
                Some(at - failed)
            }
            _ => None,
        })
        .collect();
    assert_eq!(waits, vec![10_000, 10_000, 10_000], "below 1 counts as 1");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_error_of_megabytes_is_kept_whole_with_one_attempt() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let bodies = Counter::default();
    let host = builder(dir.path(), &clock, &bodies).build().await?;
    let run = host.start::<Policies>("huge", 0).await?;
    let check = |r: reel::Result<u32>| match r {
        Err(Error::Step { step, message }) => {
            assert_eq!(step, "huge");
            assert_eq!(message.len(), 3 << 20);
            assert!(message.bytes().all(|b| b == b'e'));
        }
        other => panic!(
            "expected Error::Step, got {:?}",
            other.map_err(|e| e.to_string().len())
        ),
    };
    check(within(LIMIT, "the result", run.result()).await?);
    let events = run.events().await?;
    let failed = events
        .iter()
        .filter(|e| matches!(e, Event::StepFailed { .. }))
        .count();
    assert_eq!(failed, 1, "max_attempts 1 retries nothing");
    let attempts = events.iter().find_map(|e| match e {
        Event::RunFailed {
            error: Failure::Step { attempts, .. },
        } => Some(attempts.len()),
        _ => None,
    });
    assert_eq!(attempts, Some(1), "RunFailed keeps the one attempt");
    host.shutdown().await?;

    let host = builder(dir.path(), &clock, &bodies).build().await?;
    let run = host.handle::<Policies>("huge");
    check(run.result().await);
    assert!(matches!(run.status().await?, RunStatus::Failed { .. }));
    assert_eq!(bodies.get(), 1);
    host.shutdown().await?;
    Ok(())
}
