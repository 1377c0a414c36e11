//! A step's retry backoff that comes due while its run is replaying still starts the
//! next attempt.
//!
//! Found by `tests/crash_torture.rs` (a kid run hung for 60 s, `Suspended` on `retry
//! of step k#3`, its log ending in `StepFailed { k#3, attempt 1, retry_at }`,
//! `TimerFired { k#3/retry1 }`). What happens: a passivated run waiting for a retry
//! backoff is woken by a signal and replays; the backoff comes due during the replay
//! and the actor appends `TimerFired` to the live journal. The driver walks that event
//! before replay has caught up, when no slot waits for the retry timer yet (a
//! replayed step registers it only once caught up, in `wait_retry`), so it is
//! dropped. Then `Replay::plan_step` looks the timer up in the timers settled in the
//! *initial history* only, finds it pending, and the step waits for a timer that has
//! already fired and left the due-time index: the run hangs until the host restarts.
//! A `ctx.sleep` timer firing at the same point is fine: its slot exists from the
//! call on.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reel::testing::TestClock;
use reel::{Ctx, Event, Host, RetryPolicy, Workflow};

const BACKOFF: Duration = Duration::from_secs(1);
/// Handler code between two ctx calls that takes this long (it stands for a long
/// log or a busy machine): every replay spends it too.
const SLOW_CODE: Duration = Duration::from_millis(300);

struct Flaky;

impl Workflow for Flaky {
    const NAME: &'static str = "flaky";
    type Input = ();
    type Output = u32;

    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("warm", |_| async { Ok::<_, String>(()) }).await?;
        std::thread::sleep(SLOW_CODE);
        let policy = RetryPolicy {
            max_attempts: 2,
            initial_backoff: BACKOFF,
            max_backoff: BACKOFF,
            multiplier: 1.0,
        };
        let attempt = ctx
            .step_with("flaky", policy, |s| async move {
                match s.attempt() {
                    1 => Err("attempt 1 fails".to_owned()),
                    n => Ok(n),
                }
            })
            .await?;
        let _: u32 = ctx.wait_for_signal("go").await?;
        Ok(attempt)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_timer_during_replay_is_not_lost() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // The backoff comes due only when the test moves this clock.
    let clock = TestClock::new(SystemTime::now());
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .passivate_after(Duration::from_millis(20))
        .register(Flaky)
        .build()
        .await?;
    let run = host.start::<Flaky>("r", ()).await?;
    // Attempt 1 failed: the run waits for the backoff, then is passivated.
    let status = run.wait_until_suspended().await?;
    anyhow::ensure!(format!("{status:?}").contains("retry of step `flaky`"));
    let limit = std::time::Instant::now() + Duration::from_secs(5);
    while host.live_runs().await > 0 {
        anyhow::ensure!(std::time::Instant::now() < limit, "never passivated");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let retry_at = run
        .events()
        .await?
        .iter()
        .find_map(|e| match e {
            Event::StepFailed { retry_at, .. } => *retry_at,
            _ => None,
        })
        .ok_or_else(|| anyhow::anyhow!("no StepFailed"))?;
    // Woken before the backoff is due, the run replays for `SLOW_CODE`; the backoff
    // comes due during that replay.
    run.signal("go", &7u32, "go-1").await?;
    clock.set(UNIX_EPOCH + Duration::from_millis(retry_at));
    let out = tokio::time::timeout(Duration::from_secs(5), run.result()).await;
    let Ok(out) = out else {
        anyhow::bail!(
            "the run hangs: {:?}, log {:#?}",
            run.status().await?,
            run.events().await?
        );
    };
    assert_eq!(out?, 2);
    host.shutdown().await?;
    Ok(())
}
