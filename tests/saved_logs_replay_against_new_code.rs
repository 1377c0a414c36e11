//! Adversarial tests of `reel::testing`: logs saved from real runs (through serde)
//! replayed against new code, logs of continued, cancelled and parent runs, and
//! the auto-skipping test clock with several hosts and runs waiting.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Gate, within};
use reel::testing::{Replayed, TestClock, replay, replay_as};
use reel::{Ctx, Error, Event, Host, Workflow};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(20);
const HOUR: Duration = Duration::from_secs(3600);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// The log as a CI job would keep it: serialized, then read back.
fn saved(events: &[Event]) -> anyhow::Result<Vec<Event>> {
    let text = serde_json::to_string(events)?;
    Ok(serde_json::from_str(&text)?)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    Original,
    /// Different step bodies and output formatting: compatible.
    NewBodies,
    /// The `ship` step renamed.
    Renamed,
    /// A new step before the wait, unguarded.
    Inserted,
    /// The same new step, behind `patched`.
    Patched,
    /// A step removed after the wait.
    Removed,
}

#[derive(Clone)]
struct Order(Variant);

impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, qty: u32) -> reel::Result<String> {
        let v = self.0;
        let reserved: u32 = ctx
            .step("reserve", |_| async move {
                Ok::<_, String>(if v == Variant::NewBodies { 0 } else { qty * 10 })
            })
            .await?;
        if v == Variant::Inserted {
            ctx.step("fraud-check", |_| async { Ok::<_, String>(()) })
                .await?;
        }
        if v == Variant::Patched && ctx.patched("fraud-check") {
            ctx.step("fraud-check", |_| async { Ok::<_, String>(()) })
                .await?;
        }
        let paid: String = ctx.wait_for_signal("paid").await?;
        let name = if v == Variant::Renamed {
            "dispatch"
        } else {
            "ship"
        };
        let tracking: String = if v == Variant::Removed {
            "none".to_owned()
        } else {
            ctx.step(name, |_| async { Ok::<_, String>("TRK-1".to_owned()) })
                .await?
        };
        if v == Variant::NewBodies {
            return Ok(format!("{reserved}|{paid}|{tracking}"));
        }
        Ok(format!("{reserved}/{paid}/{tracking}"))
    }
}

async fn live_order_log() -> anyhow::Result<(Vec<Event>, Vec<Event>, String)> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Order(Variant::Original)).await?;
    let run = host.start::<Order>("o-1", 3).await?;
    within(LIMIT, "suspended", run.wait_until_suspended()).await??;
    let waiting = saved(&run.events().await?)?;
    run.signal("paid", "card", "p-1").await?;
    let out = within(LIMIT, "result", run.result()).await??;
    let full = saved(&run.events().await?)?;
    host.shutdown().await?;
    Ok((waiting, full, out))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_real_logs_against_new_code() -> anyhow::Result<()> {
    let (waiting, full, out) = live_order_log().await?;
    assert_eq!(out, "30/card/TRK-1");
    assert_eq!(
        replay(Order(Variant::Original), &full).await?,
        Replayed::Completed(out.clone())
    );
    // Recorded values, not new bodies.
    assert_eq!(
        replay(Order(Variant::NewBodies), &full).await?,
        Replayed::Completed("30|card|TRK-1".to_owned())
    );
    // A patched insertion takes the old branch on both logs.
    assert_eq!(
        replay(Order(Variant::Patched), &full).await?,
        Replayed::Completed(out.clone())
    );
    match replay(Order(Variant::Patched), &waiting).await? {
        Replayed::Pending(what) => assert!(what.contains("paid"), "{what}"),
        other => panic!("expected pending, got {other:?}"),
    }
    // Renamed: divergence naming both.
    match replay(Order(Variant::Renamed), &full).await {
        Err(e @ Error::ReplayDivergence { .. }) => {
            let text = e.to_string();
            assert!(text.contains("ship") && text.contains("dispatch"), "{text}");
        }
        other => panic!("expected divergence, got {other:?}"),
    }
    // Renamed, but the log ends before the renamed step: nothing to diverge from.
    match replay(Order(Variant::Renamed), &waiting).await? {
        Replayed::Pending(_) => {}
        other => panic!("expected pending, got {other:?}"),
    }
    // Inserted without a patch: diverges on both logs.
    for log in [&waiting, &full] {
        match replay(Order(Variant::Inserted), log).await {
            Err(e @ Error::ReplayDivergence { .. }) => {
                let text = e.to_string();
                assert!(text.contains("fraud-check"), "{text}");
            }
            other => panic!("expected divergence, got {other:?}"),
        }
    }
    // Removed: the handler returns before reaching the recorded step.
    match replay(Order(Variant::Removed), &full).await {
        Err(e @ Error::ReplayDivergence { .. }) => {
            let text = e.to_string();
            assert!(text.contains("ship"), "{text}");
        }
        other => panic!("expected divergence, got {other:?}"),
    }
    Ok(())
}

/// A live run of the patched code records the marker; that log replays against
/// the patched code, the deprecated patch, and the code with the call removed.
#[derive(Clone, Copy)]
enum PatchStage {
    Patched,
    Deprecated,
    Removed,
}

struct Pay(PatchStage);

impl Workflow for Pay {
    const NAME: &'static str = "pay";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let a: u32 = ctx.step("a", |_| async { Ok::<_, String>(1) }).await?;
        let b: u32 = match self.0 {
            PatchStage::Patched => {
                if ctx.patched("v2") {
                    ctx.step("b2", |_| async { Ok::<_, String>(20) }).await?
                } else {
                    ctx.step("b", |_| async { Ok::<_, String>(2) }).await?
                }
            }
            PatchStage::Deprecated => {
                ctx.deprecate_patch("v2");
                ctx.step("b2", |_| async { Ok::<_, String>(20) }).await?
            }
            PatchStage::Removed => ctx.step("b2", |_| async { Ok::<_, String>(20) }).await?,
        };
        ctx.sleep(Duration::from_secs(1)).await?;
        Ok(a + b)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patched_log_replays_through_deprecation_and_removal() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .clock(TestClock::auto(t0()))
        .register(Pay(PatchStage::Patched))
        .build()
        .await?;
    let run = host.start::<Pay>("pay-1", ()).await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, 21);
    let log = saved(&run.events().await?)?;
    host.shutdown().await?;
    assert!(log.iter().any(|e| matches!(e, Event::Patched { .. })));
    for stage in [
        PatchStage::Patched,
        PatchStage::Deprecated,
        PatchStage::Removed,
    ] {
        assert_eq!(replay(Pay(stage), &log).await?, Replayed::Completed(21));
    }
    // Every prefix replays without a divergence.
    for cut in 1..log.len() {
        for stage in [
            PatchStage::Patched,
            PatchStage::Deprecated,
            PatchStage::Removed,
        ] {
            let r = replay(Pay(stage), &log[..cut]).await;
            assert!(
                matches!(r, Ok(Replayed::Pending(_)) | Ok(Replayed::Completed(21))),
                "cut {cut}: {r:?}"
            );
        }
    }
    Ok(())
}

/// Counts signals, continuing as new every two.
#[derive(Clone)]
struct Counter2 {
    /// Replay-only variant: the first segment's code differs (a step renamed).
    changed_first: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Tally {
    seen: u32,
    total: u32,
}

impl Workflow for Counter2 {
    const NAME: &'static str = "counter2";
    type Input = Tally;
    type Output = u32;
    async fn run(&self, ctx: Ctx, mut t: Tally) -> reel::Result<u32> {
        for _ in 0..2 {
            let n: u32 = ctx.wait_for_signal("n").await?;
            let name = if self.changed_first && t.seen < 2 {
                "add-v2"
            } else {
                "add"
            };
            t.total = ctx
                .step(name, |_| async move { Ok::<_, String>(t.total + n) })
                .await?;
            t.seen += 1;
            if t.seen == 5 {
                return Ok(t.total);
            }
        }
        ctx.continue_as_new::<Counter2>(t).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_continued_runs_replay_their_last_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(
        dir.path(),
        Counter2 {
            changed_first: false,
        },
    )
    .await?;
    let run = host
        .start::<Counter2>("c-1", Tally { seen: 0, total: 0 })
        .await?;
    for i in 1..=5u32 {
        run.signal("n", &i, &format!("n-{i}")).await?;
    }
    assert_eq!(within(LIMIT, "result", run.result()).await??, 15);
    let log = saved(&run.events().await?)?;
    host.shutdown().await?;
    let cans: Vec<usize> = log
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::ContinuedAsNew { .. }))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(cans.len(), 2, "{log:?}");
    let w = || Counter2 {
        changed_first: false,
    };
    assert_eq!(replay(w(), &log).await?, Replayed::Completed(15));
    // Cut just after the first segment's end: it continued as new.
    assert_eq!(
        replay(w(), &log[..=cans[0]]).await?,
        Replayed::ContinuedAsNew { version: 1 }
    );
    // Cut just after the second segment's end.
    assert_eq!(
        replay(w(), &log[..=cans[1]]).await?,
        Replayed::ContinuedAsNew { version: 1 }
    );
    // Code that differs only where earlier segments ran still replays the last one.
    assert_eq!(
        replay(
            Counter2 {
                changed_first: true
            },
            &log
        )
        .await?,
        Replayed::Completed(15)
    );
    // Every prefix replays to a pending wait, a continuation or the end.
    for cut in 1..=log.len() {
        let r = replay(w(), &log[..cut]).await;
        assert!(
            matches!(
                r,
                Ok(Replayed::Pending(_)
                    | Replayed::ContinuedAsNew { .. }
                    | Replayed::Completed(15))
            ),
            "cut {cut}: {r:?}"
        );
    }
    Ok(())
}

/// Waits for a signal; on cancel, runs a shielded cleanup step.
struct Cancellable;

impl Workflow for Cancellable {
    const NAME: &'static str = "cancellable";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("prepare", |_| async { Ok::<_, String>(()) })
            .await?;
        match ctx.wait_for_signal::<String>("go").await {
            Err(Error::Cancelled(reason)) => {
                ctx.shielded()
                    .step("cleanup", |_| async { Ok::<_, String>(()) })
                    .await?;
                Err(Error::Cancelled(reason))
            }
            other => other,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_cancelled_runs_replay_to_the_cancel() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Cancellable).await?;
    let run = host.start::<Cancellable>("x-1", ()).await?;
    within(LIMIT, "suspended", run.wait_until_suspended()).await??;
    within(LIMIT, "cancel", run.cancel("operator said so")).await??;
    let log = saved(&run.events().await?)?;
    host.shutdown().await?;
    assert!(log.iter().any(|e| matches!(e, Event::RunCancelled { .. })));
    match replay(Cancellable, &log).await? {
        Replayed::Failed(Error::Cancelled(reason)) => {
            assert!(reason.contains("operator said so"), "{reason}")
        }
        other => panic!("expected a cancel, got {other:?}"),
    }
    // Every prefix: pending, or the cancel.
    for cut in 1..log.len() {
        let r = replay(Cancellable, &log[..cut]).await;
        assert!(
            matches!(
                r,
                Ok(Replayed::Pending(_) | Replayed::Failed(Error::Cancelled(_)))
            ),
            "cut {cut}: {r:?}"
        );
    }
    Ok(())
}

struct Kid;

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.sleep(HOUR).await?;
        ctx.step("double", |_| async move { Ok::<_, String>(n * 2) })
            .await
    }
}

struct Parent;

impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let me = ctx.run_id().to_owned();
        let detached = ctx.start_child::<Kid>(&format!("{me}/bg"), 100).await?;
        let _ = detached;
        let (a, b) = futures::try_join!(
            ctx.child::<Kid>(&format!("{me}/a"), n),
            ctx.child::<Kid>(&format!("{me}/b"), n + 1)
        )?;
        Ok(a + b)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_runs_with_children_replay_without_a_host() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .clock(TestClock::auto(t0()))
        .register(Parent)
        .register(Kid)
        .build()
        .await?;
    let run = host.start::<Parent>("p-1", 5).await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, 22);
    let log = saved(&run.events().await?)?;
    let kid_log = saved(&host.run("p-1/a").events().await?)?;
    host.shutdown().await?;
    assert_eq!(
        replay_as(Parent, "p-1", &log).await?,
        Replayed::Completed(22)
    );
    assert_eq!(replay(Kid, &kid_log).await?, Replayed::Completed(10));
    // Under another run id the child ids differ: a divergence, not a wrong answer.
    let other = replay_as(Parent, "p-2", &log).await;
    assert!(
        matches!(other, Err(Error::ReplayDivergence { .. })),
        "{other:?}"
    );
    for cut in 1..log.len() {
        let r = replay_as(Parent, "p-1", &log[..cut]).await;
        assert!(
            matches!(r, Ok(Replayed::Pending(_) | Replayed::Completed(22))),
            "cut {cut}: {r:?}"
        );
    }
    Ok(())
}

static STEP_GATE: Gate = Gate::new();
static STEP_ENTERED: Gate = Gate::new();

/// A step that blocks until the test opens the gate.
struct Busy;

impl Workflow for Busy {
    const NAME: &'static str = "busy";
    type Input = ();
    type Output = SystemTime;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<SystemTime> {
        ctx.step("work", |_| async {
            STEP_ENTERED.open();
            STEP_GATE.wait().await;
            Ok::<_, String>(())
        })
        .await?;
        ctx.sleep(30 * 24 * HOUR).await?;
        ctx.now().await
    }
}

/// Waits up to 48 h for "ok"; reports what and when.
struct Waiter;

impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = (Option<String>, SystemTime);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(Option<String>, SystemTime)> {
        let got: Option<String> = ctx.wait_for_signal_timeout("ok", 48 * HOUR).await?;
        Ok((got, ctx.now().await?))
    }
}

/// Sleeps `hours`, then signals the waiter named in the input.
struct Approver;

impl Workflow for Approver {
    const NAME: &'static str = "approver";
    type Input = (String, u64);
    type Output = ();
    async fn run(&self, ctx: Ctx, (target, hours): (String, u64)) -> reel::Result<()> {
        ctx.sleep(HOUR * u32::try_from(hours).unwrap_or(1)).await?;
        ctx.signal(&target, "ok", &format!("by {hours}h"), "approve")
            .await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_clock_with_two_hosts_waits_for_both_and_fires_in_order() -> anyhow::Result<()> {
    let dir_a = tempfile::tempdir()?;
    let dir_b = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let host_b = common::hosts::open_on(dir_b.path(), &clock, Busy).await?;
    let host_a = common::hosts::open_two_on(dir_a.path(), &clock, Waiter, Approver).await?;
    let busy = host_b.start::<Busy>("busy", ()).await?;
    within(LIMIT, "the step to start", STEP_ENTERED.wait()).await?;
    let waiters: Vec<_> = (0..5).map(|i| format!("w{i}")).collect();
    for w in &waiters {
        host_a.start::<Waiter>(w, ()).await?;
    }
    host_a
        .start::<Approver>("ap1", ("w1".to_owned(), 10))
        .await?;
    host_a
        .start::<Approver>("ap3", ("w3".to_owned(), 30))
        .await?;
    for w in &waiters {
        within(LIMIT, "suspended", host_a.run(w).wait_until_suspended()).await??;
    }
    // Host B has a step executing: the shared clock must not move.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        reel::Clock::now(&clock),
        t0(),
        "skipped during a step on another host"
    );
    STEP_GATE.open();
    for (i, w) in waiters.iter().enumerate() {
        let (got, at) = within(LIMIT, "waiter", host_a.handle::<Waiter>(w).result()).await??;
        match i {
            1 => assert_eq!((got, at), (Some("by 10h".to_owned()), t0() + 10 * HOUR)),
            3 => assert_eq!((got, at), (Some("by 30h".to_owned()), t0() + 30 * HOUR)),
            _ => assert_eq!((got, at), (None, t0() + 48 * HOUR), "{w}"),
        }
    }
    let done = within(LIMIT, "busy", busy.result()).await??;
    assert_eq!(done, t0() + 30 * 24 * HOUR);
    host_a.shutdown().await?;
    host_b.shutdown().await?;
    Ok(())
}
