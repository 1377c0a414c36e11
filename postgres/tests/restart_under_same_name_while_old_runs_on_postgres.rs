//! A host restarted under the same host id while its old process is still
//! running (a slow shutdown, a hung process a supervisor replaced, a pod name
//! reused): the lease fence is by host id, so nothing would tell the two apart.
//! Joining under the id of a process whose heartbeat is still renewed is
//! refused (after waiting two lease times for it to run out); once the old
//! process is killed, the new one joins, takes the runs over, and no step runs
//! again once its completion is recorded.
//!
//! The old process (a child) starts the runs and works on them; the new one
//! (this process) tries to join under the same id while it does, then again
//! after killing it, and waits for every run to end. Each step body logs which
//! process ran it.
//!
//! The usual restart under the same id, after the old process died (SIGKILL),
//! works: the new process takes the old leases as its own at once and finishes
//! every run with no recorded step run again.

mod procs;
mod support;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use procs::{Proc, Tagged};
use reel::{Host, RunStatus};

const RUNS: usize = 16;
const STEPS: usize = 12;
const CHILD_ENV: &str = "REEL_PG_SAME_NAME_CHILD_DIR";
const TEST: &str = "restart_under_same_name_while_old_runs_on_postgres";
const HOST_ID: &str = "worker-0";

async fn open(dir: &Path, tag: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, HOST_ID).await?;
    Ok(Host::builder()
        .store(store)
        .register(Tagged {
            side: dir.join("executions.log"),
            tag: tag.to_owned(),
            steps: STEPS,
            busy: Duration::from_millis(15),
            pause_every: 3,
            pause: Duration::from_millis(40),
        })
        .build()
        .await?)
}

/// The child of the restart after a kill.
const KILLED_ENV: &str = "REEL_PG_SAME_NAME_KILLED_CHILD_DIR";

fn child(dir: &Path) {
    procs::runtime().block_on(async {
        let host = open(dir, "old").await.expect("open");
        for i in 0..RUNS {
            host.start::<Tagged>(&format!("run-{i}"), ())
                .await
                .expect("start");
        }
        println!("started");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

#[test]
fn restart_under_same_name_while_old_runs_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("same_name"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let old = Proc::spawn(TEST, CHILD_ENV, dir.path(), &[]);
    let (mut started, mut executed) = (false, 0);
    old.until(Duration::from_secs(60), |line| {
        started |= line == "started";
        executed += usize::from(line.starts_with("exec "));
        started && executed >= 20
    });
    let Err(err) = rt.block_on(open(dir.path(), "new")) else {
        panic!("joining under the id of a live process is refused");
    };
    assert!(err.to_string().contains("in use"), "{err}");
    old.kill();
    let (recorded, statuses) = rt.block_on(async {
        let new = open(dir.path(), "new").await.expect("the new process");
        let mut recorded = HashMap::new();
        let mut statuses = Vec::new();
        for i in 0..RUNS {
            let id = format!("run-{i}");
            let run = new.handle::<Tagged>(&id);
            match tokio::time::timeout(Duration::from_secs(40), run.result()).await {
                Ok(Ok(tokens)) => {
                    recorded.insert(id.clone(), tokens);
                }
                Ok(Err(e)) => statuses.push(format!("{id}: {e}")),
                Err(_) => statuses.push(format!(
                    "{id}: no end within 40 s ({:?})",
                    run.status().await
                )),
            }
            let status = run.status().await.expect("status");
            if status != RunStatus::Completed {
                statuses.push(format!("{id}: {status:?}"));
            }
        }
        new.shutdown().await.expect("shutdown");
        (recorded, statuses)
    });
    let side = dir.path().join("executions.log");
    let mut problems = statuses;
    problems.extend(procs::not_last(&side, &recorded));
    // Once the new process recorded a step of a run, the old one records none.
    for (run, tokens) in &recorded {
        if let Some(first_new) = tokens.iter().position(|t| procs::tag_of(t) == "new")
            && let Some(late) = tokens[first_new..]
                .iter()
                .find(|t| procs::tag_of(t) == "old")
        {
            problems.push(format!(
                "{run}: the old process recorded {late} after the new one took over"
            ));
        }
    }
    let old_execs = procs::executions(&side)
        .iter()
        .filter(|e| e.tag == "old")
        .count();
    println!("{old_execs} executions by the old process");
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn restart_under_same_name_after_a_kill_on_postgres() {
    if let Ok(dir) = std::env::var(KILLED_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("same_name_killed"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let old = Proc::spawn(
        "restart_under_same_name_after_a_kill_on_postgres",
        KILLED_ENV,
        dir.path(),
        &[],
    );
    let (mut started, mut executed) = (false, 0);
    old.until(Duration::from_secs(60), |line| {
        started |= line == "started";
        executed += usize::from(line.starts_with("exec "));
        started && executed >= 40
    });
    old.kill();
    let recorded = rt.block_on(async {
        let new = open(dir.path(), "new").await.expect("the new process");
        let mut recorded = HashMap::new();
        for i in 0..RUNS {
            let id = format!("run-{i}");
            let run = new.handle::<Tagged>(&id);
            let tokens = tokio::time::timeout(Duration::from_secs(30), run.result())
                .await
                .unwrap_or_else(|_| panic!("{id} did not end"))
                .expect("completes");
            assert_eq!(run.status().await.expect("status"), RunStatus::Completed);
            recorded.insert(id, tokens);
        }
        new.shutdown().await.expect("shutdown");
        recorded
    });
    let problems = procs::not_last(&dir.path().join("executions.log"), &recorded);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
