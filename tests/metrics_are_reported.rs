//! reel reports its metrics through the `metrics` facade: runs started and ended
//! by status, parked runs, step attempts by outcome with their durations, group
//! commits and their sizes, live runs; a recorder the service installs sees them.

mod common;

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use reel::{Ctx, Error, RetryPolicy, Workflow};

/// A step that fails once then succeeds; fails the run when asked.
struct Work;
impl Workflow for Work {
    const NAME: &'static str = "work";
    type Input = bool;
    type Output = u32;
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            initial_backoff: Duration::from_millis(1),
            ..RetryPolicy::default()
        }
    }
    async fn run(&self, ctx: Ctx, fail: bool) -> reel::Result<u32> {
        let v: u32 = ctx
            .step("flaky", |s| async move {
                if s.attempt() == 1 {
                    Err("not yet".to_owned())
                } else {
                    Ok(7)
                }
            })
            .await?;
        if fail {
            return Err(Error::failed("asked to"));
        }
        Ok(v)
    }
}

/// Waits for a signal.
struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal("go").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorder_sees_runs_steps_and_commits() -> anyhow::Result<()> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install()?;

    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Work, Waiter).await?;
    host.start::<Work>("ok", false).await?.result().await?;
    assert!(
        host.start::<Work>("bad", true)
            .await?
            .result()
            .await
            .is_err()
    );
    let w = host.start::<Waiter>("w", ()).await?;
    w.wait_until_suspended().await?;
    w.cancel("done").await?;
    host.shutdown().await?;

    let mut counters = std::collections::HashMap::new();
    let mut histograms = std::collections::HashMap::new();
    let mut gauges = std::collections::HashSet::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{:?}", key.key().name(), labels);
        match value {
            DebugValue::Counter(n) => {
                counters.insert(name, n);
            }
            DebugValue::Histogram(v) => {
                histograms.insert(name, v.len());
            }
            DebugValue::Gauge(_) => {
                gauges.insert(name);
            }
        }
    }
    let c = |name: &str| counters.get(name).copied().unwrap_or(0);
    assert_eq!(c("reel_runs_started_total[]"), 3, "{counters:?}");
    assert_eq!(
        c("reel_runs_ended_total[\"status=completed\"]"),
        1,
        "{counters:?}"
    );
    assert_eq!(
        c("reel_runs_ended_total[\"status=failed\"]"),
        1,
        "{counters:?}"
    );
    assert_eq!(
        c("reel_runs_ended_total[\"status=cancelled\"]"),
        1,
        "{counters:?}"
    );
    assert_eq!(
        c("reel_step_attempts_total[\"outcome=error\"]"),
        2,
        "{counters:?}"
    );
    assert_eq!(
        c("reel_step_attempts_total[\"outcome=ok\"]"),
        2,
        "{counters:?}"
    );
    assert_eq!(
        histograms.get("reel_step_seconds[]"),
        Some(&4),
        "{histograms:?}"
    );
    assert!(
        histograms
            .get("reel_commit_seconds[]")
            .is_some_and(|n| *n > 0)
    );
    assert!(
        histograms
            .get("reel_commit_appends[]")
            .is_some_and(|n| *n > 0)
    );
    assert!(
        histograms
            .get("reel_activation_seconds[]")
            .is_some_and(|n| *n >= 3)
    );
    assert!(gauges.contains("reel_live_runs[]"), "{gauges:?}");
    Ok(())
}
