//! Every primitive end to end through the public API, on a real store.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use reel::{Ctx, Error, Host, RetryPolicy, RunStatus, Workflow};

struct Checkout {
    charges: Arc<AtomicU32>,
}

impl Workflow for Checkout {
    const NAME: &'static str = "checkout";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        let charges = self.charges.clone();
        let charge = ctx
            .step("charge", |s| {
                let charges = charges.clone();
                async move {
                    charges.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(format!("{cents}:{}", s.idempotency_key()))
                }
            })
            .await?;
        ctx.sleep(Duration::from_millis(20)).await?;
        let paid: String = ctx.wait_for_signal("payment").await?;
        let review = ctx.approval("review").await?;
        let id = ctx.uuid().await?;
        let _now = ctx.now().await?;
        let _r = ctx.random_u64().await?;
        Ok(format!(
            "{charge}|{paid}|{}|{}",
            review.approved,
            id.get_version_num()
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkout_runs_every_primitive() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let charges = Arc::new(AtomicU32::new(0));
    let host = common::hosts::open(
        dir.path(),
        Checkout {
            charges: charges.clone(),
        },
    )
    .await?;
    let run = host.start::<Checkout>("order-1", 1999).await?;
    run.signal("payment", "paid", "evt-1").await?;
    run.signal("payment", "paid-again", "evt-1").await?; // deduplicated
    run.approve("review", true, Some("ok".into())).await?;
    let out = run.result().await?;
    assert_eq!(out, "1999:order-1/charge|paid|true|4");
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    assert_eq!(run.status().await?, RunStatus::Completed);
    let signals = run
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, reel::Event::SignalReceived { .. }))
        .count();
    assert_eq!(signals, 2, "payment once (deduplicated) + approval");
    assert!(matches!(
        run.signal("payment", "x", "evt-2").await,
        Err(Error::RunFinished(_))
    ));
    host.shutdown().await?;
    Ok(())
}

struct Flaky {
    attempts: Arc<AtomicU32>,
    succeed_on: u32,
}

impl Workflow for Flaky {
    const NAME: &'static str = "flaky";
    type Input = ();
    type Output = u32;
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(20),
            multiplier: 2.0,
        }
    }
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let attempts = self.attempts.clone();
        let succeed_on = self.succeed_on;
        ctx.step("call", |s| {
            let attempts = attempts.clone();
            async move {
                attempts.fetch_add(1, Ordering::SeqCst);
                if s.attempt() == 2 {
                    panic!("boom on attempt 2");
                }
                if s.attempt() < succeed_on {
                    Err(format!("attempt {} failed", s.attempt()))
                } else {
                    Ok(s.attempt())
                }
            }
        })
        .await
    }
}

/// A host over a fresh store running a `Flaky` that succeeds on attempt
/// `succeed_on`; returns the store's directory, the attempt count and the host.
async fn flaky_host(succeed_on: u32) -> anyhow::Result<(tempfile::TempDir, Arc<AtomicU32>, Host)> {
    let dir = tempfile::tempdir()?;
    let attempts = Arc::new(AtomicU32::new(0));
    let host = common::hosts::open(
        dir.path(),
        Flaky {
            attempts: attempts.clone(),
            succeed_on,
        },
    )
    .await?;
    Ok((dir, attempts, host))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_with_durable_backoff_and_exhaustion() -> anyhow::Result<()> {
    let (_dir, attempts, host) = flaky_host(3).await?;
    let ok = host.start::<Flaky>("flaky-ok", ()).await?;
    assert_eq!(ok.result().await?, 3);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    host.shutdown().await?;

    let (_dir, attempts, host) = flaky_host(9).await?;
    let bad = host.start::<Flaky>("flaky-bad", ()).await?;
    match bad.result().await {
        Err(Error::Step { step, message }) => {
            assert_eq!(step, "call");
            assert_eq!(message, "attempt 3 failed");
        }
        other => panic!("expected a step error, got {other:?}"),
    }
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert!(matches!(bad.status().await?, RunStatus::Failed { .. }));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn the_in_memory_backend_runs_the_same_workflows() -> anyhow::Result<()> {
    let charges = Arc::new(AtomicU32::new(0));
    let host = Host::builder()
        .in_memory()
        .register(Checkout {
            charges: charges.clone(),
        })
        .build()
        .await?;
    let run = host.start::<Checkout>("mem-1", 5).await?;
    run.signal("payment", "paid", "evt-1").await?;
    run.approve("review", false, None).await?;
    assert_eq!(run.result().await?, "5:mem-1/charge|paid|false|4");
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    host.shutdown().await?;
    Ok(())
}
