//! A deleted run's id can be used again (README): the new run must not inherit
//! anything of the old one, in particular not a timer the old run had armed (its
//! run deadline, a timer that lost a race, a signal wait's timeout), neither in
//! the same host nor after a restart.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Host, RunStatus, StartOptions, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// Mode 0: races a 1 h sleep, a signal wait with a 1 h timeout and `go`, takes
/// `go` and ends. Mode 1: waits for `go` with no timer at all.
/// Mode 2: sleeps 10 h.
struct Old;
impl Workflow for Old {
    const NAME: &'static str = "old";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, mode: u32) -> reel::Result<String> {
        match mode {
            0 => {
                let nap = ctx.sleep(Duration::from_secs(3600));
                let timed = ctx.wait_for_signal_timeout::<u32>("other", Duration::from_secs(3600));
                let go = ctx.wait_for_signal::<u32>("go");
                tokio::select! {
                    _ = nap => Ok("nap".into()),
                    _ = timed => Ok("timed".into()),
                    g = go => Ok(format!("go {}", g?)),
                }
            }
            1 => Ok(format!("go {}", ctx.wait_for_signal::<u32>("go").await?)),
            _ => {
                ctx.sleep(Duration::from_secs(10 * 3600)).await?;
                Ok("slept".into())
            }
        }
    }
}

/// Sleeps an hour: its result tells that the timers due by then were handled.
struct Probe;
impl Workflow for Probe {
    const NAME: &'static str = "probe";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.sleep(Duration::from_secs(3600)).await
    }
}

async fn open(dir: &std::path::Path, clock: &TestClock) -> reel::Result<Host> {
    common::hosts::open_two_on(dir, clock, Old, Probe).await
}

async fn reuse(restart: bool, new_mode: u32) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let mut host = open(dir.path(), &clock).await?;
    let hour = StartOptions::default().timeout(Duration::from_secs(3600));
    let old = host.start_with::<Old>("id", 0, hour).await?;
    within(LIMIT, "the old run to wait", old.wait_until_suspended()).await??;
    old.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "the old run", old.result()).await??, "go 1");
    old.delete().await?;
    if restart {
        host.shutdown().await?;
        host = open(dir.path(), &clock).await?;
    }

    let new = host.start::<Old>("id", new_mode).await?;
    within(LIMIT, "the new run to wait", new.wait_until_suspended()).await??;
    let probe = host.start::<Probe>("probe", ()).await?;
    within(LIMIT, "the probe to wait", probe.wait_until_suspended()).await??;
    clock.advance(Duration::from_secs(2 * 3600));
    within(LIMIT, "the probe", probe.result()).await??;
    assert!(
        matches!(new.status().await?, RunStatus::Suspended { .. }),
        "the new run was woken by the old run's timers: {:?}\n{:?}",
        new.status().await?,
        new.events().await?
    );
    if new_mode == 1 {
        new.signal("go", &2u32, "g").await?;
        assert_eq!(within(LIMIT, "the new run", new.result()).await??, "go 2");
    } else {
        clock.advance(Duration::from_secs(9 * 3600));
        assert_eq!(within(LIMIT, "the new run", new.result()).await??, "slept");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_inherits_no_deadline_or_timer() -> anyhow::Result<()> {
    reuse(false, 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_inherits_no_timer_that_shares_its_timer_id() -> anyhow::Result<()> {
    reuse(false, 2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_after_a_restart_inherits_no_timer() -> anyhow::Result<()> {
    reuse(true, 1).await?;
    reuse(true, 2).await
}
