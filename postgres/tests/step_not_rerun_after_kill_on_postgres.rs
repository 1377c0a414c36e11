//! A child process running 30 runs over `PgStore` is killed by SIGKILL at random
//! moments, several times; a host in this process then resumes every run on the
//! same database. Each step body logs a fresh token to a side file and returns it,
//! so the recorded token must be the *last* execution of that step: nothing ran
//! again once its completion was recorded.

mod support;
// The SIGKILL rounds of reel's own crash tests.
#[allow(unreachable_pub)]
#[path = "../../tests/common/kill.rs"]
mod kill;
#[allow(unreachable_pub)]
#[path = "../../tests/common/tokens.rs"]
mod tokens;

use std::path::Path;

use reel::Host;
use reel_postgres::PgStore;
use tokens::Tokens as Work;

const RUNS: usize = 30;
const STEPS: usize = 5;
const CHILD_ENV: &str = "REEL_PG_KILL9_CHILD_DIR";

/// The runs' workflow: 5 logged steps, a short sleep after the third.
fn work(dir: &Path) -> Work {
    tokens::short_steps(dir, STEPS)
}

/// A host over the database whose URL is in `dir/url`.
async fn open(dir: &Path) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = PgStore::connect(&url).await?;
    Ok(Host::builder()
        .store(store)
        .register(work(dir))
        .build()
        .await?)
}

/// The child: start every run (idempotent) and drive them until killed.
fn child(dir: &Path) {
    let rt = kill::runtime();
    rt.block_on(async {
        let host = open(dir).await.expect("open");
        tokens::start_and_finish(host, RUNS).await;
    });
}

#[test]
fn step_not_rerun_after_kill_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = kill::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("kill9"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let kills = kill::Rounds {
        test: "step_not_rerun_after_kill_on_postgres",
        env: CHILD_ENV,
        rounds: 4,
        marker: "exec ",
        done: "all-done",
        min: 5,
        spread: 60,
    }
    .run(dir.path());
    assert!(kills > 0, "the child was never killed");

    let recorded = rt.block_on(async {
        let host = open(dir.path()).await.expect("reopen");
        tokens::finish_all(host, RUNS, STEPS).await
    });

    let (executions, _) =
        tokens::assert_recorded_last(&dir.path().join("executions.log"), &recorded);
    println!("{kills} kills, {executions} step executions");
}
