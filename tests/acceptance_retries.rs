//! Acceptance: retries (DESIGN "Semantics": "A panicking body is a failed attempt.
//! The waits between attempts are durable timers. Exhausted attempts are recorded
//! and replay re-raises them as `Error::Step`; a handler may catch that error and go
//! on"; `idempotency_key()` = run id + step id, "stable across retries and crashes,
//! distinct between steps"; README: "default: 3 attempts, 100 ms then 200 ms
//! backoff"), checked on a hand-moved test clock so every due time is exact.

mod common;

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, until_log, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, RetryPolicy, StepError, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn ms(t: SystemTime) -> u64 {
    u64::try_from(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()).unwrap_or(0)
}

/// Every attempt a body saw: (run id, step call, attempt, idempotency key).
static SEEN: Mutex<Vec<(String, String, u32, String)>> = Mutex::new(Vec::new());

fn seen(run: &str) -> Vec<(String, u32, String)> {
    SEEN.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|s| s.0 == run)
        .map(|s| (s.1.clone(), s.2, s.3.clone()))
        .collect()
}

fn note(run: &str, call: &str, attempt: u32, key: &str) {
    SEEN.lock().unwrap_or_else(|p| p.into_inner()).push((
        run.to_owned(),
        call.to_owned(),
        attempt,
        key.to_owned(),
    ));
}

/// One step under the default policy that fails on every attempt; the handler
/// catches the final `Error::Step` and goes on with another step.
struct AlwaysFails;
impl Workflow for AlwaysFails {
    const NAME: &'static str = "always-fails";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let run = ctx.run_id().to_owned();
        let r = run.clone();
        let caught = ctx
            .step("charge", move |s| {
                let r = r.clone();
                async move {
                    note(&r, "charge", s.attempt(), s.idempotency_key());
                    Err::<u32, _>(format!("refused on attempt {}", s.attempt()))
                }
            })
            .await;
        let message = match caught {
            Err(Error::Step { step, message }) => format!("{step}: {message}"),
            other => {
                return Err(Error::failed(format!(
                    "expected a step error, got {other:?}"
                )));
            }
        };
        let r = run.clone();
        ctx.step("after", move |s| {
            let r = r.clone();
            async move {
                note(&r, "after", s.attempt(), s.idempotency_key());
                Ok::<_, String>(())
            }
        })
        .await?;
        Ok(message)
    }
}

/// The workflow's policy: 1 s, times 10, at most 3 s, 4 attempts; a second step
/// overrides it with `no_retry`; a third one panics.
struct Capped;
impl Workflow for Capped {
    const NAME: &'static str = "capped";
    type Input = ();
    type Output = Vec<String>;
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::default()
            .with_max_attempts(4)
            .with_backoff(Duration::from_secs(1), Duration::from_secs(3))
            .with_multiplier(10.0)
    }
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let mut out = Vec::new();
        for name in ["slow"] {
            match ctx.step(name, |_| async { Err::<(), _>("down") }).await {
                Err(e) => out.push(e.to_string()),
                Ok(()) => out.push("ok".into()),
            }
        }
        match ctx
            .step_with("once", RetryPolicy::no_retry(), |_| async {
                Err::<(), _>("once only")
            })
            .await
        {
            Err(e) => out.push(e.to_string()),
            Ok(()) => out.push("ok".into()),
        }
        match ctx
            .step_with("boom", RetryPolicy::no_retry(), |_| async {
                if true {
                    panic!("kaboom in the body");
                }
                Ok::<(), String>(())
            })
            .await
        {
            Err(Error::Step { step, message }) => out.push(format!("{step}|{message}")),
            other => out.push(format!("{other:?}")),
        }
        Ok(out)
    }
}

/// Fails non-retryably inside a loop and catches it; the same name again gets
/// `name#k`; bodies are counted so replay is seen to run none of them again.
struct Loop {
    bodies: Counter,
}
impl Workflow for Loop {
    const NAME: &'static str = "loop";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let mut out = Vec::new();
        for i in 0..3u32 {
            let bodies = self.bodies.clone();
            let r = ctx
                .step("item", move |s| {
                    let bodies = bodies.clone();
                    let key = s.idempotency_key().to_owned();
                    async move {
                        bodies.bump();
                        if i == 1 {
                            Err(StepError::non_retryable(format!("bad item {i}")))
                        } else {
                            Ok(key)
                        }
                    }
                })
                .await;
            out.push(match r {
                Ok(key) => key,
                Err(e) => e.to_string(),
            });
        }
        let _: u32 = ctx.wait_for_signal("go").await?;
        Ok(out)
    }
}

/// The clock's next due time once the host's timer service has armed one (it
/// does so after the run's write, and after recovery on a new host).
async fn armed(clock: &TestClock) -> anyhow::Result<Option<u64>> {
    within(LIMIT, "a timer armed on the clock", async {
        while clock.next_due().is_none() {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    Ok(clock.next_due().map(ms))
}

fn failures(events: &[Event], step: &str) -> Vec<(u32, Option<u64>, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::StepFailed {
                id,
                attempt,
                error,
                retry_at,
            } if id == step => Some((*attempt, *retry_at, error.clone())),
            _ => None,
        })
        .collect()
}

async fn open<W: Workflow>(dir: &std::path::Path, clock: &TestClock, w: W) -> reel::Result<Host> {
    common::hosts::open_on(dir, clock, w).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_policy_waits_100_then_200_ms_on_durable_timers_with_one_key() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock, AlwaysFails).await?;
    let run = host.start::<AlwaysFails>("pay/42%", ()).await?;

    let log = until_log(&run, LIMIT, "the first failure", |e| {
        failures(e, "charge").len() == 1
    })
    .await?;
    let first_due = ms(t0()) + 100;
    assert_eq!(
        failures(&log, "charge"),
        vec![(1, Some(first_due), "refused on attempt 1".into())],
        "the first backoff of the default policy is 100 ms"
    );
    within(LIMIT, "the backoff wait", run.wait_until_suspended()).await??;
    assert_eq!(
        armed(&clock).await?,
        Some(first_due),
        "the retry waits on a timer due at retry_at"
    );

    // The backoff timer is durable: a host restart keeps its due time.
    host.shutdown().await?;
    let host = open(dir.path(), &clock, AlwaysFails).await?;
    let run = host.handle::<AlwaysFails>("pay/42%");
    within(
        LIMIT,
        "the backoff wait after restart",
        run.wait_until_suspended(),
    )
    .await??;
    assert_eq!(armed(&clock).await?, Some(first_due));
    assert_eq!(
        seen("pay/42%").len(),
        1,
        "no attempt before the backoff is over"
    );

    clock.advance(Duration::from_millis(100));
    let log = until_log(&run, LIMIT, "the second failure", |e| {
        failures(e, "charge").len() == 2
    })
    .await?;
    let second_due = ms(t0()) + 300;
    assert_eq!(
        failures(&log, "charge")[1],
        (2, Some(second_due), "refused on attempt 2".into()),
        "the second backoff is 200 ms"
    );
    within(LIMIT, "the second backoff", run.wait_until_suspended()).await??;
    clock.advance(Duration::from_millis(200));
    let out = within(LIMIT, "the end", run.result()).await??;
    assert_eq!(out, "charge: refused on attempt 3");

    let log = run.events().await?;
    assert_eq!(
        failures(&log, "charge")[2],
        (3, None, "refused on attempt 3".into()),
        "the exhausted attempt has no retry_at"
    );
    let seen = seen("pay/42%");
    let charge: Vec<_> = seen.iter().filter(|s| s.0 == "charge").collect();
    assert_eq!(
        charge.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![1, 2, 3],
        "attempt() counts 1, 2, 3 across a restart"
    );
    assert!(
        charge.iter().all(|s| s.2 == charge[0].2),
        "one idempotency key for every attempt, across a restart: {charge:?}"
    );
    let after = seen
        .iter()
        .find(|s| s.0 == "after")
        .expect("the next step ran");
    assert_ne!(after.2, charge[0].2, "another step has another key");
    assert!(
        charge[0].2.ends_with("charge") && after.2.ends_with("after"),
        "the key names the step: {} / {}",
        charge[0].2,
        after.2
    );
    // README: `run id/step id`, with `%` and `/` in the run id escaped.
    assert_eq!(charge[0].2, "pay%2F42%25/charge");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_policy_caps_backoff_and_step_with_overrides_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = open(dir.path(), &clock, Capped).await?;
    let run = host.start::<Capped>("capped", ()).await?;
    let mut now = ms(t0());
    // Waits of 1 s, then 10 s capped at 3 s, then 3 s.
    for (k, wait) in [1_000u64, 3_000, 3_000].into_iter().enumerate() {
        let log = until_log(&run, LIMIT, "a failure", |e| {
            failures(e, "slow").len() == k + 1
        })
        .await?;
        assert_eq!(
            failures(&log, "slow")[k].1,
            Some(now + wait),
            "attempt {} waits {wait} ms",
            k + 1
        );
        within(LIMIT, "the backoff", run.wait_until_suspended()).await??;
        clock.advance(Duration::from_millis(wait));
        now += wait;
    }
    let out = within(LIMIT, "the end", run.result()).await??;
    let log = run.events().await?;
    assert_eq!(
        failures(&log, "slow").len(),
        4,
        "max_attempts counts the first"
    );
    assert_eq!(failures(&log, "slow")[3].1, None);
    assert_eq!(
        failures(&log, "once"),
        vec![(1, None, "once only".into())],
        "step_with's policy replaces the workflow's"
    );
    let boom = failures(&log, "boom");
    assert_eq!(
        boom.len(),
        1,
        "a panicking body is one failed attempt: {boom:?}"
    );
    assert!(boom[0].2.contains("kaboom in the body"), "{boom:?}");
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(
        out[0],
        Error::Step {
            step: "slow".into(),
            message: "down".into()
        }
        .to_string()
    );
    assert!(
        out[2].starts_with("boom|") && out[2].contains("kaboom"),
        "{out:?}"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caught_step_failure_replays_without_rerunning_any_body() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let bodies = Counter::default();
    let host = common::hosts::open(
        dir.path(),
        Loop {
            bodies: bodies.clone(),
        },
    )
    .await?;
    let run = host.start::<Loop>("loop-run", ()).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    assert_eq!(bodies.get(), 3);
    let log = run.events().await?;
    let ids: Vec<&str> = log
        .iter()
        .filter_map(|e| match e {
            Event::StepStarted { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        ids,
        vec!["item", "item#2", "item#3"],
        "steps in a loop get name#k"
    );
    host.shutdown().await?;

    // A new host replays the three steps, the failed one included: no body runs.
    let host = common::hosts::open(
        dir.path(),
        Loop {
            bodies: bodies.clone(),
        },
    )
    .await?;
    let run = host.handle::<Loop>("loop-run");
    run.signal("go", &1u32, "go-1").await?;
    let out = within(LIMIT, "the end", run.result()).await??;
    assert_eq!(bodies.get(), 3, "replay ran a recorded body again");
    assert_eq!(out.len(), 3);
    assert!(out[0].ends_with("/item"), "{out:?}");
    assert!(out[2].ends_with("/item#3"), "{out:?}");
    assert_eq!(
        out[1],
        Error::Step {
            step: "item#2".into(),
            message: "bad item 1".into()
        }
        .to_string()
    );
    host.shutdown().await?;
    Ok(())
}

/// A step body borrows the handler's locals ("A step body runs inline (it may
/// borrow locals)") and its error is any `Display` type of the service's own.
struct Borrower;

#[derive(Debug)]
struct ServiceError(&'static str);
impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "service said {}", self.0)
    }
}

impl Workflow for Borrower {
    const NAME: &'static str = "borrower";
    type Input = Vec<u32>;
    type Output = (u32, String);
    async fn run(&self, ctx: Ctx, items: Vec<u32>) -> reel::Result<(u32, String)> {
        let prefix = String::from("total");
        let total = ctx
            .step("sum", |_| async {
                Ok::<_, ServiceError>(
                    items.iter().sum::<u32>() + u32::try_from(prefix.len()).unwrap_or(0),
                )
            })
            .await?;
        let failed = ctx
            .step_with("remote", RetryPolicy::no_retry(), |_| async {
                Err::<u32, _>(ServiceError(if items.is_empty() {
                    "empty"
                } else {
                    "busy"
                }))
            })
            .await;
        let message = match failed {
            Err(Error::Step { message, .. }) => message,
            other => format!("{other:?}"),
        };
        Ok((total, message))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_bodies_borrow_locals_and_take_any_displayable_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Borrower).await?;
    let run = host.start::<Borrower>("borrow", vec![1, 2, 3]).await?;
    assert_eq!(
        within(LIMIT, "the end", run.result()).await??,
        (11, "service said busy".to_owned())
    );
    host.shutdown().await?;
    Ok(())
}

#[test]
fn retry_policy_is_clone_debug_default_and_serde() -> anyhow::Result<()> {
    let p = RetryPolicy::default();
    assert_eq!(
        (p.max_attempts, p.initial_backoff, p.multiplier),
        (3, Duration::from_millis(100), 2.0)
    );
    assert_eq!(p.backoff(1), Duration::from_millis(100));
    assert_eq!(p.backoff(2), Duration::from_millis(200));
    let json = serde_json::to_string(&p.clone())?;
    let back: RetryPolicy = serde_json::from_str(&json)?;
    assert_eq!(back, p);
    assert!(format!("{p:?}").contains("max_attempts"));
    Ok(())
}
