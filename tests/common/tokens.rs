//! The workflow of the step-rerun crash tests, and their check. Each step body
//! appends `<run> <idempotency key> <token>` to a side file (one write) and returns
//! the fresh token (`<key>-<uuid>`), so the token a run records for a step must be
//! the *last* line of that step in the side file: nothing ran again once its
//! completion was recorded.
// Also compiled by path into tests that use only part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reel::{Ctx, Event, Host, Workflow};

/// `steps` logged steps, each taking `busy`, with a durable sleep of `pause` after
/// every `pause_every`-th; returns the tokens. Prints `exec <run>` per execution
/// (the kill rounds count those lines).
#[derive(Clone)]
pub struct Tokens {
    pub side: PathBuf,
    pub steps: usize,
    pub pause_every: usize,
    pub pause: Duration,
    pub busy: Duration,
}

impl Workflow for Tokens {
    const NAME: &'static str = "work";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let mut tokens = Vec::new();
        for i in 0..self.steps {
            let run = ctx.run_id().to_owned();
            let token = ctx
                .step("s", |s| {
                    let (side, run, busy) = (self.side.clone(), run.clone(), self.busy);
                    async move {
                        if !busy.is_zero() {
                            tokio::time::sleep(busy).await;
                        }
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
            if (i + 1) % self.pause_every.max(1) == 0 {
                ctx.sleep(self.pause).await?;
            }
        }
        Ok(tokens)
    }
}

/// Asserts that every token `recorded` (by run) is the last execution of its step
/// in the side file; returns how many executions it holds and how many of them
/// re-ran a step whose completion was not recorded yet (at-least-once).
pub fn assert_recorded_last(
    side: &Path,
    recorded: &HashMap<String, Vec<String>>,
) -> (usize, usize) {
    let side = std::fs::read_to_string(side).expect("side file");
    let mut last: HashMap<String, String> = HashMap::new();
    let mut runs_of: HashMap<String, usize> = HashMap::new();
    for line in side.lines() {
        let mut parts = line.split(' ');
        let (Some(_run), Some(key), Some(token)) = (parts.next(), parts.next(), parts.next())
        else {
            continue; // a line torn by a kill
        };
        last.insert(key.to_owned(), token.to_owned());
        *runs_of.entry(key.to_owned()).or_default() += 1;
    }
    for (run, tokens) in recorded {
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
    let reruns = runs_of.values().map(|n| n - 1).sum();
    (side.lines().count(), reruns)
}

/// The step-rerun tests' runs: `steps` steps with no busy time and a 3 ms sleep
/// after every third, logging to `dir/executions.log`.
pub fn short_steps(dir: &Path, steps: usize) -> Tokens {
    Tokens {
        side: dir.join("executions.log"),
        steps,
        pause_every: 3,
        pause: Duration::from_millis(3),
        busy: Duration::ZERO,
    }
}

/// The body of a killed child: starts the runs `run-0` to `run-<runs - 1>`
/// (idempotent), awaits every result, prints `all-done`, shuts the host down.
pub async fn start_and_finish(host: Host, runs: usize) {
    let mut handles = Vec::new();
    for i in 0..runs {
        handles.push(
            host.start::<Tokens>(&format!("run-{i}"), ())
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
}

/// After the kills: starts every run again (one the child never got to start is
/// started now; idempotent), awaits it, asserts each of its `steps` steps is
/// recorded exactly once, shuts the host down; returns the tokens by run.
pub async fn finish_all(host: Host, runs: usize, steps: usize) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    for i in 0..runs {
        let id = format!("run-{i}");
        let h = host.start::<Tokens>(&id, ()).await.expect("start");
        let tokens = h.result().await.expect("every run completes");
        let events = h.events().await.expect("events");
        assert_steps_once(&id, &events, steps);
        out.insert(id, tokens);
    }
    host.shutdown().await.expect("shutdown");
    out
}

/// Asserts the log of run `id` records `steps` completed steps: each exactly once.
pub fn assert_steps_once(id: &str, events: &[Event], steps: usize) {
    let completed = events
        .iter()
        .filter(|e| matches!(e, Event::StepCompleted { .. }))
        .count();
    assert_eq!(completed, steps, "{id}: each step recorded exactly once");
}
