//! A run survives `shutdown` + a new `Host` on the same path at every kind of wait,
//! and no recorded step runs again (invariants 2 and 7).

mod common;

use std::time::Duration;

use common::Counter;
use reel::testing::TestClock;
use reel::{Ctx, Host, RetryPolicy, RunStatus, Workflow};

#[derive(Clone)]
struct Journey {
    steps: Counter,
    flaky: Counter,
}

struct Child;
impl Workflow for Child {
    const NAME: &'static str = "child";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(n + go)
    }
}

impl Workflow for Journey {
    const NAME: &'static str = "journey";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let steps = self.steps.clone();
        let a = ctx
            .step("a", |_| {
                let steps = steps.clone();
                async move { Ok::<_, String>(steps.bump()) }
            })
            .await?;
        ctx.sleep(Duration::from_millis(30)).await?;
        let sig: String = ctx.wait_for_signal("sig").await?;
        let approval = ctx.approval("boss").await?;
        let timed: Option<u32> = ctx
            .wait_for_signal_timeout("late", Duration::from_millis(30))
            .await?;
        let flaky = self.flaky.clone();
        let retried = ctx
            .step_with(
                "flaky",
                RetryPolicy {
                    max_attempts: 2,
                    initial_backoff: Duration::from_millis(40),
                    max_backoff: Duration::from_millis(40),
                    multiplier: 1.0,
                },
                |s| {
                    let flaky = flaky.clone();
                    async move {
                        flaky.bump();
                        if s.attempt() == 1 {
                            Err("first attempt fails")
                        } else {
                            Ok(s.attempt())
                        }
                    }
                },
            )
            .await?;
        let child = ctx.child::<Child>("journey-child", 10).await?;
        Ok(format!(
            "{a}|{sig}|{}|{timed:?}|{retried}|{child}",
            approval.approved
        ))
    }
}

async fn open(dir: &std::path::Path, j: &Journey, clock: &TestClock) -> reel::Result<Host> {
    common::hosts::open_two_on(dir, clock, j.clone(), Child).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_survives_restart_at_every_wait() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let j = Journey {
        steps: Counter::default(),
        flaky: Counter::default(),
    };
    // The run's 30-40 ms timers come due only when the test moves this clock.
    let clock = TestClock::new(std::time::SystemTime::now());

    // Wait 1: the durable sleep. Shut down while it is pending.
    let host = open(dir.path(), &j, &clock).await?;
    let run = host.start::<Journey>("j", ()).await?;
    let s = run.wait_until_suspended().await?;
    assert_waits_on(&s, "timer");
    host.shutdown().await?;

    // The timer comes due while the host is down (simulated downtime); it fires at
    // once on restart, and the run moves on to wait for `sig`.
    downtime(&clock);
    let host = open(dir.path(), &j, &clock).await?;
    let run = host.handle::<Journey>("j");
    let s = run.wait_until_suspended().await?;
    assert_waits_on(&s, "`sig`");
    host.shutdown().await?;

    // Wait 2: a signal, delivered to a fresh host. Wait 3: the approval.
    let host = open(dir.path(), &j, &clock).await?;
    let run = host.handle::<Journey>("j");
    run.signal("sig", "hello", "s-1").await?;
    let s = run.wait_until_suspended().await?;
    assert_waits_on(&s, "approval `boss`");
    host.shutdown().await?;

    // Wait 4: a timed wait whose deadline passes while the host is down.
    let host = open(dir.path(), &j, &clock).await?;
    let run = host.handle::<Journey>("j");
    run.approve("boss", true, None).await?;
    let s = run.wait_until_suspended().await?;
    assert_waits_on(&s, "`late`");
    host.shutdown().await?;
    downtime(&clock);

    // Wait 5: the backoff timer of a failed attempt, due while down.
    let host = open(dir.path(), &j, &clock).await?;
    let s = host.handle::<Journey>("j").wait_until_suspended().await?;
    assert_waits_on(&s, "retry of step `flaky`");
    host.shutdown().await?;
    downtime(&clock);

    // Wait 6: the child run, itself waiting for a signal.
    let host = open(dir.path(), &j, &clock).await?;
    let s = host.handle::<Journey>("j").wait_until_suspended().await?;
    assert_waits_on(&s, "child run");
    let child = host.handle::<Child>("journey-child");
    child.wait_until_suspended().await?;
    host.shutdown().await?;

    let host = open(dir.path(), &j, &clock).await?;
    host.handle::<Child>("journey-child")
        .signal("go", &5u32, "go-1")
        .await?;
    let out = host.handle::<Journey>("j").result().await?;
    assert_eq!(out, "1|hello|true|None|2|15");
    assert_eq!(j.steps.get(), 1, "step `a` ran once across seven hosts");
    assert_eq!(j.flaky.get(), 2, "one failed attempt, one success");
    host.shutdown().await?;
    Ok(())
}

/// Asserts `s` is a wait on something whose description contains `what`.
fn assert_waits_on(s: &RunStatus, what: &str) {
    assert!(
        matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains(what)),
        "{s:?}"
    );
}

/// Time passing while no host runs, so that the run's 30-40 ms timers come due.
fn downtime(clock: &TestClock) {
    clock.advance(Duration::from_secs(60));
}
