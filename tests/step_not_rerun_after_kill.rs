//! Invariants 1, 2 and 7 with a real process killed by SIGKILL: a child process runs
//! 100 runs and is killed at random moments, several times; a host then reopens the
//! store and every run completes. Each step body logs a fresh token to a side file
//! and returns it, so the log's recorded token must be the *last* execution of that
//! step: nothing ran again once its completion was recorded.

mod common;

use std::path::Path;

use common::tokens::Tokens as Work;
use reel::Host;

const RUNS: usize = 100;
const STEPS: usize = 5;
const CHILD_ENV: &str = "REEL_KILL9_CHILD_DIR";

/// The runs' workflow: 5 logged steps, a short sleep after the third.
fn work(dir: &Path) -> Work {
    common::tokens::short_steps(dir, STEPS)
}

fn open(dir: &Path) -> impl std::future::Future<Output = reel::Result<Host>> {
    common::hosts::open(dir.join("store"), work(dir))
}

/// The child: start every run (idempotent) and drive them until killed.
fn child(dir: &Path) {
    let rt = common::kill::runtime();
    rt.block_on(async {
        let host = open(dir).await.expect("open");
        common::tokens::start_and_finish(host, RUNS).await;
    });
}

#[test]
fn step_not_rerun_after_kill() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let kills = common::kill::Rounds {
        test: "step_not_rerun_after_kill",
        env: CHILD_ENV,
        rounds: 5,
        marker: "exec ",
        done: "all-done",
        min: 10,
        spread: 120,
    }
    .run(dir.path());
    assert!(kills > 0, "the child was never killed");

    // Restart in this process: every run resumes and completes.
    let rt = common::kill::runtime();
    let recorded = rt.block_on(async {
        let host = open(dir.path()).await.expect("reopen");
        common::tokens::finish_all(host, RUNS, STEPS).await
    });

    // The recorded token of every step is the last execution of that step.
    let (executions, reruns) =
        common::tokens::assert_recorded_last(&dir.path().join("executions.log"), &recorded);
    println!(
        "{kills} kills, {executions} step executions, {reruns} re-executions of unrecorded steps"
    );
}
