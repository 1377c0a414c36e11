//! Acceptance, ported from peers' own test suites: many runs continuing as new at
//! once, one run with a long history of parallel timers and buffered signals,
//! a join of many branches replayed across restarts, step bodies that panic, and
//! a saga's compensation. Each test names the peer test it ports.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use futures::future::join_all;
use reel::testing::TestClock;
use reel::{Clock, Ctx, Error, Event, Host, RetryPolicy, RunStatus, StepError, Workflow};

const LIMIT: Duration = Duration::from_secs(60);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn count(events: &[Event], kind: &str) -> usize {
    events.iter().filter(|e| e.kind() == kind).count()
}

/// How often each named body ran.
#[derive(Clone, Default)]
struct Tally(Arc<Mutex<BTreeMap<String, u32>>>);
impl Tally {
    fn bump(&self, key: String) {
        *self.0.lock().expect("tally lock").entry(key).or_default() += 1;
    }
    fn snapshot(&self) -> BTreeMap<String, u32> {
        self.0.lock().expect("tally lock").clone()
    }
}

// ---------------------------------------------------------------------------
// Many runs continuing as new at once.
// ---------------------------------------------------------------------------

/// Sleeps 500 ms, then continues as new with `n + 1` while `n < 5`.
struct Cycler;
impl Workflow for Cycler {
    const NAME: &'static str = "cycler";
    type Input = u8;
    type Output = u8;
    async fn run(&self, ctx: Ctx, n: u8) -> reel::Result<u8> {
        ctx.sleep(Duration::from_millis(500)).await?;
        if n < 5 {
            return ctx.continue_as_new::<Cycler>(n + 1).await;
        }
        Ok(n)
    }
}

/// Ports Temporal sdk-core `crates/sdk-core/tests/integ_tests/workflow_tests/continue_as_new.rs::continue_as_new_multiple_concurrent`
/// (20 runs, each sleeping then continuing as new until its counter reaches 5,
/// with a workflow cache of 5 there; here runs passivate after 1 ms, so most
/// wake-ups replay from disk): every run ends with 5, in its fifth segment, each
/// segment holding one fired timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_runs_continue_as_new_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .passivate_after(Duration::from_millis(1))
        .register(Cycler)
        .build()
        .await?;
    let mut runs = Vec::new();
    for i in 1..=20 {
        runs.push(host.start::<Cycler>(&format!("cycler-{i}"), 1).await?);
    }
    let outs = within(
        LIMIT,
        "every result",
        join_all(runs.iter().map(|r| r.result())),
    )
    .await?;
    for (run, out) in runs.iter().zip(outs) {
        assert_eq!(out?, 5, "{}", run.id());
        assert_eq!(run.info().await?.segment, 4, "{}", run.id());
        let events = run.events().await?;
        assert_eq!(count(&events, "RunStarted"), 5, "{}: {events:?}", run.id());
        assert_eq!(count(&events, "TimerFired"), 5, "{}: {events:?}", run.id());
        assert_eq!(
            count(&events, "RunCompleted"),
            1,
            "{}: {events:?}",
            run.id()
        );
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A long history of parallel timers, with signals nobody waits for.
// ---------------------------------------------------------------------------

const ROUNDS: usize = 60;
const TIMERS: usize = 100;

/// `ROUNDS` rounds of `TIMERS` parallel 100 ms timers, joined.
struct ManyParallelTimers;
impl Workflow for ManyParallelTimers {
    const NAME: &'static str = "many-parallel-timers";
    type Input = ();
    type Output = usize;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<usize> {
        let mut fired = 0;
        for _ in 0..ROUNDS {
            let timers: Vec<_> = (0..TIMERS)
                .map(|_| ctx.sleep(Duration::from_millis(100)))
                .collect();
            for r in join_all(timers).await {
                r?;
                fired += 1;
            }
        }
        Ok(fired)
    }
}

/// Ports Temporal sdk-core `crates/sdk-core/tests/heavy_tests.rs::can_paginate_long_history`
/// (120 rounds of 100 parallel timers, no workflow cache, signals nobody waits
/// for arriving meanwhile), at half the rounds: the run passivates after every
/// round, so each wake-up replays a log of thousands of events with signals
/// buffered in it; it ends with every timer fired, and its full log replays to
/// the same output after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_history_of_parallel_timers_and_buffered_signals() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let open = || {
        Host::builder()
            .path(dir.path())
            .clock(clock.clone())
            .passivate_after(Duration::from_millis(1))
            .register(ManyParallelTimers)
            .build()
    };
    let host = open().await?;
    let run = host.start::<ManyParallelTimers>("long-history", ()).await?;
    let sender = {
        let run = run.clone();
        tokio::spawn(async move {
            let mut sent = 0u32;
            for k in 0..200u32 {
                match run.signal("sig", &k, &format!("sig-{k}")).await {
                    Ok(()) => sent += 1,
                    Err(Error::RunFinished(_)) => break,
                    Err(e) => return Err(e),
                }
                if k % 10 == 9 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            Ok(sent)
        })
    };
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(out, ROUNDS * TIMERS);
    let sent = sender.await??;
    let events = run.events().await?;
    assert_eq!(count(&events, "TimerFired"), ROUNDS * TIMERS);
    assert_eq!(count(&events, "SignalReceived"), sent as usize);
    assert_eq!(
        clock.now(),
        t0() + Duration::from_millis(100) * ROUNDS as u32
    );
    host.shutdown().await?;

    let host = open().await?;
    let run = host.handle::<ManyParallelTimers>("long-history");
    assert_eq!(run.result().await?, out);
    let replayed = reel::testing::replay(ManyParallelTimers, &run.events().await?).await?;
    assert_eq!(replayed, reel::testing::Replayed::Completed(out));
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A join of many branches, each a step, a sleep and a step, across restarts.
// ---------------------------------------------------------------------------

const BLOCKS: u64 = 8;

/// `BLOCKS` branches joined: branch `i` runs step `work` (its body takes
/// `(BLOCKS - i) * 5` ms of real time, so the last branch's finishes first),
/// sleeps `i % 3 + 1` s, then runs step `after`.
struct JoinMany {
    tally: Tally,
}
impl Workflow for JoinMany {
    const NAME: &'static str = "join-many";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let blocks = (0..BLOCKS).map(|i| {
            let ctx = ctx.clone();
            let tally = self.tally.clone();
            async move {
                let delay = (BLOCKS - i) * 5;
                let work = ctx
                    .step("work", |_| async {
                        tally.bump(format!("work-{i}"));
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        Ok::<_, String>(format!("done:{delay}"))
                    })
                    .await?;
                ctx.sleep(Duration::from_secs(i % 3 + 1)).await?;
                let after = ctx
                    .step("after", |_| async {
                        tally.bump(format!("after-{i}"));
                        Ok::<_, String>(i)
                    })
                    .await?;
                reel::Result::Ok(format!("block{i}:{work}:{after}"))
            }
        });
        join_all(blocks).await.into_iter().collect()
    }
}

/// Ports duroxide `tests/async_block_tests.rs::async_block_join_many` (branches
/// joined whose activities finish in the reverse of their start order; results in
/// branch order), with a sleep and a second step in each branch and the host
/// restarted after each second of virtual time: the result is in branch order,
/// every body ran once, and the final log replays to the same result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_of_many_branches_replays_across_restarts() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let tally = Tally::default();
    let open = || {
        Host::builder()
            .path(dir.path())
            .clock(clock.clone())
            .register(JoinMany {
                tally: tally.clone(),
            })
            .build()
    };
    let host = open().await?;
    let run = host.start::<JoinMany>("join-many", ()).await?;
    within(LIMIT, "the sleeps", run.wait_until_suspended()).await??;
    host.shutdown().await?;
    let mut host = open().await?;
    for _ in 0..2 {
        let run = host.handle::<JoinMany>("join-many");
        within(LIMIT, "the next sleeps", run.wait_until_suspended()).await??;
        clock.advance(Duration::from_secs(1));
        // Let the due branches run their `after` step before the restart.
        let fired_by = count(&run.events().await?, "StepCompleted");
        within(LIMIT, "the due branches", async {
            loop {
                let events = run.events().await?;
                let status = run.status().await?;
                if count(&events, "StepCompleted") > fired_by
                    && matches!(status, RunStatus::Suspended { .. })
                {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await??;
        host.shutdown().await?;
        host = open().await?;
    }
    let run = host.handle::<JoinMany>("join-many");
    within(LIMIT, "the last sleeps", run.wait_until_suspended()).await??;
    clock.advance(Duration::from_secs(1));
    let out = within(LIMIT, "the result", run.result()).await??;
    let expected: Vec<String> = (0..BLOCKS)
        .map(|i| format!("block{i}:done:{}:{i}", (BLOCKS - i) * 5))
        .collect();
    assert_eq!(out, expected);
    let ran = tally.snapshot();
    assert_eq!(ran.len(), 2 * BLOCKS as usize, "{ran:?}");
    assert!(ran.values().all(|n| *n == 1), "a body ran twice: {ran:?}");
    let replayed = reel::testing::replay(
        JoinMany {
            tally: Tally::default(),
        },
        &run.events().await?,
    )
    .await?;
    assert_eq!(replayed, reel::testing::Replayed::Completed(out));
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A panicking step body is a failed attempt.
// ---------------------------------------------------------------------------

/// One step under a policy of two attempts whose body panics on its first.
struct PanicOnce;
impl Workflow for PanicOnce {
    const NAME: &'static str = "panic-once";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = RetryPolicy::default().with_max_attempts(2);
        ctx.step_with("panic_once", policy, |s| async move {
            if s.attempt() == 1 {
                panic!("panic once");
            }
            Ok::<_, String>(s.attempt())
        })
        .await
    }
}

/// Ports Temporal sdk-core `crates/sdk-core/tests/integ_tests/workflow_tests/activities.rs::activity_panics_are_retryable`:
/// a step body that panics on its first attempt is retried (DESIGN: "A panicking
/// body is a failed attempt") and the run completes with the second attempt's
/// number; the failed attempt is recorded with the panic's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_body_that_panics_once_is_retried() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let host = common::hosts::open_on(dir.path(), &clock, PanicOnce).await?;
    let run = host.start::<PanicOnce>("panic-once", ()).await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 2);
    let events = run.events().await?;
    let failed: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::StepFailed { attempt, error, .. } => Some((*attempt, error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(failed[0].0, 1);
    assert!(failed[0].1.contains("panic once"), "{failed:?}");
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A saga: a failed step is compensated.
// ---------------------------------------------------------------------------

/// Debit, ship, credit back when shipping fails for good; then waits for `ack`.
struct Saga {
    tally: Tally,
}
impl Workflow for Saga {
    const NAME: &'static str = "saga";
    type Input = (String, String);
    type Output = String;
    async fn run(&self, ctx: Ctx, (debit, ship): (String, String)) -> reel::Result<String> {
        let tally = &self.tally;
        let deb = ctx
            .step("Debit", |_| async {
                tally.bump("Debit".into());
                if debit == "fail" {
                    Err(StepError::non_retryable("insufficient"))
                } else {
                    Ok(format!("debited:{debit}"))
                }
            })
            .await;
        let out = match deb {
            Err(Error::Step { message, .. }) => format!("debit_failed:{message}"),
            Err(e) => return Err(e),
            Ok(deb) => {
                let shipped = ctx
                    .step("Ship", |_| async {
                        tally.bump("Ship".into());
                        if ship == "fail_ship" {
                            Err(StepError::non_retryable("courier_down"))
                        } else {
                            Ok("shipped".to_string())
                        }
                    })
                    .await;
                match shipped {
                    Ok(_) => "ok".to_string(),
                    Err(Error::Step { .. }) => {
                        let cred = ctx
                            .step("Credit", |_| async {
                                tally.bump("Credit".into());
                                Ok::<_, String>(format!("credited:{deb}"))
                            })
                            .await?;
                        format!("rolled_back:{cred}")
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let _: () = ctx.wait_for_signal("ack").await?;
        Ok(out)
    }
}

/// Ports duroxide `tests/errors_tests.rs::error_handling_compensation_on_ship_failure`,
/// `error_handling_success_path` and `error_handling_early_debit_failure`: a
/// step that fails for good is caught and compensated by another step; a restart
/// after the compensation runs no body again and the run completes with the
/// compensated result; the success and early-failure paths alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_is_compensated_and_nothing_reruns_after_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let tally = Tally::default();
    let open = || {
        Host::builder()
            .path(dir.path())
            .register(Saga {
                tally: tally.clone(),
            })
            .build()
    };
    let cases = [
        (
            "rollback",
            ("ok", "fail_ship"),
            "rolled_back:credited:debited:ok",
        ),
        ("success", ("ok", "ship"), "ok"),
        ("early", ("fail", "ship"), "debit_failed:insufficient"),
    ];
    let host = open().await?;
    for (id, (debit, ship), _) in cases {
        let run = host
            .start::<Saga>(id, (debit.to_string(), ship.to_string()))
            .await?;
        within(LIMIT, "the wait on ack", run.wait_until_suspended()).await??;
    }
    let before = tally.snapshot();
    host.shutdown().await?;
    let host = open().await?;
    for (id, _, expected) in cases {
        let run = host.handle::<Saga>(id);
        run.signal("ack", &(), "ack-1").await?;
        assert_eq!(within(LIMIT, "the result", run.result()).await??, expected);
    }
    assert_eq!(
        tally.snapshot(),
        before,
        "a body ran again after the restart"
    );
    let expected_bodies: BTreeMap<String, u32> = [("Debit", 3), ("Ship", 2), ("Credit", 1)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert_eq!(before, expected_bodies);
    host.shutdown().await?;
    Ok(())
}
