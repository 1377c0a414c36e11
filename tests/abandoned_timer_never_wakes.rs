//! A timer the run no longer waits for leaves the due-time index and the timer
//! service when it is settled, so its old due time wakes nothing (issue 11): the
//! deadline of a timed signal wait whose signal came first, and a timer that lost a
//! `select!` to a signal. A run woken for nothing would be activated from disk and
//! replay its whole log. Time is a `TestClock` moved by the test: the deadlines
//! pass only when the test says so, after the signals were consumed.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use reel::testing::TestClock;
use reel::{Clock, Ctx, Event, FjallStore, Host, Workflow};

use common::counting::{CountingStore, Op};
use common::{until_log, waits_on, within};

/// How long the abandoned timers run (on the test clock).
const DEADLINE: Duration = Duration::from_secs(3600);

/// A timed signal wait that its signal satisfies, then a wait that never ends.
struct Timed;
impl Workflow for Timed {
    const NAME: &'static str = "timed";
    type Input = ();
    type Output = bool;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<bool> {
        let got = ctx
            .wait_for_signal_timeout::<u32>("go", DEADLINE)
            .await?
            .is_some();
        ctx.wait_for_signal::<u32>("end").await?;
        Ok(got)
    }
}

/// A timer racing a signal; the signal wins. Then a wait that never ends.
struct Race;
impl Workflow for Race {
    const NAME: &'static str = "race";
    type Input = ();
    type Output = bool;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<bool> {
        let signalled = futures::select! {
            _ = ctx.sleep(DEADLINE).fuse() => false,
            s = ctx.wait_for_signal::<u32>("go").fuse() => { s?; true }
        };
        ctx.wait_for_signal::<u32>("end").await?;
        Ok(signalled)
    }
}

/// Sleeps past the other runs' deadlines: the timer service fires timers in due
/// order, so once its timer has fired, theirs were due and handled.
struct Witness;
impl Workflow for Witness {
    const NAME: &'static str = "witness";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.sleep(DEADLINE + Duration::from_millis(100)).await
    }
}

/// Operations that touch `run`: an activation reads its metadata and its log.
fn touches(store: &CountingStore, run: &str) -> [u64; 3] {
    [Op::GetRun, Op::ReadLog, Op::Submit].map(|op| store.count(op, |r| r == run))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_timers_do_not_wake_the_run_when_they_come_due() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = CountingStore::new(FjallStore::open(dir.path())?);
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let start: SystemTime = clock.now();
    let host = Host::builder()
        .store(store.clone())
        .clock(clock.clone())
        .register(Timed)
        .register(Race)
        .register(Witness)
        .passivate_after(Duration::from_millis(1))
        .build()
        .await?;
    let timed = host.start::<Timed>("timed", ()).await?;
    let race = host.start::<Race>("race", ()).await?;
    timed.wait_until_suspended().await?;
    race.wait_until_suspended().await?;
    timed.signal("go", &1u32, "go-timed").await?;
    race.signal("go", &1u32, "go-race").await?;
    // Both handlers took the signal and moved on to their last wait.
    let limit = Duration::from_secs(10);
    let timed_log = until_log(&timed, limit, "timed's last wait", |e| {
        waits_on(e, "end") == 1
    })
    .await?;
    let race_log = until_log(&race, limit, "race's last wait", |e| {
        waits_on(e, "end") == 1
    })
    .await?;
    // The signal came first (else the premise of this test does not hold).
    for log in [&timed_log, &race_log] {
        assert!(
            !log.iter().any(|e| matches!(e, Event::TimerFired { .. })),
            "the deadline passed before the signal was consumed: {log:#?}"
        );
    }
    // The settled timers left the due-time index.
    let left: Vec<_> = store
        .timers()?
        .into_iter()
        .filter(|t| t.run_id == "timed" || t.run_id == "race")
        .collect();
    assert!(left.is_empty(), "settled timers still indexed: {left:?}");
    // Everything is passivated: a timer that still woke a run would activate it.
    within(limit, "passivation", async {
        while host.live_runs().await > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await?;
    let before = [touches(&store, "timed"), touches(&store, "race")];

    // The witness's timer comes due after the abandoned ones: once the clock has
    // passed it, the witness has fired and the host is quiet again, the old due
    // times have passed.
    let witness = host.start::<Witness>("witness", ()).await?;
    witness.wait_until_suspended().await?;
    clock.advance(DEADLINE + Duration::from_secs(60));
    within(limit, "the witness's timer", witness.result()).await??;
    assert!(clock.now() > start + DEADLINE);
    within(limit, "quiet", async {
        while host.live_runs().await > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await?;
    let after = [touches(&store, "timed"), touches(&store, "race")];
    assert_eq!(before, after, "a settled timer activated its run");
    for (now, log) in [
        (timed.events().await?, timed_log),
        (race.events().await?, race_log),
    ] {
        assert_eq!(now, log, "events appended after the timer settled");
    }
    host.shutdown().await?;
    Ok(())
}
