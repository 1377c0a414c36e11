//! Acceptance, ported from peers' own test suites: races between timers, signals
//! and steps (`select`, `select_all`), and ctx futures a handler creates and
//! drops. Each test names the peer test it ports. Time is a `TestClock`; a
//! "witness" run sleeping just past a losing timer tells when the timer service
//! has handled that timer, so no test waits on the wall clock for it.

mod common;

use std::pin::pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, until_log, waits_on, within};
use futures::future::{Either, select, select_all};
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, RunStatus, StepError, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Sleeps `for`, so that once it has completed, every timer due before it has
/// been handled by the timer service (timers fire in due order).
struct Witness;
impl Workflow for Witness {
    const NAME: &'static str = "witness";
    type Input = u64;
    type Output = ();
    async fn run(&self, ctx: Ctx, secs: u64) -> reel::Result<()> {
        ctx.sleep(Duration::from_secs(secs)).await
    }
}

fn completed_steps(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::StepCompleted { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------
// A step that beats a timer, then more work and a later sleep.
// ---------------------------------------------------------------------------

/// A step failing at once (non-retryable) raced against a 500 s timer; the step
/// wins, then a second step, then a 1,000 s sleep.
struct StepBeatsTimer {
    fast: Counter,
    second: Counter,
}
impl Workflow for StepBeatsTimer {
    const NAME: &'static str = "step-beats-timer";
    type Input = ();
    type Output = (String, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(String, u32)> {
        let timer = ctx.sleep(Duration::from_secs(500));
        let fast = ctx.step("fast", |_| async {
            let n = self.fast.bump();
            Err::<u32, _>(StepError::non_retryable(format!("fast failure {n}")))
        });
        let first = match select(pin!(fast), pin!(timer)).await {
            Either::Left((Err(Error::Step { message, .. }), _)) => message,
            Either::Left((other, _)) => return Err(Error::Failed(format!("step: {other:?}"))),
            Either::Right(_) => return Err(Error::Failed("the timer won".into())),
        };
        let second = ctx
            .step("second", |_| async {
                self.second.bump();
                Ok::<_, String>(2u32)
            })
            .await?;
        ctx.sleep(Duration::from_secs(1_000)).await?;
        Ok((first, second))
    }
}

async fn open_races(
    dir: &std::path::Path,
    clock: &TestClock,
    w: StepBeatsTimer,
) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .register(w)
        .register(Witness)
        .build()
        .await
}

/// Ports duroxide `tests/futures_tests.rs::test_select2_loser_event_consumed_during_replay`
/// (and `test_select2_schedule_after_winner_returns`): a step that wins a race
/// against a timer, then more steps; the loser timer coming due later must neither
/// wake the run's later sleep early nor make a replay diverge, and no step body
/// runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_beat_a_timer_leaves_the_later_sleep_to_its_own_time() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let (fast, second) = (Counter::default(), Counter::default());
    let wf = || StepBeatsTimer {
        fast: fast.clone(),
        second: second.clone(),
    };
    let host = open_races(dir.path(), &clock, wf()).await?;
    let run = host.start::<StepBeatsTimer>("sbt", ()).await?;
    // The witness sleeps past the loser timer (500 s) but not the later sleep.
    let witness = host.start::<Witness>("sbt-witness", 501).await?;
    within(LIMIT, "the later sleep", run.wait_until_suspended()).await??;
    assert_eq!((fast.get(), second.get()), (1, 1));

    // The loser timer comes due: the witness ends, the run must still wait.
    clock.advance(Duration::from_secs(501));
    within(LIMIT, "the witness", witness.result()).await??;
    let status = run.status().await?;
    assert!(
        matches!(status, RunStatus::Suspended { .. }),
        "the run ended or moved when its abandoned timer came due: {status:?}"
    );

    // A restart replays the whole log, the race included.
    host.shutdown().await?;
    let host = open_races(dir.path(), &clock, wf()).await?;
    let run = host.handle::<StepBeatsTimer>("sbt");
    within(LIMIT, "the replayed wait", run.wait_until_suspended()).await??;
    let status = run.status().await?;
    assert!(
        matches!(status, RunStatus::Suspended { .. }),
        "after the restart: {status:?}"
    );

    // 1,000 s after the later sleep began (at t0): it fires.
    clock.advance(Duration::from_secs(499));
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(out, ("fast failure 1".to_string(), 2));
    assert_eq!((fast.get(), second.get()), (1, 1), "a step body ran again");
    let events = run.events().await?;
    let fired = events
        .iter()
        .filter(|e| matches!(e, Event::TimerFired { .. }))
        .count();
    assert_eq!(fired, 1, "only the later sleep fired: {events:?}");
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// select_all over two waits and a timer.
// ---------------------------------------------------------------------------

#[derive(Debug)]
enum Branch {
    A(u32),
    Timer,
    B(u32),
}

/// `select_all` of a wait on `A`, a 500 s timer and a wait on `B`; then a wait on
/// the name that lost (or on both, if the timer won).
struct Atb;
impl Workflow for Atb {
    const NAME: &'static str = "atb";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let a = ctx.wait_for_signal::<u32>("A");
        let t = ctx.sleep(Duration::from_secs(500));
        let b = ctx.wait_for_signal::<u32>("B");
        type Fut = std::pin::Pin<Box<dyn Future<Output = reel::Result<Branch>> + Send>>;
        let branches: Vec<Fut> = vec![
            Box::pin(async move { a.await.map(Branch::A) }),
            Box::pin(async move { t.await.map(|()| Branch::Timer) }),
            Box::pin(async move { b.await.map(Branch::B) }),
        ];
        // The losers are dropped here, as duroxide's select3 drops them (kept
        // alive, the lost wait on `A` would still be the first wait on `A`).
        let (won, index, rest) = select_all(branches).await;
        drop(rest);
        let out = match won? {
            Branch::A(v) => {
                let other: u32 = ctx.wait_for_signal("B").await?;
                format!("{index}:A={v} then B={other}")
            }
            Branch::B(v) => {
                let other: u32 = ctx.wait_for_signal("A").await?;
                format!("{index}:B={v} then A={other}")
            }
            Branch::Timer => "timer".to_string(),
        };
        Ok(out)
    }
}

/// Ports duroxide `tests/futures_tests.rs::select3_mixed_branch_order_winner`: a
/// three-way select of a wait on `A`, a timer and a wait on `B`, with `B` sent
/// first and `A` right after: `B` wins (the first delivered, although polled
/// last), the wait on `A` that lost consumes nothing and the next wait on `A`
/// gets it; the timer never decides anything later; a restart replays the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_all_takes_the_first_delivered_wait_and_the_loser_stays_buffered()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let open = || async {
        Host::builder()
            .path(dir.path())
            .clock(clock.clone())
            .register(Atb)
            .register(Witness)
            .build()
            .await
    };
    let host = open().await?;
    let run = host.start::<Atb>("atb", ()).await?;
    until_log(&run, LIMIT, "both waits", |e| {
        waits_on(e, "A") == 1 && waits_on(e, "B") == 1
    })
    .await?;
    run.signal("B", &2u32, "b-1").await?;
    run.signal("A", &1u32, "a-1").await?;
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(out, "2:B=2 then A=1");

    // The timer coming due changes nothing; neither does a restart.
    let witness = host.start::<Witness>("atb-witness", 501).await?;
    clock.advance(Duration::from_secs(501));
    within(LIMIT, "the witness", witness.result()).await??;
    host.shutdown().await?;
    let host = open().await?;
    let run = host.handle::<Atb>("atb");
    assert_eq!(run.status().await?, RunStatus::Completed);
    assert_eq!(within(LIMIT, "the result", run.result()).await??, out);
    let replayed = reel::testing::replay(Atb, &run.events().await?).await?;
    assert!(
        matches!(&replayed, reel::testing::Replayed::Completed(o) if *o == out),
        "the log does not replay to the same end: {replayed:?}"
    );
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A signal buffered during a sleep, then raced against a timer.
// ---------------------------------------------------------------------------

/// Sleeps 100 s, then races a wait on `MyEvent` against a 500 s timer.
struct ArrivesEarly;
impl Workflow for ArrivesEarly {
    const NAME: &'static str = "arrives-early";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.sleep(Duration::from_secs(100)).await?;
        let wait = ctx.wait_for_signal::<String>("MyEvent");
        let timeout = ctx.sleep(Duration::from_secs(500));
        match select(pin!(wait), pin!(timeout)).await {
            Either::Left((v, _)) => Ok(format!("event-received:{}", v?)),
            Either::Right((t, _)) => {
                t?;
                Ok("timeout".into())
            }
        }
    }
}

/// Ports duroxide `tests/cancellation_tests.rs::positional_arrival_before_sub_outstanding`:
/// the event is raised while the run still sleeps, before it subscribes. duroxide
/// drops such an event (its result is "timeout"); reel's contract buffers it
/// ("one sent before the wait is kept"), so the wait raced against the timer wins
/// at once, with no time passing, and keeps winning after the timer's time and a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_sent_during_a_sleep_wins_the_later_race_against_a_timer() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, ArrivesEarly).await?;
    let run = host.start::<ArrivesEarly>("early", ()).await?;
    run.signal("MyEvent", "data", "evt-1").await?;
    clock.advance(Duration::from_secs(100));
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(out, "event-received:data");
    clock.advance(Duration::from_secs(600));
    host.shutdown().await?;
    let host = common::hosts::open_on(dir.path(), &clock, ArrivesEarly).await?;
    let run = host.handle::<ArrivesEarly>("early");
    assert_eq!(within(LIMIT, "the result", run.result()).await??, out);
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A wait that lost a race does not steal the next signal of its name.
// ---------------------------------------------------------------------------

/// A wait on `Signal` loses to a 50 s timer, then a second wait on `Signal`, then
/// two more waits on `Data`.
struct NoSteal;
impl Workflow for NoSteal {
    const NAME: &'static str = "no-steal";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let wait1 = ctx.wait_for_signal::<String>("Signal");
        let timeout1 = ctx.sleep(Duration::from_secs(50));
        if let Either::Left((v, _)) = select(pin!(wait1), pin!(timeout1)).await {
            return Ok(format!("unexpected_phase1:{}", v?));
        }
        let data: String = ctx.wait_for_signal("Signal").await?;
        let d1: String = ctx.wait_for_signal("Dup").await?;
        let d2: String = ctx.wait_for_signal("Dup").await?;
        Ok(format!("got:{data} {d1},{d2}"))
    }
}

/// Ports duroxide `tests/cancellation_tests.rs::cancelled_subscription_does_not_steal_future_event`
/// and `duplicate_external_events_not_deduplicated`: after a wait on a name lost
/// to a timer, the next wait on that name gets the next signal; two signals with
/// the same name and payload (but their own ids) are two deliveries; across a
/// restart between the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_lost_to_a_timer_does_not_steal_the_next_signal() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, NoSteal).await?;
    let run = host.start::<NoSteal>("no-steal", ()).await?;
    within(LIMIT, "the race", run.wait_until_suspended()).await??;
    clock.advance(Duration::from_secs(50));
    until_log(&run, LIMIT, "the second wait on Signal", |e| {
        waits_on(e, "Signal") == 2
    })
    .await?;
    run.signal("Signal", "hello", "s-1").await?;
    until_log(&run, LIMIT, "the first wait on Dup", |e| {
        waits_on(e, "Dup") == 1
    })
    .await?;
    run.signal("Dup", "same_payload", "d-1").await?;
    host.shutdown().await?;
    let host = common::hosts::open_on(dir.path(), &clock, NoSteal).await?;
    let run = host.handle::<NoSteal>("no-steal");
    run.signal("Dup", "same_payload", "d-2").await?;
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(out, "got:hello same_payload,same_payload");
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Ctx futures created and dropped without being awaited.
// ---------------------------------------------------------------------------

/// Creates a step, a 1 h timer and a signal wait and drops each unpolled; then a
/// step of the same name, a wait on the same name and a 10 s sleep, awaited.
struct Dropper {
    dropped: Counter,
    kept: Counter,
}
impl Workflow for Dropper {
    const NAME: &'static str = "dropper";
    type Input = ();
    type Output = (u32, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u32, u32)> {
        drop(ctx.step("a", |_| async {
            self.dropped.bump();
            Ok::<_, String>(1u32)
        }));
        drop(ctx.sleep(Duration::from_secs(3600)));
        drop(ctx.wait_for_signal::<u32>("x"));
        let v = ctx
            .step("a", |_| async {
                self.kept.bump();
                Ok::<_, String>(2u32)
            })
            .await?;
        let s: u32 = ctx.wait_for_signal("x").await?;
        ctx.sleep(Duration::from_secs(10)).await?;
        Ok((v, s))
    }
}

/// Ports duroxide `tests/replay_engine/unobserved_futures.rs::explicit_drop_activity_gets_cancelled`,
/// `explicit_drop_timer_no_cancel_needed` and `explicit_drop_external_wait`: ctx
/// futures dropped without being polled. The awaited step of the same name gets
/// the second id (`a#2`: ids are assigned when a primitive is called), the
/// dropped wait consumes no signal, the dropped timer never wakes the run, the
/// dropped step's body never runs, and a restart replays all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctx_futures_dropped_unpolled_take_their_ids_and_nothing_else() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let (dropped, kept) = (Counter::default(), Counter::default());
    let wf = || Dropper {
        dropped: dropped.clone(),
        kept: kept.clone(),
    };
    let host = common::hosts::open_on(dir.path(), &clock, wf()).await?;
    let run = host.start::<Dropper>("dropper", ()).await?;
    within(LIMIT, "the wait on x", run.wait_until_suspended()).await??;
    host.shutdown().await?;
    let host = common::hosts::open_on(dir.path(), &clock, wf()).await?;
    let run = host.handle::<Dropper>("dropper");
    run.signal("x", &7u32, "x-1").await?;
    until_log(&run, LIMIT, "the 10 s sleep", |e| {
        e.iter().any(
            |e| matches!(e, Event::TimerScheduled { fire_at, .. } if *fire_at == 1_800_000_010_000),
        )
    })
    .await?;
    clock.advance(Duration::from_secs(10));
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(out, (2, 7));
    assert_eq!(
        kept.get(),
        1,
        "the awaited step's body ran {} times",
        kept.get()
    );
    assert_eq!(dropped.get(), 0, "the body of a step never polled ran");
    let events = run.events().await?;
    assert_eq!(
        completed_steps(&events),
        vec!["a#2".to_string()],
        "{events:?}"
    );
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Two concurrent waits on one name, the first timed.
// ---------------------------------------------------------------------------

/// Joins a 10 s timed wait on `x` with an untimed wait on `x`.
struct TwoWaits;
impl Workflow for TwoWaits {
    const NAME: &'static str = "two-waits";
    type Input = ();
    type Output = (Option<u32>, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(Option<u32>, u32)> {
        let timed = ctx.wait_for_signal_timeout::<u32>("x", Duration::from_secs(10));
        let untimed = ctx.wait_for_signal::<u32>("x");
        let (a, b) = futures::join!(timed, untimed);
        Ok((a?, b?))
    }
}

/// Ports duroxide `tests/cancellation_tests.rs::positional_matching_fifo_without_cancellation`
/// and `cancelled_subscription_does_not_steal_future_event` with the two waits
/// pending at once: signals go to the waits in call order (FIFO); a first wait
/// that timed out consumes nothing, so a later signal goes to the second wait;
/// each answer stands after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_waits_on_one_name_take_signals_in_call_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, TwoWaits).await?;

    // Both signals before any time passes: first to the timed wait.
    let both = host.start::<TwoWaits>("both", ()).await?;
    within(LIMIT, "both waits", both.wait_until_suspended()).await??;
    both.signal("x", &1u32, "x-1").await?;
    both.signal("x", &2u32, "x-2").await?;
    assert_eq!(within(LIMIT, "both", both.result()).await??, (Some(1), 2));

    // One signal, then the deadline: the timed wait has its value already.
    let one = host.start::<TwoWaits>("one", ()).await?;
    within(LIMIT, "both waits", one.wait_until_suspended()).await??;
    one.signal("x", &1u32, "x-1").await?;
    until_log(&one, LIMIT, "the first delivery", |e| {
        e.iter().any(|e| matches!(e, Event::SignalReceived { .. }))
    })
    .await?;
    within(LIMIT, "the second wait", one.wait_until_suspended()).await??;

    // No signal before the deadline: the timed wait times out.
    let none = host.start::<TwoWaits>("none", ()).await?;
    within(LIMIT, "both waits", none.wait_until_suspended()).await??;
    clock.advance(Duration::from_secs(10));
    until_log(&none, LIMIT, "the timeout", |e| {
        e.iter().any(|e| matches!(e, Event::TimerFired { .. }))
    })
    .await?;
    within(LIMIT, "the untimed wait", none.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open_on(dir.path(), &clock, TwoWaits).await?;
    let one = host.handle::<TwoWaits>("one");
    let none = host.handle::<TwoWaits>("none");
    one.signal("x", &2u32, "x-2").await?;
    none.signal("x", &3u32, "x-3").await?;
    assert_eq!(within(LIMIT, "one", one.result()).await??, (Some(1), 2));
    assert_eq!(within(LIMIT, "none", none.result()).await??, (None, 3));
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A signal to another run, dropped before it is sent.
// ---------------------------------------------------------------------------

/// Takes one `m`, then waits 10 s for a second.
struct Inbox;
impl Workflow for Inbox {
    const NAME: &'static str = "inbox";
    type Input = ();
    type Output = (String, Option<String>);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(String, Option<String>)> {
        let first: String = ctx.wait_for_signal("m").await?;
        let second = ctx
            .wait_for_signal_timeout::<String>("m", Duration::from_secs(10))
            .await?;
        Ok((first, second))
    }
}

/// Creates a send to `inbox` and drops it unpolled, sends another, then waits
/// for `go`.
struct DropsASend;
impl Workflow for DropsASend {
    const NAME: &'static str = "drops-a-send";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        drop(ctx.signal("inbox", "m", "dropped", "m-1"));
        ctx.signal("inbox", "m", "kept", "m-2").await?;
        ctx.wait_for_signal("go").await
    }
}

/// Ports Temporal sdk-core `crates/sdk-core/tests/integ_tests/workflow_tests/signals.rs::cancels_before_sending`:
/// a signal to another run whose future is dropped before it is polled is never
/// sent; the next send is, once, and a restart of the sender (its replay) sends
/// nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_dropped_before_it_is_polled_is_never_sent() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let open = || async {
        Host::builder()
            .path(dir.path())
            .clock(clock.clone())
            .register(Inbox)
            .register(DropsASend)
            .build()
            .await
    };
    let host = open().await?;
    let inbox = host.start::<Inbox>("inbox", ()).await?;
    let sender = host.start::<DropsASend>("sender", ()).await?;
    within(LIMIT, "the sender's wait", sender.wait_until_suspended()).await??;
    host.shutdown().await?;
    let host = open().await?;
    let sender = host.handle::<DropsASend>("sender");
    sender.signal("go", &(), "go-1").await?;
    within(LIMIT, "the sender", sender.result()).await??;
    let inbox = host.handle::<Inbox>(inbox.id());
    within(LIMIT, "the timed wait", async {
        loop {
            let e = inbox.events().await?;
            if waits_on(&e, "m") == 2 {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    within(LIMIT, "the inbox waiting", inbox.wait_until_suspended()).await??;
    clock.advance(Duration::from_secs(10));
    let out = within(LIMIT, "the inbox", inbox.result()).await??;
    assert_eq!(out, ("kept".to_string(), None));
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A running step that loses to a signal, then continue-as-new.
// ---------------------------------------------------------------------------

static HOP_GATE: common::Gate = common::Gate::new();

/// Races step `work` against a `hop` signal; on `hop` continues as new. In
/// segment 0 the step's body holds until the test opens `HOP_GATE`.
struct HopOverWork {
    began: Counter,
    finished: Counter,
}
impl Workflow for HopOverWork {
    const NAME: &'static str = "hop-over-work";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<String> {
        let work = ctx.step("work", |_| async {
            self.began.bump();
            if segment == 0 {
                HOP_GATE.wait().await;
            }
            self.finished.bump();
            Ok::<_, String>(format!("work@{segment}"))
        });
        let hop = ctx.wait_for_signal::<()>("hop");
        match select(pin!(work), pin!(hop)).await {
            Either::Left((v, _)) => v,
            Either::Right((h, _)) => {
                h?;
                ctx.continue_as_new::<HopOverWork>(segment + 1).await
            }
        }
    }
}

/// Ports duroxide `tests/cancellation_tests.rs::select2_loser_activity_receives_cancellation_signal`
/// across a continue-as-new: a step still running when a signal wins the race
/// is dropped (README: "the losing step's body is dropped and never runs
/// again"), the run continues as new, and the new segment's step of the same
/// name runs once and completes it; the old body never finishes, even once
/// released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_step_that_lost_to_a_signal_stays_dropped_across_continue_as_new()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (began, finished) = (Counter::default(), Counter::default());
    let host = common::hosts::open(
        dir.path(),
        HopOverWork {
            began: began.clone(),
            finished: finished.clone(),
        },
    )
    .await?;
    let run = host.start::<HopOverWork>("hop-over", 0).await?;
    until_log(&run, LIMIT, "the race", |e| waits_on(e, "hop") == 1).await?;
    within(LIMIT, "the step body", async {
        while began.get() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    run.signal("hop", &(), "hop-1").await?;
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(out, "work@1");
    HOP_GATE.open();
    // Give a body that was not dropped every chance to finish.
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert_eq!((began.get(), finished.get()), (2, 1));
    let events = run.events().await?;
    assert_eq!(completed_steps(&events), vec!["work".to_string()]);
    host.shutdown().await?;
    Ok(())
}
