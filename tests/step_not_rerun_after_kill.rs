//! Invariants 1, 2 and 7 with a real process killed by SIGKILL: a child process runs
//! 100 runs and is killed at random moments, several times; a host then reopens the
//! store and every run completes. Each step body logs a fresh token to a side file
//! and returns it, so the log's recorded token must be the *last* execution of that
//! step: nothing ran again once its completion was recorded.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reel::{Ctx, Event, Host, Workflow};

const RUNS: usize = 100;
const STEPS: usize = 5;
const CHILD_ENV: &str = "REEL_KILL9_CHILD_DIR";

#[derive(Clone)]
struct Work {
    side: PathBuf,
}

impl Workflow for Work {
    const NAME: &'static str = "work";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let mut tokens = Vec::new();
        for i in 0..STEPS {
            let side = self.side.clone();
            let run = ctx.run_id().to_owned();
            let token = ctx
                .step("s", |s| {
                    let (side, run) = (side.clone(), run.clone());
                    async move {
                        let token = format!("{}-{}", s.idempotency_key(), reel::Uuid::new_v4());
                        let line = format!("{run} {} {token}\n", s.idempotency_key());
                        let mut f = std::fs::OpenOptions::new()
                            .append(true)
                            .create(true)
                            .open(&side)?;
                        f.write_all(line.as_bytes())?;
                        println!("exec {run}");
                        Ok::<_, std::io::Error>(token)
                    }
                })
                .await?;
            tokens.push(token);
            if i == 2 {
                ctx.sleep(Duration::from_millis(3)).await?;
            }
        }
        Ok(tokens)
    }
}

fn open(dir: &Path) -> impl std::future::Future<Output = reel::Result<Host>> {
    Host::builder()
        .path(dir.join("store"))
        .register(Work {
            side: dir.join("executions.log"),
        })
        .build()
}

/// The child: start every run (idempotent) and drive them until killed.
fn child(dir: &Path) {
    let rt = common::kill::runtime();
    rt.block_on(async {
        let host = open(dir).await.expect("open");
        let mut handles = Vec::new();
        for i in 0..RUNS {
            handles.push(
                host.start::<Work>(&format!("run-{i}"), ())
                    .await
                    .expect("start"),
            );
        }
        for h in handles {
            h.result().await.expect("result");
        }
        println!("all-done");
        std::io::stdout().flush().ok();
        host.shutdown().await.expect("shutdown");
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
    let recorded: HashMap<String, Vec<String>> = rt.block_on(async {
        let host = open(dir.path()).await.expect("reopen");
        let mut out = HashMap::new();
        for i in 0..RUNS {
            let id = format!("run-{i}");
            // A run the child never got to start is started now (idempotent).
            let h = host.start::<Work>(&id, ()).await.expect("start");
            let tokens = h.result().await.expect("every run completes");
            let events = h.events().await.expect("events");
            let completed = events
                .iter()
                .filter(|e| matches!(e, Event::StepCompleted { .. }))
                .count();
            assert_eq!(completed, STEPS, "{id}: each step recorded exactly once");
            out.insert(id, tokens);
        }
        host.shutdown().await.expect("shutdown");
        out
    });

    // The recorded token of every step is the last execution of that step.
    let side = std::fs::read_to_string(dir.path().join("executions.log")).expect("side file");
    let mut last: HashMap<String, String> = HashMap::new();
    let mut runs_of: HashMap<String, usize> = HashMap::new();
    for line in side.lines() {
        let mut parts = line.split(' ');
        let (Some(_run), Some(key), Some(token)) = (parts.next(), parts.next(), parts.next())
        else {
            continue; // a line torn by the kill
        };
        last.insert(key.to_owned(), token.to_owned());
        *runs_of.entry(key.to_owned()).or_default() += 1;
    }
    let reruns: usize = runs_of.values().map(|n| n - 1).sum();
    println!(
        "{kills} kills, {} step executions, {reruns} re-executions of unrecorded steps",
        side.lines().count()
    );
    for (run, tokens) in &recorded {
        for token in tokens {
            // token = "<idempotency key>-<uuid>", and a uuid has five dash-separated groups.
            let key = token.rsplitn(6, '-').last().unwrap_or_default().to_owned();
            assert_eq!(
                last.get(&key),
                Some(token),
                "{run}: step {key} ran again after its completion was recorded"
            );
        }
    }
}
