//! `Host::fork` at every sequence number of a finished run's log (as an operator
//! trying cuts would, like DBOS's `fork_workflow(start_step)` on every step): each
//! cut is either refused with `InvalidCut` (writing nothing) or makes a run that
//! replays its prefix without divergence and, given the signal it may still wait
//! for, completes with the same output as the original; steps below the cut are
//! not run again. Cuts 0 and past the end are refused. The original is untouched.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Two steps around a short sleep, a recorded value, a signal wait and a third
/// step in a join with a second sleep.
struct Mixed {
    bodies: Arc<AtomicU32>,
}
impl Workflow for Mixed {
    const NAME: &'static str = "mixed";
    type Input = u32;
    type Output = (u32, u32, u64);
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<(u32, u32, u64)> {
        let b = self.bodies.clone();
        let a: u32 = ctx
            .step("a", move |_| {
                b.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, String>(n + 1) }
            })
            .await?;
        ctx.sleep(Duration::from_millis(1)).await?;
        let r = ctx.random_u64().await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        let b = self.bodies.clone();
        let (c, ()) = futures::try_join!(
            ctx.step("c", move |_| {
                b.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, String>(a * 10) }
            }),
            ctx.sleep(Duration::from_millis(1)),
        )?;
        Ok((c, go, r))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cut_forks_a_run_that_completes_alike_or_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let bodies = Arc::new(AtomicU32::new(0));
    let host = Host::builder()
        .path(dir.path())
        .register(Mixed {
            bodies: bodies.clone(),
        })
        .build()
        .await?;
    let orig = host.start::<Mixed>("orig", 4).await?;
    within(LIMIT, "orig waits", orig.wait_until_suspended()).await??;
    // Wait for the signal wait itself, not the sleep before it.
    let deadline = std::time::Instant::now() + LIMIT;
    while !matches!(orig.status().await?, RunStatus::Suspended { ref waiting_on } if waiting_on.contains("go"))
    {
        assert!(std::time::Instant::now() < deadline, "never waited on go");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    orig.signal("go", &7u32, "go-1").await?;
    let expected = within(LIMIT, "orig ends", orig.result()).await??;
    let records = orig.records().await?;
    let end = records.len() as u64;

    let mut forked = 0;
    for at in 0..=end + 1 {
        let id = format!("f{at}");
        let before = bodies.load(Ordering::SeqCst);
        match host.fork("orig", at, &id).await {
            Err(Error::InvalidCut { .. }) => {
                assert!(
                    matches!(host.run(&id).status().await, Err(Error::UnknownRun(_))),
                    "a refused cut at {at} wrote {id}"
                );
                continue;
            }
            Err(e) => panic!("fork at {at} of {end}: {e:?}"),
            Ok(run) => {
                forked += 1;
                // The last possible cut is the terminal record's position.
                assert!(at >= 1 && at < end, "cut {at} of {end} was accepted");
                // Give it the signal if it still waits for one (a second copy is
                // harmless: it is never awaited).
                match run.signal("go", &7u32, "go-fork").await {
                    Ok(()) | Err(Error::RunFinished(_)) => {}
                    Err(e) => panic!("signal to fork at {at}: {e:?}"),
                }
                let out: (u32, u32, u64) =
                    match within(LIMIT, &format!("fork at {at}"), run.result()).await? {
                        Ok(o) => o,
                        Err(e) => panic!("fork at {at} of {end} ended with {e:?}: {:#?}", {
                            run.events().await?
                        }),
                    };
                // The random value is recorded: a fork past it keeps it.
                let r_seq = records
                    .iter()
                    .find(|r| format!("{:?}", r.event).starts_with("Recorded"))
                    .map(|r| r.seq)
                    .expect("a recorded value");
                if at > r_seq {
                    assert_eq!(out, expected, "fork at {at}");
                } else {
                    assert_eq!((out.0, out.1), (expected.0, expected.1), "fork at {at}");
                }
                // Steps the prefix completed are not run again.
                let completed_before_cut = records
                    .iter()
                    .filter(|r| r.seq < at)
                    .filter(|r| format!("{:?}", r.event).starts_with("StepCompleted"))
                    .count() as u32;
                assert_eq!(
                    bodies.load(Ordering::SeqCst) - before,
                    2 - completed_before_cut,
                    "fork at {at}: step bodies run"
                );
            }
        }
    }
    assert!(forked >= 3, "only {forked} cuts accepted of {end}");
    assert_eq!(orig.records().await?.len() as u64, end);
    assert_eq!(orig.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    Ok(())
}

/// Consumes one `n` signal per segment and continues as new twice; the signals
/// sent ahead carry over into the next segment.
struct Hops;
impl Workflow for Hops {
    const NAME: &'static str = "hops";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        let got: u32 = ctx.wait_for_signal("n").await?;
        let doubled: u32 = ctx
            .step("double", move |_| async move { Ok::<_, String>(got * 2) })
            .await?;
        if segment == 2 {
            return Ok(doubled + segment);
        }
        ctx.continue_as_new::<Hops>(segment + 1).await
    }
}

/// A run that continued as new forks from its current (last) segment only: every
/// cut at or before the segment's start is refused, every cut inside it forks a
/// run that completes like the original (the signals carried into the segment
/// come with the prefix, or are sent again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continued_run_forks_from_its_last_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Hops)
        .build()
        .await?;
    let orig = host.start::<Hops>("hops", 0).await?;
    for i in 0..3u32 {
        orig.signal("n", &(10 + i), &format!("n{i}")).await?;
    }
    let expected = within(LIMIT, "orig ends", orig.result()).await??;
    assert_eq!(expected, 24 + 2);
    let info = orig.info().await?;
    assert_eq!(info.segment, 2);
    let records = orig.records().await?;
    let last = records.last().map(|r| r.seq).expect("records");
    let start = records
        .iter()
        .rev()
        .find(|r| format!("{:?}", r.event).starts_with("RunStarted"))
        .map(|r| r.seq)
        .expect("the last segment's RunStarted");
    let mut accepted = 0;
    for at in 0..=last + 1 {
        let id = format!("h{at}");
        match host.fork("hops", at, &id).await {
            Err(Error::InvalidCut { reason, .. }) => {
                assert!(
                    at <= start || at > last || reason.contains("inside the attempts"),
                    "cut {at} inside the last segment ({start}..={last}) refused: {reason}"
                );
            }
            Err(e) => panic!("fork at {at}: {e:?}"),
            Ok(run) => {
                accepted += 1;
                assert!(at > start && at <= last, "cut {at} accepted");
                match run.signal("n", &12u32, "again").await {
                    Ok(()) | Err(Error::RunFinished(_)) => {}
                    Err(e) => panic!("signal to fork at {at}: {e:?}"),
                }
                let out: u32 = within(LIMIT, &format!("fork at {at}"), run.result()).await??;
                assert_eq!(out, expected, "fork at {at}");
            }
        }
    }
    assert!(accepted >= 2, "{accepted}");
    host.shutdown().await?;
    Ok(())
}
