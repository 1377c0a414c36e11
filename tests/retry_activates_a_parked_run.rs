//! `AnyRun::retry` activates a parked run again now, without a host restart: a
//! run that crash-looped and was parked completes once the cause is gone; while the
//! cause persists, it parks again with the same error.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Counter, within};
use reel::{Ctx, Error, Host, RunStatus, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

static FIXED: AtomicBool = AtomicBool::new(false);

/// Panics outside any step until the test sets `FIXED`.
struct CrashLoop {
    executions: Counter,
}
impl Workflow for CrashLoop {
    const NAME: &'static str = "crash-loop";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let a: u32 = ctx.step("before", |_| async { Ok::<_, String>(7) }).await?;
        self.executions.bump();
        if !FIXED.load(Ordering::SeqCst) {
            panic!("handler bug");
        }
        Ok(a)
    }
}

fn expect_crashed(r: reel::Result<u32>) {
    match r {
        Err(Error::Crashed(m)) => assert!(m.contains("handler bug"), "{m}"),
        other => panic!("expected Crashed, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looped_run_completes_when_retried_after_the_fix() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let executions = Counter::default();
    let host = Host::builder()
        .path(dir.path())
        .register(CrashLoop {
            executions: executions.clone(),
        })
        .restart_limit(1, Duration::from_secs(60))
        .build()
        .await?;
    let run = host.start::<CrashLoop>("loop", ()).await?;
    expect_crashed(within(LIMIT, "the park", run.result()).await?);
    assert_eq!(run.status().await?.kind(), StatusKind::Parked);
    assert_eq!(executions.get(), 2, "first execution + 1 restart");

    // The cause persists: parked again, with the same error.
    run.retry().await?;
    expect_crashed(within(LIMIT, "the second park", run.result()).await?);
    assert_eq!(executions.get(), 4);
    let RunStatus::Parked { error } = run.status().await? else {
        panic!("expected parked");
    };
    assert!(error.contains("handler bug"), "{error}");

    FIXED.store(true, Ordering::SeqCst);
    run.retry().await?;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 7);
    assert_eq!(run.status().await?, RunStatus::Completed);
    match run.retry().await {
        Err(Error::InvalidState {
            run_id,
            state,
            action,
        }) => {
            assert_eq!(
                (run_id.as_str(), state, action.as_str()),
                ("loop", StatusKind::Completed, "retry")
            );
        }
        other => panic!("expected InvalidState, got {other:?}"),
    }
    host.shutdown().await?;
    Ok(())
}
