//! Acceptance: a `select!` between two approvals and a timer keeps the branch that
//! won live, also on replay after a restart; a late decision stays buffered for
//! the next wait on its name; `signal_with_start` reaches a parked run.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Races approvals `a` and `b` and a one-hour timer, waits for `after`, then takes
/// one more approval on `a`.
struct Race;
impl Workflow for Race {
    const NAME: &'static str = "race";
    type Input = ();
    type Output = (String, bool);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(String, bool)> {
        let won = tokio::select! {
            biased;
            a = ctx.approval("a") => format!("a:{}", a?.approved),
            b = ctx.approval("b") => format!("b:{}", b?.approved),
            t = ctx.sleep(Duration::from_secs(3600)) => { t?; "timer".to_owned() }
        };
        let _: () = ctx.wait_for_signal("after").await?;
        let next = ctx.approval("a").await?;
        Ok((won, next.approved))
    }
}

static FIXED: AtomicBool = AtomicBool::new(false);

/// Panics after its first wait until fixed; then returns the signals it got.
struct Fragile;
impl Workflow for Fragile {
    const NAME: &'static str = "fragile";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let first: u32 = ctx.wait_for_signal("n").await?;
        if !FIXED.load(Ordering::SeqCst) {
            panic!("broken");
        }
        let second: u32 = ctx.wait_for_signal("n").await?;
        Ok(vec![first, second])
    }
}

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

async fn host(dir: &std::path::Path, clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .restart_limit(2, Duration::from_secs(60))
        .register(Race)
        .register(Fragile)
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_that_won_live_wins_on_replay_and_a_late_one_stays_buffered()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = host(dir.path(), &clock).await?;
    let run = host.start::<Race>("r", ()).await?;
    within(LIMIT, "the race", run.wait_until_suspended()).await??;
    run.approve("b", false, None).await?;
    within(LIMIT, "the wait on `after`", async {
        loop {
            if let RunStatus::Suspended { waiting_on } = run.status().await?
                && waiting_on.contains("after")
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    // The loser `a` gets its decision late: it stays buffered for the next wait.
    run.approve("a", true, Some("late".into())).await?;
    host.shutdown().await?;
    // Past the timer's due time while no host ran: the timer lost, it must not win.
    clock.advance(Duration::from_secs(7200));
    let host = self::host(dir.path(), &clock).await?;
    let run = host.handle::<Race>("r");
    run.signal("after", &(), "s-1").await?;
    let got = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(got, ("b:false".to_owned(), true));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_with_start_reaches_a_parked_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = host(dir.path(), &clock).await?;
    let run = host
        .signal_with_start::<Fragile, _>("frag", (), "n", &1u32, "n-1")
        .await?;
    within(LIMIT, "the crash loop to park it", async {
        loop {
            if matches!(run.status().await?, RunStatus::Parked { .. }) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await??;
    // A parked run has not ended: the call signals it, and creates nothing.
    host.signal_with_start::<Fragile, _>("frag", (), "n", &2u32, "n-2")
        .await?;
    FIXED.store(true, Ordering::SeqCst);
    run.retry().await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, [1, 2]);
    assert_eq!(host.runs().await?.len(), 1);
    host.shutdown().await?;
    Ok(())
}
