//! DESIGN.md invariant 2, third clause: a step whose completion is recorded never
//! runs again after a supervisor restart. The handler panics after each of its two
//! steps, once each; every panic crashes the run actor, whose supervisor restarts
//! it from disk, and the new actor replays the log. The bodies ran once each, the
//! handler ran three times (the first execution and two restarts), and the run
//! completes with the values the bodies returned.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use reel::{Ctx, RunStatus, Workflow};

#[derive(Clone, Default)]
struct Counts {
    charge: Arc<AtomicU32>,
    ship: Arc<AtomicU32>,
    executions: Arc<AtomicU32>,
    crashes: Arc<AtomicU32>,
}

struct CrashAfterSteps(Counts);

impl Workflow for CrashAfterSteps {
    const NAME: &'static str = "crash-after-steps";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        let c = &self.0;
        c.executions.fetch_add(1, Ordering::SeqCst);
        let charged = ctx
            .step("charge", |_| async {
                c.charge.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(cents)
            })
            .await?;
        if c.crashes.load(Ordering::SeqCst) == 0 {
            c.crashes.fetch_add(1, Ordering::SeqCst);
            panic!("handler bug after the charge");
        }
        let label = ctx
            .step("ship", |_| async {
                c.ship.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(format!("label-{charged}"))
            })
            .await?;
        if c.crashes.load(Ordering::SeqCst) == 1 {
            c.crashes.fetch_add(1, Ordering::SeqCst);
            panic!("handler bug after the shipping");
        }
        Ok(format!("{charged}|{label}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_steps_do_not_run_again_after_supervisor_restarts() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let counts = Counts::default();
    let host = common::hosts::open(dir.path(), CrashAfterSteps(counts.clone())).await?;
    let run = host.start::<CrashAfterSteps>("order-1", 1999).await?;
    assert_eq!(run.result().await?, "1999|label-1999");
    assert_eq!(run.status().await?, RunStatus::Completed);
    assert_eq!(
        counts.crashes.load(Ordering::SeqCst),
        2,
        "both panics happened"
    );
    assert_eq!(
        counts.executions.load(Ordering::SeqCst),
        3,
        "the first execution and one per supervisor restart"
    );
    assert_eq!(counts.charge.load(Ordering::SeqCst), 1, "charge ran once");
    assert_eq!(counts.ship.load(Ordering::SeqCst), 1, "ship ran once");
    host.shutdown().await?;
    Ok(())
}
