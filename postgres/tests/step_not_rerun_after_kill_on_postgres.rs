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

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reel::{Ctx, Event, Host, Workflow};
use reel_postgres::PgStore;

const RUNS: usize = 30;
const STEPS: usize = 5;
const CHILD_ENV: &str = "REEL_PG_KILL9_CHILD_DIR";

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

/// A host over the database whose URL is in `dir/url`.
async fn open(dir: &Path) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = PgStore::connect(&url).await?;
    Ok(Host::builder()
        .store(store)
        .register(Work {
            side: dir.join("executions.log"),
        })
        .build()
        .await?)
}

/// The child: start every run (idempotent) and drive them until killed.
fn child(dir: &Path) {
    let rt = kill::runtime();
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

    let recorded: HashMap<String, Vec<String>> = rt.block_on(async {
        let host = open(dir.path()).await.expect("reopen");
        let mut out = HashMap::new();
        for i in 0..RUNS {
            let id = format!("run-{i}");
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

    let side = std::fs::read_to_string(dir.path().join("executions.log")).expect("side file");
    let mut last: HashMap<String, String> = HashMap::new();
    for line in side.lines() {
        let mut parts = line.split(' ');
        let (Some(_run), Some(key), Some(token)) = (parts.next(), parts.next(), parts.next())
        else {
            continue; // a line torn by the kill
        };
        last.insert(key.to_owned(), token.to_owned());
    }
    println!("{kills} kills, {} step executions", side.lines().count());
    for (run, tokens) in &recorded {
        for token in tokens {
            let key = token.rsplitn(6, '-').last().unwrap_or_default().to_owned();
            assert_eq!(
                last.get(&key),
                Some(token),
                "{run}: step {key} ran again after its completion was recorded"
            );
        }
    }
}
