//! `Host::fork` makes a new run from a prefix of another run's log (the events
//! below the cut), which replays it strictly and goes on live with the code
//! registered now: a failed run re-runs from the step that failed once the bug is
//! fixed, its earlier steps not run again and its signals carried. Timers pending
//! at the cut fire for the fork. The original is untouched. Cuts that are not at a
//! primitive boundary, taken ids and unknown runs are refused, and write nothing.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use common::{Counter, until_log, within};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, RetryPolicy, RunStatus, StepError, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
/// `Nap`'s sleep, on a `TestClock` the test moves.
const NAP: Duration = Duration::from_secs(3600);

static FIXED: AtomicBool = AtomicBool::new(false);

/// Reserves, waits for a coupon, then charges: the charge fails (twice, then for
/// good) until the test sets `FIXED`.
struct Order {
    reserved: Counter,
    charged: Counter,
}
impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, base: u32) -> reel::Result<u32> {
        let reserved = self.reserved.clone();
        let a: u32 = ctx
            .step("reserve", move |_| {
                reserved.bump();
                async move { Ok::<_, String>(base) }
            })
            .await?;
        let coupon: u32 = ctx.wait_for_signal("coupon").await?;
        let charged = self.charged.clone();
        let policy = RetryPolicy::default()
            .with_max_attempts(2)
            .with_backoff(Duration::from_millis(10), Duration::from_millis(10));
        let c: u32 = ctx
            .step_with("charge", policy, move |_| {
                charged.bump();
                async move {
                    if FIXED.load(Ordering::SeqCst) {
                        Ok(1)
                    } else {
                        Err(StepError::from("card declined"))
                    }
                }
            })
            .await?;
        Ok(a + coupon + c)
    }
}

fn seq_of(records: &[reel::Record], f: impl Fn(&Event) -> bool) -> u64 {
    records
        .iter()
        .find(|r| f(&r.event))
        .map(|r| r.seq)
        .unwrap_or_else(|| panic!("no such record"))
}

fn expect_cut(r: reel::Result<reel::AnyRun>, run: &str, at: u64, says: &str) {
    match r {
        Err(Error::InvalidCut {
            run_id,
            at_seq,
            reason,
        }) => {
            assert_eq!((run_id.as_str(), at_seq), (run, at));
            assert!(reason.contains(says), "`{reason}` does not say `{says}`");
        }
        other => panic!("expected InvalidCut at {at}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_forked_at_its_failed_step_completes_with_the_fixed_code() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let (reserved, charged) = (Counter::default(), Counter::default());
    let host = common::hosts::open(
        dir.path(),
        Order {
            reserved: reserved.clone(),
            charged: charged.clone(),
        },
    )
    .await?;
    let run = host.start::<Order>("o1", 10).await?;
    within(LIMIT, "the coupon wait", run.wait_until_suspended()).await??;
    run.signal("coupon", &5u32, "coupon-1").await?;
    match within(LIMIT, "the failure", run.result()).await? {
        Err(Error::Step { step, .. }) => assert_eq!(step, "charge"),
        other => panic!("expected the charge to fail, got {other:?}"),
    }
    assert_eq!((reserved.get(), charged.get()), (1, 2));
    let records = run.records().await?;
    let original = run.events().await?;
    let charge = seq_of(
        &records,
        |e| matches!(e, Event::StepStarted { id, .. } if id == "charge"),
    );
    let second = seq_of(
        &records,
        |e| matches!(e, Event::StepStarted { id, attempt: 2, .. } if id == "charge"),
    );
    let failed = seq_of(&records, |e| matches!(e, Event::RunFailed { .. }));

    // Refused cuts, each naming why; nothing is written.
    expect_cut(host.fork("o1", 0, "f").await, "o1", 0, "RunStarted");
    expect_cut(
        host.fork("o1", second, "f").await,
        "o1",
        second,
        "step `charge`",
    );
    expect_cut(
        host.fork("o1", failed + 1, "f").await,
        "o1",
        failed + 1,
        "past the end",
    );
    assert!(matches!(
        host.run("f").status().await,
        Err(Error::UnknownRun(_))
    ));
    assert!(matches!(
        host.fork("nope", 1, "f").await,
        Err(Error::UnknownRun(id)) if id == "nope"
    ));

    FIXED.store(true, Ordering::SeqCst);
    let fork = host.fork("o1", charge, "o1-fixed").await?;
    assert_eq!(fork.id(), "o1-fixed");
    assert_eq!(
        within(LIMIT, "the fork's result", fork.result::<u32>()).await??,
        16
    );
    assert_eq!(
        reserved.get(),
        1,
        "the fork ran a step before the cut again"
    );
    assert_eq!(charged.get(), 3, "the fork runs the failed step once more");
    let forked = fork.events().await?;
    assert_eq!(forked[..charge as usize], original[..charge as usize]);

    // The original is untouched.
    assert!(matches!(run.status().await?, RunStatus::Failed { .. }));
    assert_eq!(run.events().await?, original);

    // The id is taken now.
    match host.fork("o1", charge, "o1-fixed").await {
        Err(Error::RunExists { run_id, workflow }) => {
            assert_eq!((run_id.as_str(), workflow.as_str()), ("o1-fixed", "order"));
        }
        other => panic!("expected RunExists, got {other:?}"),
    }
    host.shutdown().await?;
    Ok(())
}

/// Sleeps, then finishes.
struct Nap;
impl Workflow for Nap {
    const NAME: &'static str = "nap";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.sleep(NAP).await?;
        Ok("rested".to_owned())
    }
}

/// Waits for a signal.
struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal::<()>("go").await
    }
}

/// Waits for its child.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.child::<Kid>("kid", ()).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_rearms_pending_timers_and_refuses_to_adopt_children() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .register(Nap)
        .register(Kid)
        .register(Parent)
        .build()
        .await?;

    let nap = host.start::<Nap>("nap", ()).await?;
    within(LIMIT, "the nap", nap.wait_until_suspended()).await??;
    let end = nap.records().await?.len() as u64;
    let fork = host.fork("nap", end, "nap-2").await?;
    within(LIMIT, "the fork's nap", fork.wait_until_suspended()).await??;
    // Both timers come due: the fork's was armed again, or it would never wake.
    clock.advance(NAP);
    assert_eq!(
        within(LIMIT, "the fork's result", fork.result::<String>()).await??,
        "rested"
    );
    assert!(
        fork.events()
            .await?
            .iter()
            .any(|e| matches!(e, Event::TimerFired { .. }))
    );
    assert_eq!(
        within(LIMIT, "the original", nap.result()).await??,
        "rested"
    );

    let parent = host.start::<Parent>("parent", ()).await?;
    let events = until_log(&parent, LIMIT, "the child start", |e| {
        e.iter().any(|e| matches!(e, Event::ChildStarted { .. }))
    })
    .await?;
    let end = events.len() as u64;
    expect_cut(
        host.fork("parent", end, "parent-2").await,
        "parent",
        end,
        "child run `kid`",
    );
    assert!(matches!(
        host.run("parent-2").status().await,
        Err(Error::UnknownRun(_))
    ));
    // `ChildStarted` is recorded before the child run is created; a suspended
    // parent's children exist.
    within(LIMIT, "the parent to wait", parent.wait_until_suspended()).await??;
    let kid = host.run("kid");
    within(LIMIT, "the kid to wait", kid.wait_until_suspended()).await??;
    kid.signal("go", &(), "go-1").await?;
    within(LIMIT, "the parent", parent.result()).await??;

    // Once the child has ended before the cut, its result replays.
    let end = parent.records().await?.len() as u64 - 1; // before RunCompleted
    let fork = host.fork("parent", end, "parent-3").await?;
    within(LIMIT, "the fork of the parent", fork.result::<()>()).await??;
    assert!(fork.children().await?.is_empty());
    host.shutdown().await?;
    Ok(())
}
