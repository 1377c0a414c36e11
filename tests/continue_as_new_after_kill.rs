//! Continue-as-new under SIGKILL: a child process drives entity runs that continue
//! as new every few signals and is killed at random moments, several times; a host
//! then reopens the store. Every run ends with every signal applied exactly once,
//! in order (signals carried over between segments are neither lost nor doubled),
//! and no step whose completion was recorded ran again.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use reel::{Ctx, Event, Host, RunHandle, Workflow};
use serde::{Deserialize, Serialize};

const RUNS: usize = 20;
const SIGNALS: u64 = 12;
const PER_SEGMENT: usize = 3;
const CHILD_ENV: &str = "REEL_CAN_KILL9_CHILD_DIR";

#[derive(Clone)]
struct Entity {
    side: PathBuf,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Ledger {
    adds: Vec<u64>,
    tokens: Vec<String>,
}

impl Workflow for Entity {
    const NAME: &'static str = "entity";
    type Input = Ledger;
    type Output = Ledger;
    async fn run(&self, ctx: Ctx, mut ledger: Ledger) -> reel::Result<Ledger> {
        for _ in 0..PER_SEGMENT {
            if ledger.adds.len() as u64 == SIGNALS {
                return Ok(ledger);
            }
            let add: u64 = ctx.wait_for_signal("add").await?;
            let side = self.side.clone();
            let token = ctx
                .step("apply", move |s| {
                    let side = side.clone();
                    async move {
                        let token = format!("{}={}", s.idempotency_key(), reel::Uuid::new_v4());
                        let mut f = std::fs::OpenOptions::new()
                            .append(true)
                            .create(true)
                            .open(&side)?;
                        f.write_all(format!("{token}\n").as_bytes())?;
                        println!("exec");
                        Ok::<_, std::io::Error>(token)
                    }
                })
                .await?;
            ledger.adds.push(add);
            ledger.tokens.push(token);
        }
        ctx.continue_as_new::<Entity>(ledger).await
    }
}

fn open(dir: &Path) -> impl Future<Output = reel::Result<Host>> {
    common::hosts::open(
        dir.join("store"),
        Entity {
            side: dir.join("executions.log"),
        },
    )
}

/// Sends the signals the run's log (every segment of it) does not hold yet, in
/// order: a send cut short by a kill either landed or is sent again here.
async fn send_missing(run: &RunHandle<Entity>) -> reel::Result<()> {
    let events = run.events().await?;
    if events.iter().any(Event::is_terminal) {
        return Ok(());
    }
    for i in 1..=SIGNALS {
        let id = format!("add-{i}");
        let sent = events
            .iter()
            .any(|e| matches!(e, Event::SignalReceived { signal_id, .. } if *signal_id == id));
        if !sent {
            run.signal("add", &i, &id).await?;
        }
    }
    Ok(())
}

async fn drive(host: &Host) -> Vec<(String, Ledger)> {
    let mut runs = Vec::new();
    for r in 0..RUNS {
        let id = format!("entity-{r}");
        let run = host
            .start::<Entity>(&id, Ledger::default())
            .await
            .expect("start");
        send_missing(&run).await.expect("signals");
        runs.push((id, run));
    }
    let mut out = Vec::new();
    for (id, run) in runs {
        out.push((id, run.result().await.expect("result")));
    }
    out
}

fn child(dir: &Path) {
    common::kill::drive_child(open(dir), drive);
}

#[test]
fn continue_as_new_after_kill() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let kills = common::kill::Rounds {
        test: "continue_as_new_after_kill",
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
    let (results, segments) = rt.block_on(async {
        let host = open(dir.path()).await.expect("reopen");
        let results = drive(&host).await;
        let mut segments = 0;
        for (id, _) in &results {
            let events = host.handle::<Entity>(id).events().await.expect("events");
            segments += events
                .iter()
                .filter(|e| matches!(e, Event::ContinuedAsNew { .. }))
                .count();
        }
        host.shutdown().await.expect("shutdown");
        (results, segments)
    });
    assert_eq!(
        segments as u64,
        RUNS as u64 * SIGNALS / PER_SEGMENT as u64,
        "every run continued as new after every {PER_SEGMENT} signals"
    );

    // The token a step returned is the last one written under its key.
    let side = std::fs::read_to_string(dir.path().join("executions.log")).expect("side file");
    let mut last: HashMap<&str, &str> = HashMap::new();
    for line in side.lines() {
        if let Some((key, _)) = line.split_once('=') {
            last.insert(key, line);
        }
    }
    for (id, ledger) in &results {
        assert_eq!(
            ledger.adds,
            (1..=SIGNALS).collect::<Vec<u64>>(),
            "{id}: every signal applied once, in order"
        );
        let keys: std::collections::HashSet<&str> = ledger
            .tokens
            .iter()
            .filter_map(|t| t.split_once('=').map(|(k, _)| k))
            .collect();
        assert_eq!(
            keys.len() as u64,
            SIGNALS,
            "{id}: step keys differ between segments"
        );
        for token in &ledger.tokens {
            let key = token.split_once('=').map(|(k, _)| k).unwrap_or_default();
            assert_eq!(
                last.get(key).copied(),
                Some(token.as_str()),
                "{id}: step `{key}` ran again after its completion was recorded"
            );
        }
    }
    println!(
        "{kills} kills, {} step executions for {} steps",
        side.lines().count(),
        RUNS as u64 * SIGNALS
    );
}
