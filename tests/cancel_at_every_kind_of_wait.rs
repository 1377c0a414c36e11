//! Adversarial cancellation tests: a run cancelled while it sleeps, while a step
//! waits out its retry backoff, while it selects between a timer and a signal, with
//! cleanup that itself sleeps; typed errors from `result()` of failed and cancelled
//! runs.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, RetryPolicy, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
const HOUR: Duration = Duration::from_secs(3600);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind()).collect()
}

/// Sleeps a day, then does a step.
struct Sleeper {
    after: Counter,
}
impl Workflow for Sleeper {
    const NAME: &'static str = "sleeper";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.sleep(HOUR * 24).await?;
        ctx.step("after", |_| async {
            self.after.bump();
            Ok::<_, String>(())
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_sleep_ends_the_run_and_the_timer_never_wakes_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let clock = TestClock::new(t0());
    let after = Counter::default();
    let open = || {
        common::hosts::open_on(
            &path,
            &clock,
            Sleeper {
                after: after.clone(),
            },
        )
    };
    let host = open().await?;
    let run = host.start::<Sleeper>("s", ()).await?;
    run.wait_until_suspended().await?;
    within(LIMIT, "cancel", run.cancel("stop it")).await??;
    assert_eq!(run.result().await, Err(Error::Cancelled("stop it".into())));
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    clock.advance(HOUR * 48);
    host.shutdown().await?;
    let host = open().await?;
    let run = host.handle::<Sleeper>("s");
    assert_eq!(
        within(LIMIT, "result", run.result()).await?,
        Err(Error::Cancelled("stop it".into()))
    );
    let k = kinds(&run.events().await?);
    assert!(!k.contains(&"TimerFired"), "{k:?}");
    assert_eq!(k.last(), Some(&"RunCancelled"));
    assert_eq!(after.get(), 0);
    // A second cancel with another reason keeps the first.
    run.cancel("again").await?;
    assert_eq!(run.result().await, Err(Error::Cancelled("stop it".into())));
    host.shutdown().await?;
    Ok(())
}

/// A step that always fails, retried for ever with a one-hour backoff.
struct Flaky {
    attempts: Counter,
}
impl Workflow for Flaky {
    const NAME: &'static str = "flaky";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let policy = RetryPolicy::unlimited().with_backoff(HOUR, HOUR);
        ctx.step_with("call", policy, |_| async {
            self.attempts.bump();
            Err::<(), _>("down")
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_retry_backoff_stops_the_retries() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let attempts = Counter::default();
    let host = common::hosts::open_on(
        dir.path(),
        &clock,
        Flaky {
            attempts: attempts.clone(),
        },
    )
    .await?;
    let run = host.start::<Flaky>("f", ()).await?;
    run.wait_until_suspended().await?;
    clock.advance(HOUR);
    common::until_log(&run, LIMIT, "second failure", |e| {
        e.iter()
            .filter(|e| matches!(e, Event::StepFailed { .. }))
            .count()
            == 2
    })
    .await?;
    within(LIMIT, "cancel", run.cancel("enough")).await??;
    assert_eq!(run.result().await, Err(Error::Cancelled("enough".into())));
    let before = attempts.get();
    assert_eq!(before, 2);
    clock.advance(HOUR * 5);
    // Nothing runs any more: another run on the host completes, this one stays.
    let probe = host.start::<Flaky>("probe", ()).await?;
    probe.wait_until_suspended().await?;
    probe.cancel("done").await?;
    assert_eq!(attempts.get(), before + 1, "only the probe's first attempt");
    host.shutdown().await?;
    Ok(())
}

/// Selects between a signal, a timer and the cancel request.
struct Chooser;
impl Workflow for Chooser {
    const NAME: &'static str = "chooser";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let sig = ctx.wait_for_signal::<String>("go");
        let tmr = ctx.sleep(HOUR);
        let cancelled = ctx.cancelled();
        tokio::pin!(sig, tmr, cancelled);
        let what = tokio::select! {
            s = &mut sig => format!("signal {}", s?),
            t = &mut tmr => { t?; "timer".to_owned() }
            r = &mut cancelled => format!("cancelled: {r}"),
        };
        // Cleanup that waits (within the 30 s cancel grace): a shielded sleep and a
        // shielded step.
        if ctx.is_cancelled() {
            let shield = ctx.shielded();
            shield.sleep(Duration::from_secs(10)).await?;
            let w = what.clone();
            shield
                .step("cleanup", |_| {
                    let w = w.clone();
                    async move { Ok::<_, String>(w) }
                })
                .await?;
            return Err(Error::Cancelled(what));
        }
        Ok(what)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_in_a_select_runs_a_cleanup_that_sleeps_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let clock = TestClock::new(t0());
    let open = || common::hosts::open_on(&path, &clock, Chooser);
    let host = open().await?;
    let run = host.start::<Chooser>("c", ()).await?;
    run.wait_until_suspended().await?;
    run.request_cancel("user").await?;
    // The cleanup sleeps 10 s of test time.
    common::until_log(&run, LIMIT, "cleanup timer", |e| {
        e.iter()
            .filter(|e| matches!(e, Event::TimerScheduled { .. }))
            .count()
            == 2
    })
    .await?;
    // A late signal does not change the winner.
    let _ = run.signal("go", "late", "late").await;
    host.shutdown().await?;
    clock.advance(Duration::from_secs(10));
    let host = open().await?;
    let run = host.handle::<Chooser>("c");
    assert_eq!(
        within(LIMIT, "result", run.result()).await?,
        Err(Error::Cancelled("user".into())),
        "{:?}",
        kinds(&run.events().await?)
    );
    let events = run.events().await?;
    let cleanup = events.iter().find_map(|e| match e {
        Event::StepCompleted { id, output } if id == "cleanup" => Some(output.clone()),
        _ => None,
    });
    assert!(cleanup.is_some(), "{:?}", kinds(&events));
    host.shutdown().await?;
    Ok(())
}

/// Fails in different ways, by input.
struct Fails;
impl Workflow for Fails {
    const NAME: &'static str = "fails";
    type Input = u8;
    type Output = u32;
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::default()
            .with_max_attempts(2)
            .with_backoff(Duration::ZERO, Duration::ZERO)
    }
    async fn run(&self, ctx: Ctx, how: u8) -> reel::Result<u32> {
        match how {
            0 => {
                ctx.step("bad", |_| async { Err::<u32, _>("no luck") })
                    .await
            }
            1 => Err(Error::failed("handler says no")),
            2 => {
                // Catches a step failure and goes on.
                let r = ctx
                    .step("bad", |_| async { Err::<u32, _>("no luck") })
                    .await;
                match r {
                    Err(Error::Step { step, message }) => {
                        assert_eq!((step.as_str(), message.as_str()), ("bad", "no luck"));
                        Ok(7)
                    }
                    other => other,
                }
            }
            3 => {
                ctx.step("panics", |_| async {
                    if true {
                        panic!("boom in body");
                    }
                    Ok::<u32, String>(0)
                })
                .await
            }
            _ => Err(Error::Codec("handler-made codec error".into())),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_of_failed_runs_is_the_recorded_typed_error_also_after_a_restart()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let open = || common::hosts::open(&path, Fails);
    let host = open().await?;
    let mut got = Vec::new();
    for how in 0..5u8 {
        let run = host.start::<Fails>(&format!("f-{how}"), how).await?;
        got.push(within(LIMIT, "result", run.result()).await?);
    }
    assert_eq!(
        got[0],
        Err(Error::Step {
            step: "bad".into(),
            message: "no luck".into()
        })
    );
    assert_eq!(got[1], Err(Error::Failed("handler says no".into())));
    assert_eq!(got[2], Ok(7));
    match &got[3] {
        Err(Error::Step { step, message }) => {
            assert_eq!(step, "panics");
            assert!(message.contains("boom in body"), "{message}");
        }
        other => panic!("expected a step error, got {other:?}"),
    }
    assert_eq!(got[4], Err(Error::Codec("handler-made codec error".into())));
    for (how, want) in got.iter().enumerate() {
        let status = host.handle::<Fails>(&format!("f-{how}")).status().await?;
        if want.is_ok() {
            assert_eq!(status, RunStatus::Completed);
        } else {
            assert!(
                matches!(status, RunStatus::Failed { .. }),
                "{how}: {status:?}"
            );
        }
    }
    host.shutdown().await?;
    let host = open().await?;
    for (how, want) in got.iter().enumerate() {
        let again = host.handle::<Fails>(&format!("f-{how}")).result().await;
        assert_eq!(&again, want, "after restart, run {how}");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_result_callers_all_see_the_end() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, Chooser).await?;
    let run = host.start::<Chooser>("c", ()).await?;
    let mut waiters = Vec::new();
    for _ in 0..20 {
        let run = run.clone();
        waiters.push(tokio::spawn(async move { run.result().await }));
    }
    run.wait_until_suspended().await?;
    run.signal("go", "now", "1").await?;
    for w in waiters {
        assert_eq!(
            within(LIMIT, "a waiter", w).await??,
            Ok("signal now".into())
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// A cancel request that arrives before the run's first wait: the first wait
/// fails at once, and `is_cancelled` is true from then on.
struct Eager;
impl Workflow for Eager {
    const NAME: &'static str = "eager";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let _: () = ctx.wait_for_signal("gate").await.or_else(|e| match e {
            Error::Cancelled(_) => Ok(()),
            e => Err(e),
        })?;
        // After the request: every non-shielded primitive fails at once.
        let s = ctx.sleep(Duration::ZERO).await;
        let st = ctx.step("x", |_| async { Ok::<_, String>(1) }).await;
        let w = ctx.wait_for_signal::<u32>("other").await;
        let u = ctx.uuid().await;
        Ok(format!(
            "{} {} {} {} {}",
            ctx.is_cancelled(),
            matches!(s, Err(Error::Cancelled(_))),
            matches!(st, Err(Error::Cancelled(_))),
            matches!(w, Err(Error::Cancelled(_))),
            u.is_ok()
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_cancel_every_primitive_fails_at_once_and_a_value_completes() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let open = || common::hosts::open(&path, Eager);
    let host = open().await?;
    let run = host.start::<Eager>("e", ()).await?;
    run.wait_until_suspended().await?;
    run.cancel("stop").await?;
    let first = run.result().await;
    host.shutdown().await?;
    let host = open().await?;
    let again = host.handle::<Eager>("e").result().await;
    assert_eq!(first, again);
    // Returning a value after the request completes the run (README).
    let out = first?;
    assert!(out.starts_with("true true true true"), "{out}");
    assert_eq!(
        host.handle::<Eager>("e").status().await?,
        RunStatus::Completed
    );
    host.shutdown().await?;
    Ok(())
}

/// Catches the cancel and fails with an error of its own.
struct Grumpy;
impl Workflow for Grumpy {
    const NAME: &'static str = "grumpy";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        match ctx.wait_for_signal::<()>("never").await {
            Err(Error::Cancelled(_)) => Err(Error::failed("cleanup went wrong")),
            other => other,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_error_after_a_cancel_ends_the_run_cancelled_with_the_reason() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Grumpy).await?;
    let run = host.start::<Grumpy>("g", ()).await?;
    run.wait_until_suspended().await?;
    within(LIMIT, "cancel", run.cancel("bye")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert_eq!(run.result().await, Err(Error::Cancelled("bye".into())));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_result_call_ends_with_shutdown_when_the_host_stops() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Grumpy).await?;
    let run = host.start::<Grumpy>("g", ()).await?;
    run.wait_until_suspended().await?;
    let waiter = {
        let run = run.clone();
        tokio::spawn(async move { run.result().await })
    };
    host.shutdown().await?;
    assert_eq!(
        within(LIMIT, "waiter", waiter).await??,
        Err(Error::Shutdown)
    );
    assert_eq!(run.status().await, Err(Error::Shutdown));
    Ok(())
}
