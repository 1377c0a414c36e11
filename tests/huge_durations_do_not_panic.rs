//! Durations too large for milliseconds-since-the-epoch give far-future timers: a
//! retry backoff of `Duration::MAX`, `sleep(2^62 s)`, `sleep(Duration::MAX)` and
//! `sleep_until(epoch + 2^62 s)`. Each run is `Suspended` on its timer (the status
//! names it), the due time in the log lies centuries ahead, and nothing fires, is
//! retried or panics while a `TestClock` moves ten years on (a witness timer due
//! then fires: the timer service has handled every due time up to it). The runs
//! are cancelled at the end.
//!
//! Why it fails without the fix: `RetryPolicy::backoff` feeds `2^64` seconds to
//! `Duration::from_secs_f64`, which panics; the panic escapes the step (it is not the
//! body's) and crashes the run until it is parked as a crash loop, running the body
//! again on each restart. The sleeps convert with `as_millis() as u64`, which wraps:
//! `2^62 s` is `2^65 * 125` ms, exactly 0 after wrapping, so the timer is due *now*
//! and fires at once (and so does `sleep_until` of that instant).

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Clock, Ctx, Event, Host, HostBuilder, RetryPolicy, RunHandle, RunStatus, Workflow};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(10);
/// How far the test moves the clock while it watches for a timer that fires or a
/// step retried too early.
const WATCH: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// "Far future": a century ahead, in ms.
const CENTURY_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

/// A step that always fails, with backoffs of `Duration::MAX`.
struct HugeBackoff;

impl Workflow for HugeBackoff {
    const NAME: &'static str = "huge-backoff";
    type Input = ();
    type Output = u32;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::MAX,
            max_backoff: Duration::MAX,
            multiplier: 10.0,
        };
        ctx.step_with("charge", policy, |s| async move {
            ATTEMPTS.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>(format!("attempt {} fails", s.attempt()))
        })
        .await
    }
}

#[derive(Serialize, Deserialize)]
enum Nap {
    For(Duration),
    Until(SystemTime),
}

/// Sleeps for, or until, what it is given.
struct Sleeper;

impl Workflow for Sleeper {
    const NAME: &'static str = "sleeper";
    type Input = Nap;
    type Output = String;

    async fn run(&self, ctx: Ctx, nap: Nap) -> reel::Result<String> {
        match nap {
            Nap::For(d) => ctx.sleep(d).await?,
            Nap::Until(t) => ctx.sleep_until(t).await?,
        }
        Ok("woke".to_owned())
    }
}

fn now_ms(clock: &TestClock) -> u64 {
    clock
        .now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn builder(dir: &std::path::Path, clock: &TestClock) -> HostBuilder {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .register(Sleeper)
}

/// Moves the clock `WATCH` on and returns once a witness timer due then has fired:
/// the timer service fires in due order, so every earlier due time was handled.
async fn watch(host: &Host, clock: &TestClock) -> anyhow::Result<()> {
    let witness = host.start::<Sleeper>("witness", Nap::For(WATCH)).await?;
    suspended(&witness).await?;
    clock.advance(WATCH);
    within(LIMIT, "the witness's timer", witness.result()).await??;
    Ok(())
}

async fn suspended<W: Workflow>(run: &RunHandle<W>) -> anyhow::Result<String> {
    match within(LIMIT, "the run to suspend", run.wait_until_suspended()).await? {
        Ok(RunStatus::Suspended { waiting_on }) => Ok(waiting_on),
        Ok(other) => anyhow::bail!("run `{}` is {other:?}", run.id()),
        Err(e) => anyhow::bail!(
            "run `{}` did not suspend ({e}); status {:?}",
            run.id(),
            run.status().await?
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_of_duration_max_is_a_far_future_retry() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = builder(dir.path(), &clock)
        .register(HugeBackoff)
        .build()
        .await?;
    let run = host.start::<HugeBackoff>("huge-backoff", ()).await?;
    let waiting_on = suspended(&run).await?;
    assert!(waiting_on.contains("charge"), "{waiting_on}");

    watch(&host, &clock).await?;
    assert_eq!(
        run.status().await?,
        RunStatus::Suspended { waiting_on },
        "still waiting for the retry"
    );
    assert_eq!(ATTEMPTS.load(Ordering::SeqCst), 1, "no second attempt yet");
    let failures: Vec<Option<u64>> = run
        .events()
        .await?
        .into_iter()
        .filter_map(|e| match e {
            Event::StepFailed { retry_at, .. } => Some(retry_at),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let retry_at = failures[0].expect("attempts are not exhausted: a retry is due");
    assert!(
        retry_at > now_ms(&clock) + CENTURY_MS,
        "retry due at {retry_at} ms, not in the far future"
    );

    run.cancel("test over").await?;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleeps_beyond_the_millisecond_range_are_far_future_timers() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = builder(dir.path(), &clock).build().await?;
    let naps = [
        ("sleep-2^62s", Nap::For(Duration::from_secs(1 << 62))),
        ("sleep-max", Nap::For(Duration::MAX)),
        (
            "sleep-until-2^62s",
            Nap::Until(UNIX_EPOCH + Duration::from_secs(1 << 62)),
        ),
    ];
    let mut runs = Vec::new();
    for (id, nap) in naps {
        runs.push(host.start::<Sleeper>(id, nap).await?);
    }
    // Every run is checked before failing, so the message shows each case.
    let mut problems = Vec::new();
    let mut statuses = Vec::new();
    for run in &runs {
        match suspended(run).await {
            Ok(waiting_on) if waiting_on.contains("timer") => {
                statuses.push(Some(RunStatus::Suspended { waiting_on }))
            }
            Ok(waiting_on) => {
                problems.push(format!("{}: waits on {waiting_on}", run.id()));
                statuses.push(None);
            }
            Err(e) => {
                problems.push(e.to_string());
                statuses.push(None);
            }
        }
    }

    watch(&host, &clock).await?;
    for (run, status) in runs.iter().zip(statuses) {
        let Some(status) = status else { continue };
        let now = run.status().await?;
        if now != status {
            problems.push(format!("{}: {now:?} after {WATCH:?} more", run.id()));
        }
        let events = run.events().await?;
        if events.iter().any(|e| matches!(e, Event::TimerFired { .. })) {
            problems.push(format!("{}: a far-future timer fired", run.id()));
        }
        match events.iter().find_map(|e| match e {
            Event::TimerScheduled { fire_at, .. } => Some(*fire_at),
            _ => None,
        }) {
            Some(fire_at) if fire_at > now_ms(&clock) + CENTURY_MS => {}
            other => problems.push(format!(
                "{}: timer due at {other:?} ms, not in the far future",
                run.id()
            )),
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");

    for run in &runs {
        run.cancel("test over").await?;
        assert_eq!(run.status().await?, RunStatus::Cancelled);
    }
    host.shutdown().await?;
    Ok(())
}
