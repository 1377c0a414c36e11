//! Cancelling a run while a step body is running ends the run for good: `RunCancelled`
//! is the last event of its log even after the body is let go, the handler does not
//! go on past the step, the status is `Cancelled`, and no timer outlives the run: the
//! sleep pending in a concurrent branch neither fires into the log nor wakes the run
//! (no run is live in the host after its due time).
//!
//! Why it would fail without the fix: a body left running after the cancel (rather
//! than dropped with the handler) could record its completion after `RunCancelled`
//! and let the handler go on; and a timer left in the timer service fires after the
//! run has ended. Today the cancelled run's sleep stays in the in-memory timer heap:
//! when it comes due it activates the finished run's actor again, which then stays
//! live until it is passivated (10 s later).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Gate, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(3);
const NAP_MS: u64 = 150;

static BODY_STARTED: Gate = Gate::new();
static BODY_RELEASE: Gate = Gate::new();
static BODY_ENDED: Gate = Gate::new();
static AFTER_STEP: AtomicBool = AtomicBool::new(false);

struct CancelMe;

impl Workflow for CancelMe {
    const NAME: &'static str = "cancel-me";
    type Input = ();
    type Output = u32;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let slow = ctx.step("slow", |_| async {
            BODY_STARTED.open();
            BODY_RELEASE.wait().await;
            BODY_ENDED.open();
            Ok::<u32, String>(1)
        });
        let branch = async {
            let v = slow.await?;
            AFTER_STEP.store(true, Ordering::SeqCst);
            Ok::<_, Error>(v)
        };
        let nap = ctx.sleep(Duration::from_millis(NAP_MS));
        let (v, ()) = futures::try_join!(branch, nap)?;
        Ok(v)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_a_step_body_runs_ends_the_run_for_good() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(std::time::SystemTime::now());
    let host = common::hosts::open_on(dir.path(), &clock, CancelMe).await?;
    let run = host.start::<CancelMe>("cancel-1", ()).await?;
    within(LIMIT, "the step body to start", BODY_STARTED.wait()).await?;

    run.cancel("stop").await?;
    // Let the body go: if it is still running it ends now (and may try to record its
    // completion); if it was dropped with the handler, it never ends.
    BODY_RELEASE.open();
    let _ = tokio::time::timeout(Duration::from_millis(300), BODY_ENDED.wait()).await;
    // The sleep the run had pending is waited on by nothing any more (the timer
    // service dropped it), and its due time passes.
    within(LIMIT, "the cancelled sleep to be dropped", async {
        while clock.next_due().is_some() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    clock.advance(Duration::from_millis(NAP_MS + 150));

    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let out = within(LIMIT, "the cancelled run's result", run.result()).await?;
    assert_eq!(out, Err(Error::Cancelled("stop".into())));
    assert!(
        !AFTER_STEP.load(Ordering::SeqCst),
        "the handler went on past the step after the cancel"
    );
    let events = run.events().await?;
    let cancelled = events
        .iter()
        .position(|e| matches!(e, Event::RunCancelled { .. }))
        .expect("the log records the cancel");
    assert_eq!(
        cancelled,
        events.len() - 1,
        "events after RunCancelled: {:?}",
        &events[cancelled..]
    );
    assert!(
        !events.iter().any(|e| matches!(e, Event::TimerFired { .. })),
        "the sleep fired: {events:?}"
    );
    assert_eq!(
        host.live_runs().await,
        0,
        "a run is live after the cancelled run's timer came due"
    );
    host.shutdown().await?;
    Ok(())
}
