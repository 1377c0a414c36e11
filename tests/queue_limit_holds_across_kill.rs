//! A queue's concurrency under SIGKILL: a child process starts 60 runs on a queue
//! of concurrency 3 and is killed at random moments, several times; a host then
//! reopens the store and finishes them. Every run's body notes when it enters and
//! leaves in a side file, across all the processes: at no point were more than 3
//! runs between entering and leaving, every run completed, and each step's
//! completion is recorded once.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use reel::{Ctx, Event, Host, QueueOptions, Workflow};

const RUNS: usize = 60;
const CONCURRENCY: usize = 3;
const CHILD_ENV: &str = "REEL_QUEUE_KILL9_CHILD_DIR";

#[derive(Clone)]
struct Export {
    side: PathBuf,
}

impl Export {
    fn note(&self, line: &str) -> Result<(), String> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.side)
            .map_err(|e| e.to_string())?;
        // One write of the whole line: a kill cannot tear it.
        f.write_all(format!("{line}\n").as_bytes())
            .map_err(|e| e.to_string())
    }
}

impl Workflow for Export {
    const NAME: &'static str = "export";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let id = ctx.run_id().to_owned();
        ctx.step("enter", |_| async {
            println!("exec");
            self.note(&format!("+{id}"))
        })
        .await?;
        ctx.step("work", |_| async {
            println!("exec");
            self.note(&format!("w{id}"))
        })
        .await?;
        ctx.step("leave", |_| async { self.note(&format!("-{id}")) })
            .await?;
        Ok(())
    }
}

fn open(dir: &Path) -> impl Future<Output = reel::Result<Host>> {
    Host::builder()
        .path(dir.join("store"))
        .register(Export {
            side: dir.join("trace.log"),
        })
        .queue("exports", QueueOptions::default().concurrency(CONCURRENCY))
        .build()
}

async fn drive(host: &Host) {
    let mut runs = Vec::new();
    for r in 0..RUNS {
        let id = format!("export-{r:02}");
        runs.push(
            host.start_on::<Export>("exports", &id, ())
                .await
                .expect("start"),
        );
    }
    for run in runs {
        run.result().await.expect("result");
    }
}

fn child(dir: &Path) {
    let rt = common::kill::runtime();
    rt.block_on(async {
        let host = open(dir).await.expect("open");
        drive(&host).await;
        println!("all-done");
        std::io::stdout().flush().ok();
        host.shutdown().await.expect("shutdown");
    });
}

#[test]
fn queue_limit_holds_across_kill() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let kills = common::kill::Rounds {
        test: "queue_limit_holds_across_kill",
        env: CHILD_ENV,
        rounds: 6,
        marker: "exec",
        done: "all-done",
        min: 5,
        spread: 40,
    }
    .run(dir.path());
    assert!(kills > 0, "the child was never killed");

    let rt = common::kill::runtime();
    let logs = rt.block_on(async {
        let host = open(dir.path()).await.expect("reopen");
        drive(&host).await;
        let mut logs = HashMap::new();
        for r in 0..RUNS {
            let id = format!("export-{r:02}");
            logs.insert(id.clone(), host.run(&id).events().await.expect("events"));
        }
        host.shutdown().await.expect("shutdown");
        logs
    });

    // Between a run's first `+` and its last `-`, it held a slot (a re-run body
    // notes again; the set keeps one entry per run).
    let trace = std::fs::read_to_string(dir.path().join("trace.log")).expect("trace");
    let mut inside: HashSet<&str> = HashSet::new();
    let mut most = 0;
    for line in trace.lines() {
        if let Some(id) = line.strip_prefix('+') {
            inside.insert(id);
        } else if let Some(id) = line.strip_prefix('-') {
            inside.remove(id);
        }
        most = most.max(inside.len());
    }
    assert!(most <= CONCURRENCY, "{most} runs inside at once:\n{trace}");
    assert!(most > 0);
    for (id, events) in &logs {
        assert!(
            matches!(events.last(), Some(Event::RunCompleted { .. })),
            "{id}: {events:?}"
        );
        let completed = events
            .iter()
            .filter(|e| matches!(e, Event::StepCompleted { .. }))
            .count();
        assert_eq!(completed, 3, "{id}: {events:?}");
    }
}
