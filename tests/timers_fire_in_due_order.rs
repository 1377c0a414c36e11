//! Adversarial timer tests: zero-length and past timers, many timers of the same due
//! time, completion order of concurrent timers across a restart, timers racing
//! signals in `select!`, many steps in one run.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, within};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use reel::testing::TestClock;
use reel::{Clock, Ctx, Event, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
const HOUR: Duration = Duration::from_secs(3600);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Zero sleeps, a sleep until the epoch and a sleep until "now": all end without
/// the clock moving.
struct Instant;
impl Workflow for Instant {
    const NAME: &'static str = "instant";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let mut n = 0;
        for _ in 0..5 {
            ctx.sleep(Duration::ZERO).await?;
            n += 1;
        }
        ctx.sleep_until(UNIX_EPOCH).await?;
        ctx.sleep_until(UNIX_EPOCH - Duration::from_secs(10))
            .await?; // before the epoch
        let now = ctx.now().await?;
        ctx.sleep_until(now).await?;
        let (a, b) = futures::join!(ctx.sleep(Duration::ZERO), ctx.sleep(Duration::ZERO));
        a?;
        b?;
        Ok(n)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_and_past_timers_fire_without_the_clock_moving() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, Instant).await?;
    let run = host.start::<Instant>("i", ()).await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, 5);
    assert_eq!(clock.now(), t0());
    let fired = run
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, Event::TimerFired { .. }))
        .count();
    assert_eq!(fired, 10);
    host.shutdown().await?;
    Ok(())
}

/// Fifty timers of one due time, joined.
struct Same;
impl Workflow for Same {
    const NAME: &'static str = "same";
    type Input = ();
    type Output = SystemTime;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<SystemTime> {
        let start = ctx.now().await?;
        let due = start + HOUR;
        let mut all = Vec::new();
        for i in 0..50 {
            if i % 2 == 0 {
                all.push(futures::future::Either::Left(ctx.sleep(HOUR)));
            } else {
                all.push(futures::future::Either::Right(ctx.sleep_until(due)));
            }
        }
        futures::future::try_join_all(all).await?;
        ctx.now().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_timers_of_one_due_time_all_fire_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(&path, &clock, Same).await?;
    let run = host.start::<Same>("same", ()).await?;
    run.wait_until_suspended().await?;
    host.shutdown().await?;
    clock.advance(HOUR);
    let host = common::hosts::open_on(&path, &clock, Same).await?;
    let run = host.handle::<Same>("same");
    assert_eq!(within(LIMIT, "result", run.result()).await??, t0() + HOUR);
    let events = run.events().await?;
    let mut fired: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::TimerFired { id } => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(fired.len(), 50, "{fired:?}");
    fired.sort();
    fired.dedup();
    assert_eq!(fired.len(), 50, "each timer fired once");
    host.shutdown().await?;
    Ok(())
}

/// Timers of different lengths in a FuturesUnordered, each branch's end recorded by
/// a step, so the order the handler saw them end is in the log.
struct Order;
impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let mut all = FuturesUnordered::new();
        for h in [3u32, 1, 2] {
            let ctx = ctx.clone();
            all.push(async move {
                ctx.sleep(HOUR * h).await?;
                reel::Result::<u32>::Ok(h)
            });
        }
        let mut order = Vec::new();
        while let Some(h) = all.next().await {
            let h = h?;
            let h = ctx
                .step("seen", move |_| async move { Ok::<_, String>(h) })
                .await?;
            order.push(h);
        }
        Ok(order)
    }
}

/// Timers that are overdue together (the clock jumped past several, or they came
/// due while no host ran) fire in due-time order, as with a clock moving steadily:
/// 1, 2, 3 hours. (They fired in the order the timer service's delivery tasks
/// happened to run, so the handler could see a 3-hour sleep end first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_overdue_together_fire_in_due_order() -> anyhow::Result<()> {
    for i in 0..10 {
        let dir = tempfile::tempdir()?;
        let clock = TestClock::new(t0());
        let host = common::hosts::open_on(dir.path(), &clock, Order).await?;
        let run = host.start::<Order>("o", ()).await?;
        run.wait_until_suspended().await?;
        clock.advance(HOUR * 3); // all three are due at once
        let got = within(LIMIT, "result", run.result()).await??;
        let log: Vec<String> = run
            .events()
            .await?
            .iter()
            .map(|e| format!("{e:?}").chars().take(90).collect())
            .collect();
        assert_eq!(got, vec![1, 2, 3], "iteration {i}: {log:#?}");
        host.shutdown().await?;
    }
    Ok(())
}

/// A timer against a signal in `select!`, in a loop: each round's winner is kept.
struct Rounds;
impl Workflow for Rounds {
    const NAME: &'static str = "rounds";
    type Input = u32;
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<String>> {
        let mut out = Vec::new();
        for _ in 0..n {
            let sig = ctx.wait_for_signal::<String>("s");
            let tmr = ctx.sleep(HOUR);
            tokio::pin!(sig, tmr);
            tokio::select! {
                s = &mut sig => out.push(s?),
                t = &mut tmr => { t?; out.push("timer".to_owned()) }
            }
        }
        Ok(out)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timer_and_signal_rounds_keep_each_winner_and_late_signals_buffer() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let clock = TestClock::new(t0());
    let open = || common::hosts::open_on(&path, &clock, Rounds);
    let host = open().await?;
    let run = host.start::<Rounds>("r", 4).await?;
    let waits = |k: usize| {
        let run = run.clone();
        async move {
            common::until_log(&run, LIMIT, "k-th wait", move |e| {
                common::waits_on(e, "s") >= k
            })
            .await
        }
    };
    // Round 1: the signal wins.
    waits(1).await?;
    run.signal("s", "a", "a").await?;
    // Round 2: the timer wins.
    waits(2).await?;
    clock.advance(HOUR);
    // Round 3: the signal wins; round 4: its timer comes due while no host runs.
    waits(3).await?;
    run.signal("s", "b", "b").await?;
    waits(4).await?;
    host.shutdown().await?;
    clock.advance(HOUR);
    let host = open().await?;
    let run = host.handle::<Rounds>("r");
    assert_eq!(
        within(LIMIT, "result", run.result()).await??,
        vec!["a", "timer", "b", "timer"]
    );
    host.shutdown().await?;
    Ok(())
}

/// Thousands of steps in one run, some with the same name (ids `name#k`), and a
/// restart replaying them without running any body again.
struct Many {
    bodies: Counter,
}
impl Workflow for Many {
    const NAME: &'static str = "many";
    type Input = u32;
    type Output = u64;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u64> {
        let mut sum = 0u64;
        for i in 0..n {
            sum += ctx
                .step("add", |_| async move {
                    self.bodies.bump();
                    Ok::<_, String>(u64::from(i))
                })
                .await?;
        }
        let _: () = ctx.wait_for_signal("end").await?;
        Ok(sum)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_steps_replay_after_a_restart_without_rerunning() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let bodies = Counter::default();
    let open = || {
        common::hosts::open(
            &path,
            Many {
                bodies: bodies.clone(),
            },
        )
    };
    let host = open().await?;
    let run = host.start::<Many>("many", 2000).await?;
    within(LIMIT, "suspension", run.wait_until_suspended()).await??;
    assert_eq!(bodies.get(), 2000);
    host.shutdown().await?;
    let host = open().await?;
    let run = host.handle::<Many>("many");
    run.signal("end", &(), "e").await?;
    assert_eq!(
        within(LIMIT, "result", run.result()).await??,
        (0..2000u64).sum::<u64>()
    );
    assert_eq!(bodies.get(), 2000, "no body ran again");
    let ids: Vec<String> = run
        .events()
        .await?
        .iter()
        .filter_map(|e| match e {
            Event::StepCompleted { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids[0], "add");
    assert_eq!(ids[1], "add#2");
    assert_eq!(ids[1999], "add#2000");
    host.shutdown().await?;
    Ok(())
}

/// A long sleep while the test clock auto-skips, with a short one raced in a
/// select: the short one wins and the long one never wakes the run again.
struct ShortWins;
impl Workflow for ShortWins {
    const NAME: &'static str = "short-wins";
    type Input = ();
    type Output = SystemTime;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<SystemTime> {
        {
            let long = ctx.sleep(HOUR * 24 * 365);
            let short = ctx.sleep(HOUR);
            tokio::pin!(long, short);
            tokio::select! {
                _ = &mut long => return Err(reel::Error::failed("long won")),
                r = &mut short => r?,
            }
        }
        let then = ctx.now().await?;
        ctx.sleep(HOUR).await?;
        assert!(ctx.now().await? >= then);
        Ok(then)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_long_timer_does_not_hold_the_auto_clock() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let host = common::hosts::open_on(dir.path(), &clock, ShortWins).await?;
    let run = host.start::<ShortWins>("sw", ()).await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, t0() + HOUR);
    assert!(
        clock.now() < t0() + HOUR * 24,
        "the clock went to {:?}",
        clock.now()
    );
    host.shutdown().await?;
    Ok(())
}

/// Waits for a signal for at most an hour.
struct TimedWait;
impl Workflow for TimedWait {
    const NAME: &'static str = "timed-wait";
    type Input = ();
    type Output = Option<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Option<String>> {
        ctx.wait_for_signal_timeout("s", HOUR).await
    }
}

/// A deadline that passed while no host ran is earlier than a signal sent after
/// the restart, so the wait times out, as it does when the host stays up (and as
/// on Temporal, whose server fires the timer at its time whether a worker runs or
/// not): the signal's delivery records the run's overdue timers first. (The late
/// signal used to be recorded first, the overdue timer coming later from the timer
/// service.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_passed_while_down_beats_a_signal_sent_after_the_restart() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let clock = TestClock::new(t0());
    let open = || common::hosts::open_on(&path, &clock, TimedWait);
    for i in 0..10 {
        let host = open().await?;
        let id = format!("tw-{i}");
        let run = host.start::<TimedWait>(&id, ()).await?;
        run.wait_until_suspended().await?;
        host.shutdown().await?;
        clock.advance(HOUR * 2);
        let host = open().await?;
        let run = host.handle::<TimedWait>(&id);
        let sent = run.signal("s", "too late", "late").await;
        let got = within(LIMIT, "result", run.result()).await??;
        assert_eq!(got, None, "iteration {i} (send: {sent:?})");
        host.shutdown().await?;
    }
    Ok(())
}
