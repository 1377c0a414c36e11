//! Kill -9 in the middle of a run, restart, and check that no recorded step ran again.
//!
//! ```text
//! cargo run --example crash_resume
//! ```
//!
//! The example starts itself as a child process (`crash_resume child <dir>`). The
//! child runs a workflow of 20 sequential steps; each step body appends its step id
//! to `<dir>/executions.log`, so the file counts real executions of step bodies. The
//! parent waits until about 8 steps have run, SIGKILLs the child, opens a host on the
//! same store in-process, waits for the run to finish and checks the side file:
//!
//! - every step ran at least once;
//! - a step whose completion was recorded before the kill never ran again;
//! - at most one step ran twice: the one in flight when the process died. Step bodies
//!   run *at least once*: a body that was running (or whose result was not yet
//!   fsynced) when the process died runs again after the restart. That is why
//!   `StepCtx::idempotency_key()` exists: pass it to the systems a step talks to.
//!
//! Exits non-zero if any of these fails.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use reel::{Ctx, Event, Host, Workflow};

const STEPS: u32 = 20;
const KILL_AFTER: usize = 8;
const RUN_ID: &str = "pipeline-1";
const DATA_DIR: &str = "reel-data/crash_resume";

/// Twenty sequential steps, each recording its execution in a side file.
struct Pipeline {
    executions_log: PathBuf,
}

impl Workflow for Pipeline {
    const NAME: &'static str = "pipeline";
    type Input = u32;
    type Output = u32;

    async fn run(&self, ctx: Ctx, steps: u32) -> reel::Result<u32> {
        let mut done = 0;
        for i in 0..steps {
            let id = format!("step-{i:02}");
            let log = self.executions_log.clone();
            done += ctx
                .step(&id, |_| {
                    let (log, id) = (log.clone(), id.clone());
                    async move {
                        // The side effect we count: one line per real execution.
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&log)
                            .map_err(|e| e.to_string())?;
                        writeln!(f, "{id}").map_err(|e| e.to_string())?;
                        f.flush().map_err(|e| e.to_string())?;
                        // Some "work", so the kill is likely to land inside a body.
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        Ok::<_, String>(1)
                    }
                })
                .await?;
            // A short durable sleep between steps: one more wake-up (and replay) each.
            ctx.sleep(Duration::from_millis(10)).await?;
        }
        Ok(done)
    }
}

fn open_host(dir: &Path) -> reel::HostBuilder {
    Host::builder().path(dir).register(Pipeline {
        executions_log: dir.join("executions.log"),
    })
}

fn executions(dir: &Path) -> anyhow::Result<Vec<String>> {
    match std::fs::read_to_string(dir.join("executions.log")) {
        Ok(s) => Ok(s.lines().map(str::to_owned).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).context("reading executions.log"),
    }
}

/// The child process: starts the run and waits for it (it is killed long before).
async fn child(dir: PathBuf) -> anyhow::Result<()> {
    let host = open_host(&dir).build().await?;
    let run = host.start::<Pipeline>(RUN_ID, STEPS).await?;
    println!("[child pid {}] started run `{RUN_ID}`", std::process::id());
    let out = run.result().await?;
    println!("[child] finished with {out} (the parent was too slow to kill me)");
    host.shutdown().await?;
    Ok(())
}

async fn parent() -> anyhow::Result<()> {
    let started = Instant::now();
    let dir = PathBuf::from(DATA_DIR);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context(format!("wiping {DATA_DIR}")),
    }
    std::fs::create_dir_all(&dir)?;

    // 1. Run the workflow in a child process.
    let exe = std::env::current_exe()?;
    let mut proc = Command::new(exe)
        .arg("child")
        .arg(&dir)
        .stdin(Stdio::null())
        .spawn()
        .context("spawning the child process")?;

    // 2. Wait until it has executed about KILL_AFTER steps. Polling a file is fine
    //    here: the child is another process and this is a demo.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if executions(&dir)?.len() >= KILL_AFTER {
            break;
        }
        if let Some(status) = proc.try_wait()? {
            bail!("the child exited early with {status}");
        }
        ensure!(
            Instant::now() < deadline,
            "the child did not reach {KILL_AFTER} steps in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // 3. kill -9.
    proc.kill().context("SIGKILL to the child")?;
    let status = proc.wait()?;
    let before = executions(&dir)?;
    println!(
        "[parent] killed the child ({status}) after {} step executions: {}",
        before.len(),
        before.join(" ")
    );

    // 4. Open a host on the same store in this process. Recovery resumes the run.
    let host = open_host(&dir).build().await?;
    let run = host.handle::<Pipeline>(RUN_ID);
    println!(
        "[parent] reopened the store; run status: {:?}",
        run.status().await?
    );
    let out = tokio::time::timeout(Duration::from_secs(60), run.result())
        .await
        .context("the resumed run did not finish within 60 s")??;
    println!("[parent] resumed run finished: {out} steps done");
    ensure!(
        out == STEPS,
        "expected {STEPS} steps, the run reports {out}"
    );

    // 5. Check the side file.
    let after = executions(&dir)?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for id in &after {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    let twice: Vec<&str> = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    println!(
        "[parent] {} step executions in total for {STEPS} steps",
        after.len()
    );

    let mut problems = Vec::new();
    for i in 0..STEPS {
        let id = format!("step-{i:02}");
        if !counts.contains_key(id.as_str()) {
            problems.push(format!("{id} never ran"));
        }
    }
    for (id, n) in &counts {
        if *n > 2 {
            problems.push(format!("{id} ran {n} times"));
        }
    }
    if twice.len() > 1 {
        problems.push(format!("more than one step ran twice: {twice:?}"));
    }
    // The only step allowed to run twice is the last one that began before the kill:
    // every earlier one had finished, and its completion is recorded.
    let in_flight = before.last().map(String::as_str);
    for id in &twice {
        if Some(*id) != in_flight {
            problems.push(format!(
                "{id} ran twice but was not in flight at the kill (in flight: {in_flight:?})"
            ));
        }
    }
    // The log records each step's completion exactly once.
    let events = run.events().await?;
    let mut completed: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &events {
        if let Event::StepCompleted { id, .. } = e {
            *completed.entry(id.as_str()).or_default() += 1;
        }
    }
    if completed.len() != STEPS as usize || completed.values().any(|n| *n != 1) {
        problems.push(format!(
            "the log should record each of the {STEPS} steps once: {completed:?}"
        ));
    }

    match twice.first() {
        Some(id) => println!(
            "[parent] {id} ran twice: it was in flight when the process was killed, so its \
             completion was never recorded and it ran again after the restart \
             (at-least-once; its idempotency key `{RUN_ID}/{id}` was the same both times)"
        ),
        None => println!(
            "[parent] no step ran twice: the kill landed between a recorded completion and \
             the start of the next step"
        ),
    }
    println!("[parent] every step whose completion was recorded before the kill ran exactly once");
    host.shutdown().await?;

    if !problems.is_empty() {
        for p in &problems {
            eprintln!("VIOLATION: {p}");
        }
        bail!("{} violation(s)", problems.len());
    }
    println!("[parent] OK in {:.2?}", started.elapsed());
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("child") => {
            let dir = args.get(2).context("usage: crash_resume child <dir>")?;
            child(PathBuf::from(dir)).await
        }
        _ => parent().await,
    }
}
