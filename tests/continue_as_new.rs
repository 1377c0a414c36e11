//! `ctx.continue_as_new`: a long-lived run starts a new log segment. Signals it has
//! not consumed carry over (in order, with their ids), the old segments stay
//! readable, `result()` waits for the last segment, wake-ups replay only the
//! current segment, and all of it holds across a host restart.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Counter, Gate, until_log, within};
use reel::{Ctx, Event, Host, RunStatus, Workflow, testing};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(30);
/// Signals an entity consumes per segment before it continues as new.
const PER_SEGMENT: usize = 3;

/// An entity: applies `add` signals one by one through a step, continues as new
/// every `PER_SEGMENT` signals, and ends after `until` signals.
#[derive(Clone, Default)]
struct Entity {
    applied: Counter,
    /// Holds every step until opened, when set.
    gate: Option<&'static Gate>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Ledger {
    adds: Vec<u64>,
    until: usize,
}

impl Workflow for Entity {
    const NAME: &'static str = "entity";
    type Input = Ledger;
    type Output = Vec<u64>;
    async fn run(&self, ctx: Ctx, mut ledger: Ledger) -> reel::Result<Vec<u64>> {
        for _ in 0..PER_SEGMENT {
            if ledger.adds.len() == ledger.until {
                return Ok(ledger.adds);
            }
            let add: u64 = ctx.wait_for_signal("add").await?;
            let (applied, gate) = (self.applied.clone(), self.gate);
            let add = ctx
                .step("apply", move |_| {
                    applied.bump();
                    async move {
                        if let Some(gate) = gate {
                            gate.wait().await;
                        }
                        Ok::<_, String>(add)
                    }
                })
                .await?;
            ledger.adds.push(add);
        }
        ctx.continue_as_new::<Entity>(ledger).await
    }
}

/// Calls `continue_as_new` with another workflow than its own.
struct Confused;

impl Workflow for Confused {
    const NAME: &'static str = "confused";
    type Input = ();
    type Output = Vec<u64>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u64>> {
        ctx.continue_as_new::<Entity>(Ledger::default()).await
    }
}

/// Waits for a signal forever.
struct Waiter;

impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal::<()>("never").await
    }
}

/// Calls a child, and continues as new once `move` arrives, the child unfinished.
struct Mover;

impl Workflow for Mover {
    const NAME: &'static str = "mover";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        if segment == 1 {
            return Ok(segment);
        }
        let child = ctx.child::<Waiter>(&format!("{}-child", ctx.run_id()), ());
        let moved = ctx.wait_for_signal::<()>("move");
        tokio::select! {
            biased;
            _ = moved => ctx.continue_as_new::<Mover>(segment + 1).await,
            r = child => r.map(|()| segment),
        }
    }
}

fn open(dir: &Path, entity: &Entity) -> impl Future<Output = reel::Result<Host>> {
    Host::builder()
        .path(dir.join("store"))
        .register(entity.clone())
        .register(Confused)
        .register(Waiter)
        .register(Mover)
        .build()
}

/// A host that passivates a run as soon as it only waits: every signal activates
/// the run from disk and replays.
fn open_passivating(dir: &Path, entity: &Entity) -> impl Future<Output = reel::Result<Host>> {
    common::hosts::open_passivating(dir.join("store"), entity.clone(), Duration::ZERO)
}

/// A ledger that ends after `until` signals.
fn ledger(until: usize) -> Ledger {
    Ledger {
        adds: Vec::new(),
        until,
    }
}

fn count(events: &[Event], kind: &str) -> usize {
    events.iter().filter(|e| e.kind() == kind).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconsumed_signals_carry_over_in_order() -> anyhow::Result<()> {
    static GATE: Gate = Gate::new();
    let dir = tempfile::tempdir()?;
    let entity = Entity {
        gate: Some(&GATE),
        ..Entity::default()
    };
    let host = open(dir.path(), &entity).await?;
    let run = host.start::<Entity>("cart", ledger(10)).await?;
    run.signal("add", &1u64, "add-1").await?;
    until_log(&run, LIMIT, "the first step", |e| {
        count(e, "StepStarted") == 1
    })
    .await?;
    // The first step is held: the other nine wait in the log, unconsumed.
    for i in 2..=10u64 {
        run.signal("add", &i, &format!("add-{i}")).await?;
    }
    GATE.open();
    let adds = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(
        adds,
        (1..=10).collect::<Vec<u64>>(),
        "each signal once, in order"
    );
    assert_eq!(entity.applied.get(), 10, "no step ran twice");

    let events = run.events().await?;
    let carried: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::ContinuedAsNew { carried } => Some(*carried),
            _ => None,
        })
        .collect();
    assert_eq!(
        carried,
        [7, 4, 1],
        "segments of 3, 3, 3 and 1, the rest carried"
    );
    assert_eq!(
        count(&events, "RunStarted"),
        4,
        "old segments stay readable"
    );
    assert_eq!(count(&events, "RunCompleted"), 1);
    let info = run.info().await?;
    assert_eq!(info.segment, 3);
    assert_eq!(info.status, RunStatus::Completed);
    let log = info.log.expect("info reads the segment's size");
    let last_segment = events.len()
        - events
            .iter()
            .rposition(|e| matches!(e, Event::RunStarted { .. }))
            .unwrap_or(0);
    assert_eq!(
        log.events, last_segment as u64,
        "the size is the last segment's"
    );
    assert!(log.bytes > 0);

    // Replaying the saved log replays its last segment.
    let replayed = testing::replay(Entity::default(), &events).await?;
    assert_eq!(
        replayed,
        testing::Replayed::Completed((1..=10).collect::<Vec<u64>>())
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continued_run_survives_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let entity = Entity::default();
    let host = open(dir.path(), &entity).await?;
    let run = host.start::<Entity>("account", ledger(8)).await?;
    for i in 1..=4u64 {
        run.signal("add", &i, &format!("add-{i}")).await?;
    }
    // The second segment has consumed the fourth signal and waits for the fifth.
    until_log(&run, LIMIT, "the fourth step", |e| {
        count(e, "StepCompleted") == 4 && count(e, "SignalAwaited") == 5
    })
    .await?;
    // The fifth signal is taken by the waiting run; its step is recorded before the
    // shutdown (a body still running at shutdown would run again after the restart,
    // which a step may, and this test counts runs of the body).
    run.signal("add", &5u64, "add-5").await?;
    until_log(&run, LIMIT, "the fifth step", |e| {
        count(e, "StepCompleted") == 5
    })
    .await?;
    host.shutdown().await?;

    let host = open(dir.path(), &entity).await?;
    let run = host.handle::<Entity>("account");
    // A resend of the fifth signal is still recognised by its id after the restart.
    run.signal("add", &5u64, "add-5").await?;
    for i in 6..=8u64 {
        run.signal("add", &i, &format!("add-{i}")).await?;
    }
    let adds = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(adds, (1..=8).collect::<Vec<u64>>());
    assert_eq!(entity.applied.get(), 8, "no recorded step ran again");
    let events = run.events().await?;
    assert_eq!(count(&events, "ContinuedAsNew"), 2);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_replays_only_the_current_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let entity = Entity::default();
    let host = open_passivating(dir.path(), &entity).await?;
    let run = host.start::<Entity>("session", ledger(30)).await?;
    for i in 1..=29u64 {
        run.signal("add", &i, &format!("add-{i}")).await?;
        run.wait_until_suspended().await?;
        let info = run.info().await?;
        let log = info.log.expect("size");
        // RunStarted, at most three waits, signals and steps, and what carried.
        assert!(
            log.events <= 12,
            "segment {} holds {} events after {i} signals",
            info.segment,
            log.events
        );
    }
    run.signal("add", &30u64, "add-30").await?;
    let adds = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(adds.len(), 30);
    assert_eq!(entity.applied.get(), 30);
    host.shutdown().await?;
    Ok(())
}

/// A message sent to a run's actor just as it passivates is neither lost nor left
/// unanswered: it reaches the run's next actor. Many signals, each racing the
/// passivation of the actor the one before it woke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_racing_passivation_all_arrive() -> anyhow::Result<()> {
    const SIGNALS: u64 = 600;
    let dir = tempfile::tempdir()?;
    let entity = Entity::default();
    let host = open_passivating(dir.path(), &entity).await?;
    let run = host
        .start::<Entity>("racer", ledger(SIGNALS as usize))
        .await?;
    for i in 1..=SIGNALS {
        within(
            LIMIT,
            "a signal",
            run.signal("add", &i, &format!("add-{i}")),
        )
        .await??;
        // Every other signal lands on a run that has settled (and so passivates).
        if i % 2 == 0 && i < SIGNALS {
            within(LIMIT, "suspension", run.wait_until_suspended()).await??;
        }
    }
    let adds = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(adds, (1..=SIGNALS).collect::<Vec<_>>());
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuing_as_another_workflow_is_a_typed_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path(), &Entity::default()).await?;
    let run = host.start::<Confused>("confused-1", ()).await?;
    let err = within(LIMIT, "the result", run.result())
        .await?
        .expect_err("another workflow is refused");
    assert!(err.to_string().contains("not `entity`"), "{err}");
    assert!(matches!(run.status().await?, RunStatus::Failed { .. }));
    let events = run.events().await?;
    assert_eq!(count(&events, "ContinuedAsNew"), 0, "nothing continued");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_of_the_old_segment_are_cancelled() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path(), &Entity::default()).await?;
    let run = host.start::<Mover>("mover", 0).await?;
    run.wait_until_suspended().await?;
    run.signal("move", &(), "move-1").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 1);
    let child = host.handle::<Waiter>("mover-child");
    let err = within(LIMIT, "the child's end", child.result())
        .await?
        .expect_err("the child is cancelled");
    assert!(err.to_string().contains("parent continued as new"), "{err}");
    host.shutdown().await?;
    Ok(())
}

/// Version 1 of `upgrade`: continues as new as version 2.
struct UpgradeV1;

impl Workflow for UpgradeV1 {
    const NAME: &'static str = "upgrade";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, input: String) -> reel::Result<String> {
        let seen = ctx
            .step("v1", move |_| {
                let input = input.clone();
                async move { Ok::<_, String>(format!("{input}+v1")) }
            })
            .await?;
        ctx.continue_as_new::<UpgradeV2>(seen).await
    }
}

/// Version 2 of `upgrade`.
struct UpgradeV2;

impl Workflow for UpgradeV2 {
    const NAME: &'static str = "upgrade";
    const VERSION: u32 = 2;
    type Input = String;
    type Output = String;
    async fn run(&self, _: Ctx, input: String) -> reel::Result<String> {
        Ok(format!("{input}+v2"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuing_to_an_unregistered_version_parks_until_it_is_registered() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    let host = common::hosts::open(&store, UpgradeV1).await?;
    let run = host.start::<UpgradeV1>("up", "in".to_owned()).await?;
    let err = within(LIMIT, "the park", run.result())
        .await?
        .expect_err("version 2 is not registered");
    assert!(err.to_string().contains("version 2"), "{err}");
    assert!(matches!(run.status().await?, RunStatus::Parked { .. }));
    assert_eq!(
        count(&run.events().await?, "ContinuedAsNew"),
        0,
        "log unchanged"
    );
    host.shutdown().await?;

    // A host with version 2 resumes the run: it continues as new, onto version 2.
    let host = common::hosts::open_two(&store, UpgradeV1, UpgradeV2).await?;
    let run = host.handle::<UpgradeV1>("up");
    assert_eq!(
        within(LIMIT, "the result", run.result()).await??,
        "in+v1+v2"
    );
    let info = run.info().await?;
    assert_eq!((info.version, info.segment), (2, 1));
    host.shutdown().await?;
    Ok(())
}
