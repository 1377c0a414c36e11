//! Recovery as DBOS tests it: shutdown while many runs are mid-step, reopen the
//! same directory: nothing lost, nothing recorded is run again. Durable sleeps and
//! retry backoffs across a restart on the test clock, attempt numbers that go on
//! where they were, and backoff times as the policy says.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, Gate, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Failure, RetryPolicy, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

type Log = Arc<Mutex<Vec<(u32, String, String)>>>;

/// Three steps; the middle one waits for the host's gate. Every body execution
/// is logged with the host generation; every value the handler received is
/// noted in `seen` (run, step).
#[derive(Clone)]
struct Mid {
    generation: u32,
    gate: Arc<Gate>,
    bodies: Log,
    seen: Arc<Mutex<BTreeSet<(String, String)>>>,
}

impl Mid {
    fn note_body(&self, run: &str, step: &str) {
        self.bodies.lock().unwrap_or_else(|p| p.into_inner()).push((
            self.generation,
            run.to_owned(),
            step.to_owned(),
        ));
    }
    fn note_seen(&self, run: &str, step: &str) {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((run.to_owned(), step.to_owned()));
    }
}

impl Workflow for Mid {
    const NAME: &'static str = "mid";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let run = ctx.run_id().to_owned();
        let a = ctx
            .step("one", |_| async {
                self.note_body(&run, "one");
                Ok::<_, String>(n + 1)
            })
            .await?;
        self.note_seen(&run, "one");
        let b = ctx
            .step("two", |_| async {
                self.note_body(&run, "two");
                // Some runs finish this step before the shutdown, the others wait.
                if n % 3 != 0 {
                    self.gate.wait().await;
                }
                Ok::<_, String>(a * 10)
            })
            .await?;
        self.note_seen(&run, "two");
        let c = ctx
            .step("three", |_| async {
                self.note_body(&run, "three");
                Ok::<_, String>(b + 1)
            })
            .await?;
        self.note_seen(&run, "three");
        Ok(c)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_many_runs_mid_step_loses_nothing_and_reruns_nothing_recorded()
-> anyhow::Result<()> {
    const RUNS: u32 = 60;
    let dir = tempfile::tempdir()?;
    let bodies: Log = Arc::default();
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let first = Mid {
        generation: 1,
        gate: Arc::new(Gate::new()),
        bodies: bodies.clone(),
        seen: seen.clone(),
    };
    let host = common::hosts::open(dir.path(), first.clone()).await?;
    for i in 0..RUNS {
        host.start::<Mid>(&format!("m{i:03}"), i).await?;
    }
    // Wait until every run's second step has started.
    within(LIMIT, "every second step to start", async {
        loop {
            let n = bodies
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter(|(_, _, s)| s == "two")
                .count();
            if n >= RUNS as usize {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    within(LIMIT, "the shutdown", host.shutdown()).await??;
    let seen_before: BTreeSet<(String, String)> =
        seen.lock().unwrap_or_else(|p| p.into_inner()).clone();

    let second = Mid {
        generation: 2,
        gate: Arc::new(Gate::new()),
        bodies: bodies.clone(),
        seen: seen.clone(),
    };
    second.gate.open();
    let host = common::hosts::open(dir.path(), second).await?;
    for i in 0..RUNS {
        let h = host.handle::<Mid>(&format!("m{i:03}"));
        assert_eq!(
            within(LIMIT, "a recovered run", h.result()).await??,
            (i + 1) * 10 + 1
        );
    }
    let bodies = bodies.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut per: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
    for (g, run, step) in &bodies {
        per.entry((run.clone(), step.clone())).or_default().push(*g);
    }
    for ((run, step), gens) in &per {
        // A step whose value the first host's handler saw was recorded: it never
        // runs on the second host.
        if seen_before.contains(&(run.clone(), step.clone())) {
            assert_eq!(gens, &[1], "{run}/{step} ran again after it was recorded");
        }
        assert!(gens.len() <= 2, "{run}/{step}: {gens:?}");
    }
    for i in 0..RUNS {
        let run = format!("m{i:03}");
        assert_eq!(per[&(run.clone(), "one".to_owned())], [1], "{run}");
        let h = host.handle::<Mid>(&run);
        let completed = h
            .events()
            .await?
            .iter()
            .filter(|e| matches!(e, Event::StepCompleted { .. }))
            .count();
        assert_eq!(completed, 3, "{run}");
    }
    host.shutdown().await?;
    Ok(())
}

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// Reads the clock, sleeps `hours`, reads it again, then a step.
#[derive(Clone)]
struct Nap {
    after: Counter,
}
impl Workflow for Nap {
    const NAME: &'static str = "nap";
    type Input = u64;
    type Output = (u64, u64);
    async fn run(&self, ctx: Ctx, hours: u64) -> reel::Result<(u64, u64)> {
        let before = ctx.now().await?;
        ctx.sleep(Duration::from_secs(hours * 3600)).await?;
        let after = ctx.now().await?;
        ctx.step("after", |_| async {
            self.after.bump();
            Ok::<_, String>(())
        })
        .await?;
        let secs = |t: SystemTime| {
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        };
        Ok((secs(before), secs(after)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_sleeps_across_a_restart_fire_when_due() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let nap = Nap {
        after: Counter::default(),
    };
    let host = common::hosts::open_on(dir.path(), &clock, nap.clone()).await?;
    let short = host.start::<Nap>("short", 1).await?;
    let long = host.start::<Nap>("long", 10).await?;
    within(LIMIT, "short", short.wait_until_suspended()).await??;
    within(LIMIT, "long", long.wait_until_suspended()).await??;
    host.shutdown().await?;

    // Two hours pass while no host runs.
    clock.advance(Duration::from_secs(2 * 3600));
    let host = common::hosts::open_on(dir.path(), &clock, nap.clone()).await?;
    let short = host.handle::<Nap>("short");
    let long = host.handle::<Nap>("long");
    let (b, a) = within(LIMIT, "the overdue timer", short.result()).await??;
    let start = t0().duration_since(UNIX_EPOCH)?.as_secs();
    assert_eq!(b, start);
    assert_eq!(
        a,
        start + 2 * 3600,
        "the sleep ended when the host came back"
    );
    assert!(matches!(long.status().await?, RunStatus::Suspended { .. }));
    assert_eq!(nap.after.get(), 1);
    clock.advance(Duration::from_secs(8 * 3600));
    let (b, a) = within(LIMIT, "the long timer", long.result()).await??;
    assert_eq!(b, start);
    assert_eq!(a, start + 10 * 3600);
    assert_eq!(nap.after.get(), 2);
    host.shutdown().await?;
    Ok(())
}

/// A step failing until `ok_on`, recording each attempt number it saw.
#[derive(Clone)]
struct Retry {
    ok_on: u32,
    attempts: Arc<Mutex<Vec<u32>>>,
    policy: RetryPolicy,
}
impl Workflow for Retry {
    const NAME: &'static str = "retry";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step_with("call", self.policy.clone(), |s| async move {
            self.attempts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(s.attempt());
            if s.attempt() < self.ok_on {
                Err(format!("attempt {} failed", s.attempt()))
            } else {
                Ok(s.attempt())
            }
        })
        .await
    }
}

fn secs_since_t0(t: SystemTime) -> f64 {
    t.duration_since(t0())
        .map(|d| d.as_secs_f64())
        .unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoffs_follow_the_policy_and_its_cap() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let retry = Retry {
        ok_on: 5,
        attempts: Arc::default(),
        policy: RetryPolicy::default()
            .with_max_attempts(6)
            .with_backoff(Duration::from_secs(10), Duration::from_secs(25))
            .with_multiplier(2.0),
    };
    let host = common::hosts::open_on(dir.path(), &clock, retry.clone()).await?;
    let run = host.start::<Retry>("r", ()).await?;
    assert_eq!(within(LIMIT, "the retries", run.result()).await??, 5);
    assert_eq!(
        *retry.attempts.lock().unwrap_or_else(|p| p.into_inner()),
        [1, 2, 3, 4, 5]
    );
    let starts: Vec<f64> = run
        .records()
        .await?
        .iter()
        .filter(|r| matches!(r.event, Event::StepStarted { .. }))
        .map(|r| secs_since_t0(r.at))
        .collect();
    // Waits of 10, 20, then 25 (capped), 25.
    assert_eq!(starts, [0.0, 10.0, 30.0, 55.0, 80.0]);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backoff_pending_at_shutdown_goes_on_with_the_next_attempt_number() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let retry = Retry {
        ok_on: 3,
        attempts: Arc::default(),
        policy: RetryPolicy::default()
            .with_max_attempts(3)
            .with_backoff(Duration::from_secs(3600), Duration::from_secs(3600)),
    };
    let host = common::hosts::open_on(dir.path(), &clock, retry.clone()).await?;
    let run = host.start::<Retry>("r", ()).await?;
    within(LIMIT, "the backoff", run.wait_until_suspended()).await??;
    assert_eq!(
        *retry.attempts.lock().unwrap_or_else(|p| p.into_inner()),
        [1]
    );
    host.shutdown().await?;

    clock.advance(Duration::from_secs(3 * 3600));
    let host = common::hosts::open_on(dir.path(), &clock, retry.clone()).await?;
    let run = host.handle::<Retry>("r");
    // Attempt 2 runs at once; attempt 3 an hour after it.
    within(LIMIT, "the second backoff", run.wait_until_suspended()).await??;
    assert_eq!(
        *retry.attempts.lock().unwrap_or_else(|p| p.into_inner()),
        [1, 2]
    );
    clock.advance(Duration::from_secs(3600));
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 3);
    assert_eq!(
        *retry.attempts.lock().unwrap_or_else(|p| p.into_inner()),
        [1, 2, 3]
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_max_attempts_means_one_and_exhaustion_keeps_every_attempt() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let zero = Retry {
        ok_on: 99,
        attempts: Arc::default(),
        policy: RetryPolicy::default().with_max_attempts(0),
    };
    let host = common::hosts::open_on(dir.path(), &clock, zero.clone()).await?;
    let run = host.start::<Retry>("z", ()).await?;
    match within(LIMIT, "the failure", run.result()).await? {
        Err(Error::Step { step, message }) => {
            assert_eq!(
                (step.as_str(), message.as_str()),
                ("call", "attempt 1 failed")
            );
        }
        other => panic!("expected a step error, got {other:?}"),
    }
    assert_eq!(
        *zero.attempts.lock().unwrap_or_else(|p| p.into_inner()),
        [1]
    );
    host.shutdown().await?;

    let dir = tempfile::tempdir()?;
    let four = Retry {
        ok_on: 99,
        attempts: Arc::default(),
        policy: RetryPolicy::default().with_max_attempts(4),
    };
    let host = common::hosts::open_on(dir.path(), &clock, four.clone()).await?;
    let run = host.start::<Retry>("f", ()).await?;
    assert!(matches!(
        within(LIMIT, "the failure", run.result()).await?,
        Err(Error::Step { ref message, .. }) if message == "attempt 4 failed"
    ));
    assert_eq!(
        *four.attempts.lock().unwrap_or_else(|p| p.into_inner()),
        [1, 2, 3, 4]
    );
    let failure = run.events().await?.into_iter().find_map(|e| match e {
        Event::RunFailed { error } => Some(error),
        _ => None,
    });
    match failure {
        Some(Failure::Step { attempts, .. }) => {
            let texts: Vec<String> = attempts.iter().map(|a| a.error.clone()).collect();
            assert_eq!(
                texts,
                (1..=4)
                    .map(|i| format!("attempt {i} failed"))
                    .collect::<Vec<_>>()
            );
        }
        other => panic!("expected a step failure, got {other:?}"),
    }
    host.shutdown().await?;
    Ok(())
}
