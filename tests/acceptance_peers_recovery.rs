//! Acceptance: crash recovery and failure handling, ported from DBOS's own suite
//! (dbos-inc/dbos-transact-py, `tests/test_failures.py` and `tests/test_dbos.py`)
//! onto reel's steps, retries, parking and forks: a non-retryable error on the
//! last attempt, no backoff after the final attempt, a restart during the last
//! attempt grants no extra attempt, a second start and a retry of a run mid-step
//! run nothing twice, a crash-looping run is dead-lettered (parked) and a start
//! of its id does not revive it, while a host opened with the fix finishes it,
//! a fork under changed code diverges, and a failed run started again returns
//! its recorded error without running. Real stores in temp dirs; time is a
//! `TestClock` where it matters. Each test names the DBOS test it ports.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, Gate, until_log, within};
use reel::testing::TestClock;
use reel::{
    Ctx, Error, Event, Failure, Host, RetryPolicy, RunStatus, StatusKind, StepError, Workflow,
};

const LIMIT: Duration = Duration::from_secs(30);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn ms(t: SystemTime) -> u64 {
    u64::try_from(
        t.duration_since(UNIX_EPOCH)
            .expect("after epoch")
            .as_millis(),
    )
    .expect("fits")
}

type Attempts = Arc<Mutex<Vec<u32>>>;

fn seen(a: &Attempts) -> Vec<u32> {
    a.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn step_failures(events: &[Event]) -> Vec<(u32, String, Option<u64>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::StepFailed {
                attempt,
                error,
                retry_at,
                ..
            } => Some((*attempt, error.clone(), *retry_at)),
            _ => None,
        })
        .collect()
}

fn recorded_attempts(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .find_map(|e| match e {
            Event::RunFailed {
                error: Failure::Step { attempts, .. },
            } => Some(attempts.iter().map(|a| a.error.clone()).collect()),
            _ => None,
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------

/// A step that fails retryably twice, then non-retryably on its third attempt,
/// with attempts to spare.
#[derive(Clone, Default)]
struct Mixed {
    attempts: Attempts,
}

impl Workflow for Mixed {
    const NAME: &'static str = "mixed";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = RetryPolicy::default()
            .with_max_attempts(5)
            .with_backoff(Duration::from_secs(1), Duration::from_secs(1));
        ctx.step_with("charge", policy, |s| async move {
            self.attempts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(s.attempt());
            if s.attempt() < 3 {
                Err::<u32, _>(StepError::retryable(format!("retry me {}", s.attempt())))
            } else {
                Err(StepError::non_retryable("stop now"))
            }
        })
        .await
    }
}

/// Ports DBOS `tests/test_failures.py::test_step_should_retry_on_last_attempt`
/// (and `::test_step_should_retry`): a step whose attempts fail retryably and
/// then with an error that must not be retried stops at that attempt, with that
/// error, although its policy allows more; every attempt's error is recorded in
/// order, and a restart runs no further attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_retryable_error_after_retryable_ones_ends_the_step_with_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let wf = Mixed::default();
    let host = common::hosts::open_on(dir.path(), &clock, wf.clone()).await?;
    let run = host.start::<Mixed>("m", ()).await?;
    match within(LIMIT, "the failure", run.result()).await? {
        Err(Error::Step { step, message }) => {
            assert_eq!((step.as_str(), message.as_str()), ("charge", "stop now"));
        }
        other => panic!("expected the non-retryable step error, got {other:?}"),
    }
    assert_eq!(seen(&wf.attempts), [1, 2, 3]);
    let events = run.events().await?;
    let failures = step_failures(&events);
    assert_eq!(failures.len(), 3, "{failures:?}");
    assert!(failures[0].2.is_some() && failures[1].2.is_some());
    assert_eq!(failures[2].2, None, "the non-retryable attempt is final");
    assert_eq!(
        recorded_attempts(&events),
        ["retry me 1", "retry me 2", "stop now"]
    );
    host.shutdown().await?;

    let host = common::hosts::open_on(dir.path(), &clock, wf.clone()).await?;
    let run = host.handle::<Mixed>("m");
    assert!(matches!(
        run.result().await,
        Err(Error::Step { ref message, .. }) if message == "stop now"
    ));
    host.shutdown().await?;
    assert_eq!(
        seen(&wf.attempts),
        [1, 2, 3],
        "no attempt after the restart"
    );
    Ok(())
}

// ---------------------------------------------------------------------------

/// A step that always fails: three attempts, backoff 1 s doubling.
#[derive(Clone, Default)]
struct AlwaysFails {
    attempts: Attempts,
}

impl Workflow for AlwaysFails {
    const NAME: &'static str = "always-fails";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = RetryPolicy::default()
            .with_max_attempts(3)
            .with_backoff(Duration::from_secs(1), Duration::from_secs(60))
            .with_multiplier(2.0);
        ctx.step_with("flaky", policy, |s| async move {
            self.attempts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(s.attempt());
            Err::<u32, _>(format!("fail {}", s.attempt()))
        })
        .await
    }
}

/// Ports DBOS `tests/test_failures.py::test_step_retries_no_final_sleep`
/// (regression test for DBOS issue #667): once the last attempt has failed, the
/// step fails at once; no backoff follows the final attempt. On a hand-moved
/// clock, the run ends after the clock moved through the two backoffs (1 s, 2 s)
/// and no further; the last failure has no `retry_at` and no timer is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_attempts_fail_without_a_final_backoff() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let wf = AlwaysFails::default();
    let host = common::hosts::open_on(dir.path(), &clock, wf.clone()).await?;
    let run = host.start::<AlwaysFails>("f", ()).await?;

    let events = until_log(&run, LIMIT, "the first failure", |e| {
        step_failures(e).len() == 1
    })
    .await?;
    assert_eq!(
        step_failures(&events)[0].2,
        Some(ms(t0()) + 1_000),
        "first backoff"
    );
    clock.advance(Duration::from_secs(1));
    let events = until_log(&run, LIMIT, "the second failure", |e| {
        step_failures(e).len() == 2
    })
    .await?;
    assert_eq!(
        step_failures(&events)[1].2,
        Some(ms(t0()) + 3_000),
        "second backoff"
    );
    clock.advance(Duration::from_secs(2));
    // The clock does not move again: a final backoff would hang here.
    match within(LIMIT, "the failure without another backoff", run.result()).await? {
        Err(Error::Step { step, message }) => {
            assert_eq!((step.as_str(), message.as_str()), ("flaky", "fail 3"));
        }
        other => panic!("expected the step error, got {other:?}"),
    }
    assert_eq!(seen(&wf.attempts), [1, 2, 3]);
    let events = run.events().await?;
    assert_eq!(
        step_failures(&events)[2].2,
        None,
        "the last attempt is final"
    );
    assert_eq!(clock.next_due(), None, "no timer left behind");
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// A step whose first two attempts fail; the third blocks for ever on the first
/// host (`block`), and fails on the next one.
#[derive(Clone)]
struct LastAttempt {
    block: bool,
    gate: Arc<Gate>,
    attempts: Attempts,
}

impl Workflow for LastAttempt {
    const NAME: &'static str = "last-attempt";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = RetryPolicy::default()
            .with_max_attempts(3)
            .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
        ctx.step_with("pay", policy, |s| async move {
            self.attempts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(s.attempt());
            if s.attempt() < 3 {
                return Err::<u32, _>(format!("fail {}", s.attempt()));
            }
            if self.block {
                self.gate.wait().await;
            }
            Err(format!("fail {} after the restart", s.attempt()))
        })
        .await
    }
}

/// Ports DBOS `tests/test_failures.py::test_recovery_during_retries`: the
/// process goes away while a step's last allowed attempt is running; recovery
/// runs that attempt again, as the same (third) attempt, and when it fails the
/// step has failed for good: the crash granted no fourth attempt, and the run's
/// failure records three attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_the_last_attempt_grants_no_extra_attempt() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Attempts::default();
    let wf = LastAttempt {
        block: true,
        gate: Arc::new(Gate::new()),
        attempts: attempts.clone(),
    };
    let host = common::hosts::open(dir.path(), wf).await?;
    host.start::<LastAttempt>("p", ()).await?;
    within(LIMIT, "the third attempt", async {
        while seen(&attempts).len() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    within(LIMIT, "the shutdown mid-attempt", host.shutdown()).await??;
    assert_eq!(seen(&attempts), [1, 2, 3]);

    let wf = LastAttempt {
        block: false,
        gate: Arc::new(Gate::new()),
        attempts: attempts.clone(),
    };
    let host = common::hosts::open(dir.path(), wf).await?;
    let run = host.handle::<LastAttempt>("p");
    match within(LIMIT, "the failure", run.result()).await? {
        Err(Error::Step { step, message }) => {
            assert_eq!(
                (step.as_str(), message.as_str()),
                ("pay", "fail 3 after the restart")
            );
        }
        other => panic!("expected the step error, got {other:?}"),
    }
    assert_eq!(
        seen(&attempts),
        [1, 2, 3, 3],
        "attempt 3 again, no attempt 4"
    );
    let events = run.events().await?;
    let failed: Vec<u32> = step_failures(&events).iter().map(|f| f.0).collect();
    assert_eq!(failed, [1, 2, 3]);
    assert_eq!(
        recorded_attempts(&events),
        ["fail 1", "fail 2", "fail 3 after the restart"]
    );
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// One slow step behind a gate.
#[derive(Clone)]
struct Slow {
    bodies: Counter,
    gate: Arc<Gate>,
}

impl Workflow for Slow {
    const NAME: &'static str = "slow";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, x: u32) -> reel::Result<u32> {
        let v = ctx
            .step("work", |_| async {
                self.bodies.bump();
                self.gate.wait().await;
                Ok::<_, String>(x * 10)
            })
            .await?;
        Ok(v + 1)
    }
}

/// Ports DBOS `tests/test_dbos.py::test_duplicate_recovery_does_not_rerun_running_workflow`
/// (with `::test_start_workflow`'s idempotent start on one id): while a run's
/// step body is under way, a second start of its id (with another input) and a
/// `retry()` (reel's "recover it now") run neither the handler's step nor the
/// run a second time: the body runs once, and the run ends with the first
/// input's result, also for a start after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_and_a_retry_mid_step_run_nothing_twice() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let wf = Slow {
        bodies: Counter::default(),
        gate: Arc::new(Gate::new()),
    };
    let host = common::hosts::open(dir.path(), wf.clone()).await?;
    let run = host.start::<Slow>("s", 1).await?;
    within(LIMIT, "the body starts", async {
        while wf.bodies.get() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    let again = host.start::<Slow>("s", 2).await?;
    match run.retry().await {
        Err(Error::InvalidState { action, .. }) => assert_eq!(action, "retry"),
        other => panic!("retry of a running run: expected InvalidState, got {other:?}"),
    }
    assert_eq!(run.status().await?, RunStatus::Running);
    wf.gate.open();
    assert_eq!(within(LIMIT, "the result", again.result()).await??, 11);
    assert_eq!(run.result().await?, 11);
    assert_eq!(wf.bodies.get(), 1, "the step body ran twice");
    let starts = run
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, Event::StepStarted { .. }))
        .count();
    assert_eq!(starts, 1);
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), wf.clone()).await?;
    let run = host.start::<Slow>("s", 3).await?;
    assert_eq!(run.result().await?, 11);
    host.shutdown().await?;
    assert_eq!(wf.bodies.get(), 1);
    Ok(())
}

// ---------------------------------------------------------------------------

/// Records a step, then panics outside any step until `fixed` is set.
#[derive(Clone, Default)]
struct Poison {
    fixed: Arc<AtomicBool>,
    executions: Counter,
    steps: Counter,
}

impl Workflow for Poison {
    const NAME: &'static str = "poison";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let v = ctx
            .step("before", |_| async {
                self.steps.bump();
                Ok::<_, String>(7)
            })
            .await?;
        self.executions.bump();
        if !self.fixed.load(Ordering::SeqCst) {
            panic!("poison message");
        }
        Ok(v)
    }
}

async fn open_poison(path: &std::path::Path, wf: Poison) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(wf)
        .restart_limit(2, Duration::from_secs(60))
        .build()
        .await
}

fn expect_crashed(r: reel::Result<u32>) {
    match r {
        Err(Error::Crashed(m)) => assert!(m.contains("poison message"), "{m}"),
        other => panic!("expected Crashed, got {other:?}"),
    }
}

/// Ports DBOS `tests/test_failures.py::test_dead_letter_queue`: a workflow that
/// keeps crashing is moved aside after its recovery attempts (reel parks it with
/// `Error::Crashed` past the restart limit); starting its id again does not run
/// it again but reports the parked state ("a direct call does not re-run the
/// body"); once the fix is deployed (a host opened on the store) it completes,
/// with its recorded step not run again; and starts of the completed id return
/// its result and run nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_run_is_parked_until_a_host_with_the_fix_opens() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let wf = Poison::default();
    let host = open_poison(dir.path(), wf.clone()).await?;
    let run = host.start::<Poison>("dlq", ()).await?;
    expect_crashed(within(LIMIT, "the park", run.result()).await?);
    assert_eq!(run.status().await?.kind(), StatusKind::Parked);
    let executions = wf.executions.get();
    assert!(executions >= 2, "restarted before parking: {executions}");

    let again = host.start::<Poison>("dlq", ()).await?;
    expect_crashed(again.result().await);
    assert_eq!(again.status().await?.kind(), StatusKind::Parked);
    host.shutdown().await?;
    assert_eq!(
        wf.executions.get(),
        executions,
        "a start of a parked run's id ran it again"
    );

    wf.fixed.store(true, Ordering::SeqCst);
    let host = open_poison(dir.path(), wf.clone()).await?;
    let run = host.handle::<Poison>("dlq");
    assert_eq!(within(LIMIT, "the fixed run", run.result()).await??, 7);
    assert_eq!(run.status().await?, RunStatus::Completed);
    let done = wf.executions.get();
    for _ in 0..6 {
        let h = host.start::<Poison>("dlq", ()).await?;
        assert_eq!(h.result().await?, 7);
    }
    host.shutdown().await?;
    assert_eq!(
        wf.executions.get(),
        done,
        "starts of a completed run ran it"
    );
    assert_eq!(wf.steps.get(), 1, "the recorded step ran again");
    Ok(())
}

// ---------------------------------------------------------------------------

/// Calls `step_one` or `step_two`, as `flag` says.
#[derive(Clone, Default)]
struct Flip {
    flag: Arc<AtomicBool>,
    one: Counter,
    two: Counter,
}

impl Workflow for Flip {
    const NAME: &'static str = "flip";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        if !self.flag.load(Ordering::SeqCst) {
            ctx.step("step_one", |_| async {
                self.one.bump();
                Ok::<_, String>("one".to_owned())
            })
            .await
        } else {
            ctx.step("step_two", |_| async {
                self.two.bump();
                Ok::<_, String>("two".to_owned())
            })
            .await
        }
    }
}

/// Ports DBOS `tests/test_failures.py::test_nondeterministic_workflow`: a run
/// completes through `step_one`; the code changes to call `step_two` instead,
/// and a fork of the run cut after its step replays against the new code. The
/// fork meets `step_two` where its log has `step_one` (DBOS's
/// `DBOSUnexpectedStepError`): it is parked with `ReplayDivergence` naming both,
/// runs no body, and the original run is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_replayed_against_changed_code_diverges() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let wf = Flip::default();
    let host = common::hosts::open(dir.path(), wf.clone()).await?;
    let run = host.start::<Flip>("nd", ()).await?;
    assert_eq!(within(LIMIT, "the run", run.result()).await??, "one");
    let before = run.events().await?;
    let records = run.records().await?;
    let cut = records
        .iter()
        .find(|r| matches!(r.event, Event::RunCompleted { .. }))
        .map(|r| r.seq)
        .ok_or_else(|| anyhow::anyhow!("no end in {records:?}"))?;

    wf.flag.store(true, Ordering::SeqCst);
    let fork = host.fork("nd", cut, "nd-fork").await?;
    match within(LIMIT, "the fork's end", fork.result::<String>()).await? {
        Err(Error::ReplayDivergence {
            expected, found, ..
        }) => {
            assert!(expected.contains("step_one"), "{expected}");
            assert!(found.contains("step_two"), "{found}");
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
    assert_eq!(fork.status().await?.kind(), StatusKind::Parked);
    assert_eq!((wf.one.get(), wf.two.get()), (1, 0));
    assert_eq!(run.status().await?, RunStatus::Completed);
    assert_eq!(run.events().await?, before);
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// DBOS's `exception_workflow`: two steps that fail (caught by the handler,
/// same text), then the handler re-raises the first step's error.
#[derive(Clone, Default)]
struct Raises {
    executions: Counter,
    first: Counter,
    second: Counter,
}

impl Workflow for Raises {
    const NAME: &'static str = "raises";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        self.executions.bump();
        let err1 = ctx
            .step("exception_transaction", |_| async {
                self.first.bump();
                Err::<(), _>(StepError::non_retryable("test error"))
            })
            .await
            .expect_err("the step fails");
        let err2 = ctx
            .step("exception_step", |_| async {
                self.second.bump();
                Err::<(), _>(StepError::non_retryable("test error"))
            })
            .await
            .expect_err("the step fails");
        match (&err1, &err2) {
            (Error::Step { message: m1, .. }, Error::Step { message: m2, .. }) => {
                assert_eq!(m1, m2);
            }
            other => panic!("expected two step errors, got {other:?}"),
        }
        Err(err1)
    }
}

fn expect_test_error(r: reel::Result<()>) {
    match r {
        Err(Error::Step { step, message }) => {
            assert_eq!(
                (step.as_str(), message.as_str()),
                ("exception_transaction", "test error")
            );
        }
        other => panic!("expected the first step's error, got {other:?}"),
    }
}

/// Ports DBOS `tests/test_dbos.py::test_exception_workflow`: a handler catches
/// two failing steps and fails with the first one's error; the run's result is
/// that error, typed; starting its id again (also after a restart) "surfaces
/// its recorded error, not a new run": the handler and the step bodies ran
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_started_again_returns_its_recorded_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let wf = Raises::default();
    let host = common::hosts::open(dir.path(), wf.clone()).await?;
    let run = host.start::<Raises>("ex", ()).await?;
    expect_test_error(within(LIMIT, "the failure", run.result()).await?);
    assert!(matches!(run.status().await?, RunStatus::Failed { .. }));
    let again = host.start::<Raises>("ex", ()).await?;
    expect_test_error(again.result().await);
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), wf.clone()).await?;
    let again = host.start::<Raises>("ex", ()).await?;
    expect_test_error(within(LIMIT, "the failure", again.result()).await?);
    host.shutdown().await?;
    assert_eq!(
        (wf.executions.get(), wf.first.get(), wf.second.get()),
        (1, 1, 1)
    );
    Ok(())
}
