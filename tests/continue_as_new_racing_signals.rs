//! Continue-as-new racing signals from many senders (none lost, none duplicated),
//! and a `select!` between a step and a timer decided once across passivation and
//! restarts.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::pin::pin;
use std::sync::Mutex;
use std::time::Duration;

use common::within;
use futures::future::{Either, select};
use reel::{Ctx, Error, Event, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// Each segment takes at most two `add` signals, each raced against a short timer,
/// then continues as new with what it has. `None` ends the run.
struct Hopper;

impl Workflow for Hopper {
    const NAME: &'static str = "hopper";
    type Input = Vec<String>;
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, mut got: Vec<String>) -> reel::Result<Vec<String>> {
        for _ in 0..2 {
            let wait = ctx.wait_for_signal::<Option<String>>("add");
            let tick = ctx.sleep(Duration::from_millis(2));
            match select(pin!(wait), pin!(tick)).await {
                Either::Left((v, _)) => match v? {
                    Some(v) => got.push(v),
                    None => return Ok(got),
                },
                Either::Right((t, _)) => t?,
            }
        }
        ctx.continue_as_new::<Hopper>(got).await
    }
}

async fn hop(passivate: Duration) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_passivating(dir.path(), Hopper, passivate).await?;
    for iter in 0..4 {
        let run = host
            .start::<Hopper>(&format!("h{iter}"), Vec::new())
            .await?;
        let mut tasks = Vec::new();
        for s in 0..4 {
            let run = run.clone();
            tasks.push(tokio::spawn(async move {
                for k in 0..12 {
                    let id = format!("{s}-{k}");
                    run.signal("add", &Some(id.clone()), &id).await?;
                }
                Ok::<(), Error>(())
            }));
        }
        for t in tasks {
            within(LIMIT, "a sender", t).await???;
        }
        run.signal("add", &None::<String>, "stop").await?;
        let got = within(LIMIT, "the result", run.result()).await??;
        let unique: BTreeSet<&String> = got.iter().collect();
        assert_eq!(
            unique.len(),
            got.len(),
            "iteration {iter}: a duplicate in {got:?}"
        );
        assert_eq!(got.len(), 48, "iteration {iter}: lost signals: {got:?}");
        for s in 0..4 {
            let mine: Vec<u32> = got
                .iter()
                .filter_map(|v| v.strip_prefix(&format!("{s}-")))
                .filter_map(|k| k.parse().ok())
                .collect();
            assert_eq!(
                mine,
                (0..12).collect::<Vec<_>>(),
                "iteration {iter}: sender {s}"
            );
        }
        let segments = run
            .events()
            .await?
            .iter()
            .filter(|e| matches!(e, Event::ContinuedAsNew { .. }))
            .count();
        assert!(segments >= 1, "iteration {iter}: it continued as new");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_racing_concurrent_signals_loses_and_duplicates_none() -> anyhow::Result<()>
{
    hop(Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_racing_signals_and_passivation_loses_and_duplicates_none()
-> anyhow::Result<()> {
    hop(Duration::ZERO).await
}

/// Step bodies that really ran, per run id.
static BODIES: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

/// A quick step raced against a zero timer; the winner is reported after a
/// signal, so the run is replayed (passivated or restarted) in between.
struct Racer;

impl Workflow for Racer {
    const NAME: &'static str = "racer";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let me = ctx.run_id().to_owned();
        let step = ctx.step("quick", |_| {
            let me = me.clone();
            async move {
                *BODIES
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(me)
                    .or_insert(0) += 1;
                tokio::task::yield_now().await;
                Ok::<_, String>(7u32)
            }
        });
        let timer = ctx.sleep(Duration::ZERO);
        let winner = match select(pin!(step), pin!(timer)).await {
            Either::Left((v, _)) => format!("step:{}", v?),
            Either::Right((t, _)) => {
                t?;
                "timer".to_owned()
            }
        };
        ctx.wait_for_signal::<()>("done").await?;
        Ok(winner)
    }
}

/// The winner the log says: whichever of the step's completion and the timer's
/// firing comes first.
fn log_winner(events: &[Event]) -> Option<String> {
    events.iter().find_map(|e| match e {
        Event::StepCompleted { id, .. } if id == "quick" => Some("step:7".to_owned()),
        Event::TimerFired { .. } => Some("timer".to_owned()),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_against_zero_timer_is_decided_once_across_restarts() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = |passivate: Duration| common::hosts::open_passivating(dir.path(), Racer, passivate);
    let mut winners = BTreeMap::new();
    for iter in 0..20 {
        let id = format!("r{iter}");
        let host = open(Duration::ZERO).await?;
        let run = host.start::<Racer>(&id, ()).await?;
        within(LIMIT, "the wait", run.wait_until_suspended()).await??;
        let before = log_winner(&run.events().await?);
        host.shutdown().await?;
        // Reopen: the run replays the race (and the step must not run again).
        let host = open(Duration::ZERO).await?;
        let run = host.handle::<Racer>(&id);
        run.signal("done", &(), "done").await?;
        let winner = within(LIMIT, "the result", run.result()).await??;
        let events = run.events().await?;
        assert_eq!(
            Some(winner.clone()),
            log_winner(&events),
            "iteration {iter}"
        );
        assert_eq!(
            before,
            log_winner(&events),
            "iteration {iter}: the log's winner moved"
        );
        let bodies = BODIES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .copied()
            .unwrap_or(0);
        let completed = events
            .iter()
            .any(|e| matches!(e, Event::StepCompleted { id, .. } if id == "quick"));
        assert!(bodies <= 1, "iteration {iter}: the step ran {bodies} times");
        if winner == "timer" {
            // The step lost: no result of it may reach the handler afterwards, and
            // its body did not run after the restart.
            assert!(!completed || bodies == 1, "iteration {iter}");
        }
        *winners.entry(winner).or_insert(0) += 1;
        host.shutdown().await?;
        let _ = Error::Shutdown;
    }
    eprintln!("winners: {winners:?}");
    Ok(())
}
