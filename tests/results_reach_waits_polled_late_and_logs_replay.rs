//! The per-step hot path (the journal lends its events to the store, held events
//! stay at the end of its tail, the driver polls the handler only when its waker
//! fired): waits called long before they are first polled still get the
//! results the walk delivered to them without a waker; a cancel reaching slots no
//! future polls yet ends the run; combinators (`FuturesUnordered`, `select!`,
//! `join!`) and bodies that only yield make progress; and every log written this
//! way holds each opening once and replays to the same result, also after a
//! restart of the host.

mod common;

use std::time::Duration;

use common::within;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Calls a timer and a signal wait it polls only after another wait returned.
struct Late;
impl Workflow for Late {
    const NAME: &'static str = "late";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let timer = ctx.sleep(Duration::from_millis(20));
        let a = ctx.wait_for_signal::<u32>("a");
        let b: u32 = ctx.wait_for_signal("b").await?;
        let a = a.await?;
        timer.await?;
        let drawn = ctx.random_u64().await?;
        let one: u32 = ctx.step("one", |_| async { Ok::<_, String>(1u32) }).await?;
        let _ = drawn;
        Ok(a * 100 + b * 10 + one)
    }
}

/// A step whose body never ends, joined with a wait, and a timer and a wait
/// it never polls: a cancel ends them all.
struct Cancelling;
impl Workflow for Cancelling {
    const NAME: &'static str = "cancelling";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let _never_polled = ctx.sleep(Duration::from_secs(3600));
        let _nor_this = ctx.wait_for_signal::<u32>("never");
        let slow = ctx.step("slow", |_| async {
            std::future::pending::<()>().await;
            Ok::<_, String>(1u32)
        });
        let wait = ctx.wait_for_signal::<u32>("a");
        let (slow, wait) = futures::future::join(slow, wait).await;
        match (slow, wait) {
            (Err(Error::Cancelled(reason)), _) | (_, Err(Error::Cancelled(reason))) => {
                ctx.shielded()
                    .step("cleanup", |_| async { Ok::<_, String>(()) })
                    .await?;
                Err(Error::Cancelled(reason))
            }
            (Ok(a), Ok(b)) => Ok(a + b),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }
}

/// Steps in a `FuturesUnordered` whose bodies yield many times, then a loop of
/// `select!` between a signal and a timer.
struct Mixed;
impl Workflow for Mixed {
    const NAME: &'static str = "mixed";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let mut steps: FuturesUnordered<_> = (0..n)
            .map(|i| {
                ctx.step(&format!("s{i}"), move |_| async move {
                    for _ in 0..50 {
                        tokio::task::yield_now().await;
                    }
                    Ok::<_, String>(i)
                })
            })
            .collect();
        let mut sum = 0;
        while let Some(v) = steps.next().await {
            sum += v?;
        }
        let mut got = 0;
        for _ in 0..3 {
            let signal = ctx.wait_for_signal::<u32>("tick");
            let timer = ctx.sleep(Duration::from_secs(3600));
            tokio::select! {
                v = signal => got += v?,
                t = timer => { t?; }
            }
        }
        let (x, y) = tokio::join!(
            ctx.step("x", |_| async { Ok::<_, String>(1u32) }),
            ctx.wait_for_signal::<u32>("last"),
        );
        Ok(sum + got + x? + y?)
    }
}

fn openings_once(events: &[Event]) {
    let mut seen = std::collections::HashSet::new();
    for e in events {
        let key = match e {
            Event::StepStarted { id, attempt } => format!("started {id} {attempt}"),
            Event::StepCompleted { id, .. } => format!("completed {id}"),
            Event::SignalAwaited { id, .. } => format!("awaited {id}"),
            Event::TimerScheduled { id, .. } => format!("scheduled {id}"),
            Event::Recorded { id, .. } => format!("recorded {id}"),
            _ => continue,
        };
        assert!(seen.insert(key.clone()), "{key} twice in {events:#?}");
    }
}

async fn open(path: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(Late)
        .register(Cancelling)
        .register(Mixed)
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_delivered_before_their_wait_is_polled_are_not_lost() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    for i in 0..20u32 {
        let id = format!("late{i}");
        let run = host.start::<Late>(&id, ()).await?;
        within(LIMIT, "suspended", run.wait_until_suspended()).await??;
        host.run(&id).signal("a", &3u32, "a").await?;
        // Half the runs get the second signal later: a varied interleaving, not a
        // wait for an event (the checks hold either way).
        if i % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        host.run(&id).signal("b", &2u32, "b").await?;
        let v = within(LIMIT, "the result", run.result()).await??;
        assert_eq!(v, 321);
        let events = host.run(&id).events().await?;
        openings_once(&events);
        match reel::testing::replay(Late, &events).await? {
            reel::testing::Replayed::Completed(r) => assert_eq!(r, v),
            other => panic!("replay: {other:?}"),
        }
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_ends_slots_no_future_polls_yet() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    for i in 0..10u32 {
        let id = format!("c{i}");
        let run = host.start::<Cancelling>(&id, ()).await?;
        // Half the runs are cancelled later: a varied interleaving, not a wait.
        if i % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        host.run(&id).cancel("stop").await?;
        let r = within(LIMIT, "the result", run.result()).await?;
        assert!(matches!(r, Err(Error::Cancelled(_))), "{r:?}");
        assert_eq!(host.run(&id).status().await?, RunStatus::Cancelled);
        let events = host.run(&id).events().await?;
        openings_once(&events);
        common::log_checks::ends_cancelled(&events);
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combinators_progress_and_their_logs_replay_after_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ids: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
    {
        let host = open(dir.path()).await?;
        for (i, id) in ids.iter().enumerate() {
            let run = host.start::<Mixed>(id, 4 + i as u32).await?;
            for t in 0..3u32 {
                within(LIMIT, "suspended", run.wait_until_suspended()).await??;
                host.run(id)
                    .signal("tick", &(t + 1), &format!("t{t}"))
                    .await?;
            }
            if i % 2 == 0 {
                // The last signal waits for the restart.
                continue;
            }
            host.run(id).signal("last", &10u32, "last").await?;
            let n = 4 + i as u32;
            let expected = (0..n).sum::<u32>() + 6 + 1 + 10;
            assert_eq!(within(LIMIT, "the result", run.result()).await??, expected);
        }
        host.shutdown().await?;
    }
    let host = open(dir.path()).await?;
    for (i, id) in ids.iter().enumerate() {
        let n = 4 + i as u32;
        let expected = (0..n).sum::<u32>() + 6 + 1 + 10;
        if i % 2 == 0 {
            host.run(id).signal("last", &10u32, "last").await?;
        }
        let v: u32 = within(LIMIT, "the result", host.run(id).result()).await??;
        assert_eq!(v, expected, "{id}");
        let events = host.run(id).events().await?;
        openings_once(&events);
        match reel::testing::replay(Mixed, &events).await? {
            reel::testing::Replayed::Completed(r) => assert_eq!(r, expected),
            other => panic!("replay of {id}: {other:?}"),
        }
    }
    host.shutdown().await?;
    Ok(())
}
