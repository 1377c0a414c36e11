//! Invariant 3: a handler that no longer matches its log stops with
//! `ReplayDivergence` naming the first divergent event, appends nothing, runs no body
//! of the divergent branch, and resumes once the original code is back.

mod common;

use common::Counter;
use reel::{Ctx, Error, RunStatus, Workflow};

/// The code the run was started with.
struct Original;
impl Workflow for Original {
    const NAME: &'static str = "order";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let a: u32 = ctx
            .step("reserve", |_| async { Ok::<_, String>(1) })
            .await?;
        let go: String = ctx.wait_for_signal("go").await?;
        Ok(format!("{a}-{go}"))
    }
}

/// Changed code: a new step inserted before `reserve`.
struct Changed {
    inserted_ran: Counter,
}
impl Workflow for Changed {
    const NAME: &'static str = "order";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let ran = self.inserted_ran.clone();
        // A handler that swallows the error still cannot go on.
        let _ = ctx
            .step("fraud-check", |_| {
                let ran = ran.clone();
                async move {
                    ran.bump();
                    Ok::<_, String>(true)
                }
            })
            .await;
        let a: u32 = ctx
            .step("reserve", |_| async { Ok::<_, String>(1) })
            .await?;
        Ok(format!("{a}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divergence_parks_run_without_touching_its_log() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Original).await?;
    let run = host.start::<Original>("o-1", ()).await?;
    run.wait_until_suspended().await?;
    let before = run.events().await?;
    host.shutdown().await?;

    let changed = Changed {
        inserted_ran: Counter::default(),
    };
    let host = common::hosts::open(
        dir.path(),
        Changed {
            inserted_ran: changed.inserted_ran.clone(),
        },
    )
    .await?;
    let run = host.handle::<Changed>("o-1");
    // Recovery does not replay a merely waiting run; a signal wakes it.
    run.signal("go", "now", "go-1").await?;
    let err = run.result().await.expect_err("diverged");
    assert_eq!(
        err,
        Error::ReplayDivergence {
            index: 1,
            expected: "step `reserve`".into(),
            found: "called step `fraud-check`".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "replay diverged at event 1: the log has step `reserve` there, \
         but the handler called step `fraud-check`"
    );
    match run.status().await? {
        RunStatus::Parked { error } => assert!(error.contains("fraud-check"), "{error}"),
        other => panic!("expected parked, got {other:?}"),
    }
    assert_eq!(
        changed.inserted_ran.get(),
        0,
        "no body of the divergent branch ran"
    );
    let after = run.events().await?;
    assert_eq!(
        after.len(),
        before.len() + 1,
        "only the signal was appended"
    );
    assert_eq!(after[..before.len()], before[..]);
    host.shutdown().await?;

    // The fix: the original code again. The parked run resumes on restart.
    let host = common::hosts::open(dir.path(), Original).await?;
    assert_eq!(host.handle::<Original>("o-1").result().await?, "1-now");
    host.shutdown().await?;
    Ok(())
}
