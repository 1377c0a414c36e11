//! `ctx.patched` and `ctx.deprecate_patch` on canned histories (`reel::testing`):
//! a history written before the patch takes the old branch and one written after it
//! the new branch, in full and at every prefix; the answer is memoized; a deprecated
//! and then removed patch still replays; divergence stays as strict as without
//! patches; the answer depends only on the recorded openings, also under
//! concurrency; an empty id is refused.

mod common;

use std::time::Duration;

use common::replay::replay_incrementally;
use futures::future::join;
use reel::testing::{History, Replayed, replay};
use reel::{Ctx, Error, Event, Host, Workflow};

async fn charge(ctx: &Ctx) -> reel::Result<u32> {
    ctx.step("charge", |_| async { Ok::<_, String>(10u32) })
        .await
}

/// Before the patch: charge, wait for `ship`, ship.
#[derive(Clone)]
struct V1;
impl Workflow for V1 {
    const NAME: &'static str = "order";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let paid = charge(&ctx).await?;
        let to: String = ctx.wait_for_signal("ship").await?;
        ctx.step("ship", |_| async { Ok::<_, String>(()) }).await?;
        Ok(format!("paid {paid}, shipped to {to}"))
    }
}

/// The patch: a receipt email between charge and the wait. Asks twice.
#[derive(Clone)]
struct V2;
impl Workflow for V2 {
    const NAME: &'static str = "order";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let paid = charge(&ctx).await?;
        let patched = ctx.patched("receipt-email");
        let again = ctx.patched("receipt-email");
        let mut receipt = String::from("no receipt");
        if patched {
            receipt = ctx
                .step("email", |_| async { Ok::<_, String>("receipt".to_owned()) })
                .await?;
        }
        let to: String = ctx.wait_for_signal("ship").await?;
        ctx.step("ship", |_| async { Ok::<_, String>(()) }).await?;
        Ok(format!(
            "paid {paid}, {receipt}, shipped to {to} ({patched}/{again})"
        ))
    }
}

/// Cleanup: every pre-patch run has finished; the old branch is gone.
#[derive(Clone)]
struct V3;
impl Workflow for V3 {
    const NAME: &'static str = "order";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let paid = charge(&ctx).await?;
        ctx.deprecate_patch("receipt-email");
        let receipt: String = ctx
            .step("email", |_| async { Ok::<_, String>("receipt".to_owned()) })
            .await?;
        let to: String = ctx.wait_for_signal("ship").await?;
        ctx.step("ship", |_| async { Ok::<_, String>(()) }).await?;
        Ok(format!("paid {paid}, {receipt}, shipped to {to}"))
    }
}

/// The deprecated call removed as well.
#[derive(Clone)]
struct V4;
impl Workflow for V4 {
    const NAME: &'static str = "order";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let paid = charge(&ctx).await?;
        let receipt: String = ctx
            .step("email", |_| async { Ok::<_, String>("receipt".to_owned()) })
            .await?;
        let to: String = ctx.wait_for_signal("ship").await?;
        ctx.step("ship", |_| async { Ok::<_, String>(()) }).await?;
        Ok(format!("paid {paid}, {receipt}, shipped to {to}"))
    }
}

fn awaited(id: &str, name: &str) -> Event {
    Event::SignalAwaited {
        id: id.into(),
        name: name.into(),
        deadline: None,
    }
}

/// A run recorded by V1 (before the patch).
fn old_history() -> anyhow::Result<Vec<Event>> {
    Ok(History::start::<V1>(&())?
        .step_completed("charge", &10u32)?
        .push(awaited("signal#1", "ship"))
        .signal("ship", &"Lyon")?
        .step_completed("ship", &())?
        .build())
}

/// A run recorded by V2 (it took the new branch).
fn new_history() -> anyhow::Result<Vec<Event>> {
    Ok(History::start::<V2>(&())?
        .step_completed("charge", &10u32)?
        .patched("receipt-email")
        .step_completed("email", &"receipt")?
        .push(awaited("signal#1", "ship"))
        .signal("ship", &"Nice")?
        .step_completed("ship", &())?
        .build())
}

#[tokio::test]
async fn a_history_from_before_the_patch_takes_the_old_branch() -> anyhow::Result<()> {
    assert_eq!(
        replay_incrementally(&V2, &old_history()?).await,
        Replayed::Completed("paid 10, no receipt, shipped to Lyon (false/false)".into())
    );
    Ok(())
}

#[tokio::test]
async fn a_history_with_the_marker_takes_the_new_branch() -> anyhow::Result<()> {
    assert_eq!(
        replay_incrementally(&V2, &new_history()?).await,
        Replayed::Completed("paid 10, receipt, shipped to Nice (true/true)".into())
    );
    Ok(())
}

#[tokio::test]
async fn a_run_reaching_the_patch_for_the_first_time_takes_the_new_branch() -> anyhow::Result<()> {
    // The history ends where the patch is: live, the marker would be recorded now.
    let log = History::start::<V2>(&())?
        .step_completed("charge", &10u32)?
        .build();
    assert_eq!(
        replay(V2, &log).await?,
        Replayed::Pending("patch `receipt-email`".into())
    );
    Ok(())
}

#[tokio::test]
async fn deprecated_and_removed_patches_still_replay() -> anyhow::Result<()> {
    let expected = "paid 10, receipt, shipped to Nice";
    // A run that took the new branch, on the cleanup code and once the call is gone.
    assert_eq!(
        replay_incrementally(&V3, &new_history()?).await,
        Replayed::Completed(expected.into())
    );
    assert_eq!(
        replay_incrementally(&V4, &new_history()?).await,
        Replayed::Completed(expected.into())
    );
    // A run started on the cleanup code has no marker: V3 and V4 replay it too.
    let without_marker: Vec<Event> = new_history()?
        .into_iter()
        .filter(|e| !matches!(e, Event::Patched { .. }))
        .collect();
    assert_eq!(
        replay_incrementally(&V3, &without_marker).await,
        Replayed::Completed(expected.into())
    );
    assert_eq!(
        replay(V4, &without_marker).await?,
        Replayed::Completed(expected.into())
    );
    // A marker the run recorded last (it then waited) is looked past as well.
    let waiting: Vec<Event> = new_history()?[..4].to_vec();
    assert!(matches!(waiting.last(), Some(Event::Patched { .. })));
    assert_eq!(
        replay(V4, &waiting).await?,
        Replayed::Pending("step `email`".into())
    );
    Ok(())
}

#[tokio::test]
async fn divergence_stays_strict_around_markers() -> anyhow::Result<()> {
    // The old code on a run that took the new branch: past the marker the log has
    // the email step, the old code waits for the signal.
    assert_eq!(
        replay(V1, &new_history()?).await,
        Err(Error::ReplayDivergence {
            index: 4,
            expected: "step `email`".into(),
            found: "called signal wait `signal#1` on `ship`".into()
        })
    );
    // The cleanup code on a run from before the patch: it would email, the run
    // already waits.
    assert_eq!(
        replay(V3, &old_history()?).await,
        Err(Error::ReplayDivergence {
            index: 3,
            expected: "signal wait `signal#1` on `ship`".into(),
            found: "called step `email`".into()
        })
    );
    // A handler that returns while the log holds more than markers diverges.
    #[derive(Clone)]
    struct ChargeOnly;
    impl Workflow for ChargeOnly {
        const NAME: &'static str = "order";
        type Input = ();
        type Output = u32;
        async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
            charge(&ctx).await
        }
    }
    assert!(matches!(
        replay(ChargeOnly, &new_history()?).await,
        Err(Error::ReplayDivergence { index: 4, .. })
    ));
    // ... but not when only a marker is left.
    let ends_with_marker: Vec<Event> = new_history()?[..4].to_vec();
    assert_eq!(
        replay(ChargeOnly, &ends_with_marker).await?,
        Replayed::Completed(10)
    );
    Ok(())
}

/// Two patches at one position, in the order the code calls them.
#[derive(Clone)]
struct TwoPatches;
impl Workflow for TwoPatches {
    const NAME: &'static str = "two";
    type Input = ();
    type Output = (bool, bool);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(bool, bool)> {
        let b = ctx.patched("b");
        let a = ctx.patched("a");
        ctx.step("end", |_| async { Ok::<_, String>(()) }).await?;
        Ok((a, b))
    }
}

#[tokio::test]
async fn a_patch_answers_from_its_own_marker_only() -> anyhow::Result<()> {
    let end = |h: History| h.step_completed("end", &());
    // Recorded by code that had only patch `a`: `b` is false and consumes nothing.
    let only_a = end(History::start::<TwoPatches>(&())?.patched("a"))?.build();
    assert_eq!(
        replay_incrementally(&TwoPatches, &only_a).await,
        Replayed::Completed((true, false))
    );
    // Recorded by code whose patch `x` has since been removed: looked past.
    let removed = end(History::start::<TwoPatches>(&())?
        .patched("x")
        .patched("b")
        .patched("a"))?
    .build();
    assert_eq!(
        replay(TwoPatches, &removed).await?,
        Replayed::Completed((true, true))
    );
    // Recorded before both patches.
    let neither = end(History::start::<TwoPatches>(&())?)?.build();
    assert_eq!(
        replay(TwoPatches, &neither).await?,
        Replayed::Completed((false, false))
    );
    Ok(())
}

/// Two branches; the patch is asked in the first, after its timer, while the
/// second branch's signal and step may lie on either side of it in the log.
#[derive(Clone)]
struct Concurrent;
impl Workflow for Concurrent {
    const NAME: &'static str = "concurrent";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let left = async {
            ctx.sleep(Duration::from_millis(1)).await?;
            let step = if ctx.patched("p") { "new" } else { "old" };
            ctx.step(step, |_| async { Ok::<_, String>(()) }).await?;
            Ok::<_, Error>(step)
        };
        let right = async {
            let s: String = ctx.wait_for_signal("go").await?;
            ctx.step("right", |_| async { Ok::<_, String>(()) }).await?;
            Ok::<_, Error>(s)
        };
        let (l, r) = join(left, right).await;
        Ok(format!("{}/{}", l?, r?))
    }
}

#[tokio::test]
async fn the_answer_depends_on_the_recorded_openings_not_on_the_walk() -> anyhow::Result<()> {
    let timer = |h: History| {
        h.push(Event::TimerFired {
            id: "timer#1".into(),
        })
    };
    let opened = History::start::<Concurrent>(&())?
        .push(Event::TimerScheduled {
            id: "timer#1".into(),
            fire_at: 0,
        })
        .push(awaited("signal#1", "go"));
    // Before the patch, the signal first: the old step is opened after the
    // right branch's step.
    let old_signal_first = timer(
        opened
            .clone()
            .signal("go", &"s")?
            .step_completed("right", &())?,
    )
    .step_completed("old", &())?
    .build();
    assert_eq!(
        replay_incrementally(&Concurrent, &old_signal_first).await,
        Replayed::Completed("old/s".into())
    );
    // Before the patch, the timer first: the right branch's results come after.
    let old_timer_first = timer(opened.clone())
        .step_completed("old", &())?
        .signal("go", &"s")?
        .step_completed("right", &())?
        .build();
    assert_eq!(
        replay_incrementally(&Concurrent, &old_timer_first).await,
        Replayed::Completed("old/s".into())
    );
    // After the patch, with results of the other branch still to be walked when
    // the patch is asked.
    let new_timer_first = timer(opened)
        .patched("p")
        .push(Event::StepStarted {
            id: "new".into(),
            attempt: 1,
        })
        .signal("go", &"s")?
        .step_completed("right", &())?
        .push(Event::StepCompleted {
            id: "new".into(),
            output: reel::Payload(rmp_serde::to_vec(&())?),
        })
        .build();
    assert_eq!(
        replay_incrementally(&Concurrent, &new_timer_first).await,
        Replayed::Completed("new/s".into())
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_with_a_patch_replays_to_the_same_outcome() -> anyhow::Result<()> {
    let host = Host::builder()
        .in_memory()
        .register(Concurrent)
        .build()
        .await?;
    let run = host.start::<Concurrent>("c", ()).await?;
    run.signal("go", &"live", "go-1").await?;
    let live = run.result().await?;
    let events = run.events().await?;
    let markers = events
        .iter()
        .filter(|e| matches!(e, Event::Patched { id } if id == "p"))
        .count();
    assert_eq!((live.as_str(), markers), ("new/live", 1));
    let log: Vec<Event> = events.into_iter().filter(|e| !e.is_terminal()).collect();
    assert_eq!(
        replay_incrementally(&Concurrent, &log).await,
        Replayed::Completed(live)
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn an_empty_patch_id_is_refused() -> anyhow::Result<()> {
    #[derive(Clone)]
    struct Empty;
    impl Workflow for Empty {
        const NAME: &'static str = "empty";
        type Input = ();
        type Output = bool;
        async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<bool> {
            Ok(ctx.patched(""))
        }
    }
    let log = History::start::<Empty>(&())?.build();
    match replay(Empty, &log).await {
        Err(Error::Failed(m)) => assert!(m.contains("empty patch id"), "{m}"),
        other => panic!("expected the run to be parked, got {other:?}"),
    }
    Ok(())
}
