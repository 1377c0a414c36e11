//! Acceptance: `RunInfo::updated_at` moves with the run's state and `log.bytes`
//! grows with its segment; a zero or an unreached run deadline behaves.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Error, Host, RunStatus, StartOptions, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// A step, then waits for `go`, then a step.
struct Flow;
impl Workflow for Flow {
    const NAME: &'static str = "flow";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("a", |_| async { Ok::<_, String>(1u32) }).await?;
        let n: u32 = ctx.wait_for_signal("go").await?;
        ctx.step("b", |_| async move { Ok::<_, String>(n) }).await
    }
}

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

async fn host(dir: &std::path::Path, clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .register(Flow)
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updated_at_follows_the_state_and_the_log_size_grows() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = host(dir.path(), &clock).await?;
    let run = host.start::<Flow>("f", ()).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    let before = run.info().await?;
    assert_eq!(before.created_at, t0());
    clock.advance(Duration::from_secs(60));
    run.signal("go", &5u32, "g").await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 5);
    let after = run.info().await?;
    assert_eq!(after.status, RunStatus::Completed);
    assert_eq!(after.created_at, t0(), "the creation time stays");
    assert_eq!(
        after.updated_at,
        t0() + Duration::from_secs(60),
        "the state changed at the later time"
    );
    let (b, a) = (
        before.log.expect("size").bytes,
        after.log.expect("size").bytes,
    );
    assert!(a > b, "{a} > {b}");
    assert_eq!(
        after.log.expect("size").events,
        run.events().await?.len() as u64
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_timeout_cancels_and_a_deadline_not_reached_leaves_a_completed_run()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = host(dir.path(), &clock).await?;
    let zero = host
        .start_with::<Flow>("zero", (), StartOptions::default().timeout(Duration::ZERO))
        .await?;
    let got = within(LIMIT, "the zero deadline", zero.result()).await?;
    assert!(
        matches!(&got, Err(Error::Cancelled(r)) if r.starts_with("deadline exceeded")),
        "{got:?}"
    );

    let hour = Duration::from_secs(3600);
    let ok = host
        .start_with::<Flow>("ok", (), StartOptions::default().timeout(hour))
        .await?;
    within(LIMIT, "the wait", ok.wait_until_suspended()).await??;
    ok.signal("go", &3u32, "g").await?;
    assert_eq!(within(LIMIT, "the result", ok.result()).await??, 3);
    clock.advance(2 * hour);
    // The passed deadline of an ended run changes nothing.
    within(LIMIT, "the clock's timers to settle", async {
        while clock.next_due().is_some_and(|t| t <= clock_now(&clock)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    assert_eq!(ok.status().await?, RunStatus::Completed);
    assert_eq!(ok.result().await?, 3);
    host.shutdown().await?;
    Ok(())
}

fn clock_now(clock: &TestClock) -> SystemTime {
    use reel::Clock;
    clock.now()
}
