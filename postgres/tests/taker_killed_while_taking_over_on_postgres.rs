//! Two host processes die one after the other: the first (`host-0`) is
//! SIGKILLed mid-work, and the second (`host-1`) is SIGKILLed as soon as the
//! first one's partitions have all been taken, while it is still recovering the
//! runs it took (marking overdue timers' runs running, resuming runs, reading the
//! dead owner's inbox). The last host (this process) takes everything over:
//! every run ends, no recorded step ran again, every timer fired once, and the
//! signals sent while both were dying each landed once.

mod procs;
mod support;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant, UNIX_EPOCH};

use procs::{Proc, Tagged};
use reel::{Ctx, Event, Host, RunStatus, Workflow};

const CHILD_ENV: &str = "REEL_PG_TAKER_KILLED_CHILD_DIR";
const NAME_ENV: &str = "REEL_PG_TAKER_KILLED_NAME";
const TEST: &str = "taker_killed_while_taking_over_on_postgres";
const TAGGED: usize = 24;
const SLEEPERS: usize = 12;
const GATES: usize = 12;

/// Sleeps until the epoch ms it is given (due while its hosts die), then a step.
#[derive(Clone)]
struct Sleeper;

impl Workflow for Sleeper {
    const NAME: &'static str = "sleeper";
    type Input = u64;
    type Output = u64;
    async fn run(&self, ctx: Ctx, at: u64) -> reel::Result<u64> {
        ctx.sleep_until(UNIX_EPOCH + Duration::from_millis(at))
            .await?;
        ctx.step("after", move |_| async move { Ok::<_, String>(at) })
            .await
    }
}

/// Waits for signals `a` then `b`; returns both.
#[derive(Clone)]
struct Gate;

impl Workflow for Gate {
    const NAME: &'static str = "gate";
    type Input = ();
    type Output = (u32, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u32, u32)> {
        let a: u32 = ctx.wait_for_signal("a").await?;
        let b: u32 = ctx.wait_for_signal("b").await?;
        Ok((a, b))
    }
}

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Tagged {
            side: dir.join("executions.log"),
            tag: name.to_owned(),
            steps: 12,
            busy: Duration::from_millis(10),
            pause_every: 3,
            pause: Duration::from_millis(150),
        })
        .register(Sleeper)
        .register(Gate)
        .build()
        .await?)
}

fn child(dir: &Path, name: &str) {
    procs::runtime().block_on(async {
        let host = open(dir, name).await.expect("open");
        if name == "host-0" {
            let go = dir.join("go");
            let deadline = Instant::now() + Duration::from_secs(60);
            while !go.exists() {
                assert!(Instant::now() < deadline, "never told to go");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let at: u64 = std::fs::read_to_string(&go)
                .expect("go")
                .parse()
                .expect("due time");
            for i in 0..TAGGED {
                host.start::<Tagged>(&format!("tagged-{i}"), ())
                    .await
                    .expect("start");
            }
            for i in 0..SLEEPERS {
                host.start::<Sleeper>(&format!("sleeper-{i}"), at)
                    .await
                    .expect("start");
            }
            for i in 0..GATES {
                host.start::<Gate>(&format!("gate-{i}"), ())
                    .await
                    .expect("start");
            }
            println!("started");
        } else {
            println!("joined");
        }
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

async fn owned_by(url: &str, name: &str) -> i64 {
    procs::query(
        url,
        &format!("SELECT count(*) FROM reel_leases WHERE owner = '{name}'"),
    )
    .await[0]
        .get(0)
}

#[test]
fn taker_killed_while_taking_over_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let name = std::env::var(NAME_ENV).expect("name");
        child(Path::new(&dir), &name);
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("taker_killed"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let first = Proc::spawn(TEST, CHILD_ENV, dir.path(), &[(NAME_ENV, "host-0")]);
    let second = Proc::spawn(TEST, CHILD_ENV, dir.path(), &[(NAME_ENV, "host-1")]);
    second.until(Duration::from_secs(60), |l| l.ends_with("joined"));
    let (last, at) = rt.block_on(async {
        let last = open(dir.path(), "host-2").await.expect("host 2");
        support::settled_leases(&url, "host-", 3).await;
        // Due after both kills, before the last host has taken everything.
        let at = procs::epoch_ms() + 3000;
        std::fs::write(dir.path().join("go"), at.to_string()).expect("go");
        (last, at)
    });
    let mut execs = 0;
    first.until(Duration::from_secs(60), |l| {
        execs += usize::from(l.starts_with("exec host-0"));
        l.ends_with("started")
    });
    rt.block_on(async {
        for i in 0..GATES {
            last.run(&format!("gate-{i}"))
                .signal("a", &(i as u32), "a")
                .await
                .expect("signal a");
        }
    });
    first.until(Duration::from_secs(30), |l| {
        execs += usize::from(l.starts_with("exec host-0"));
        execs >= 20
    });
    first.kill();
    rt.block_on(async {
        procs::until(
            "the first host's partitions to be taken",
            Duration::from_secs(30),
            || async { owned_by(&url, "host-0").await == 0 },
        )
        .await;
    });
    second.kill();
    let killed = procs::epoch_ms();
    rt.block_on(async {
        for i in 0..GATES {
            last.run(&format!("gate-{i}"))
                .signal("b", &(100 + i as u32), "b")
                .await
                .expect("signal b");
        }
        let limit = Duration::from_secs(40);
        let mut problems = Vec::new();
        let mut recorded = HashMap::new();
        for i in 0..TAGGED {
            let id = format!("tagged-{i}");
            match tokio::time::timeout(limit, last.handle::<Tagged>(&id).result()).await {
                Ok(Ok(tokens)) => {
                    recorded.insert(id, tokens);
                }
                other => problems.push(format!("{id}: {other:?}")),
            }
        }
        for i in 0..SLEEPERS {
            let id = format!("sleeper-{i}");
            match tokio::time::timeout(limit, last.handle::<Sleeper>(&id).result()).await {
                Ok(Ok(got)) if got == at => {}
                other => problems.push(format!("{id}: {other:?}")),
            }
            let fired = last
                .run(&id)
                .events()
                .await
                .expect("events")
                .iter()
                .filter(|e| matches!(e, Event::TimerFired { .. }))
                .count();
            if fired != 1 {
                problems.push(format!("{id}: its timer fired {fired} times"));
            }
        }
        for i in 0..GATES {
            let id = format!("gate-{i}");
            match tokio::time::timeout(limit, last.handle::<Gate>(&id).result()).await {
                Ok(Ok(got)) if got == (i as u32, 100 + i as u32) => {}
                other => problems.push(format!("{id}: {other:?}")),
            }
        }
        for id in recorded.keys() {
            if !matches!(last.run(id).status().await, Ok(RunStatus::Completed)) {
                problems.push(format!("{id}: {:?}", last.run(id).status().await));
            }
        }
        println!(
            "every run ended {} ms after the second kill",
            procs::epoch_ms() - killed
        );
        problems.extend(procs::not_last(
            &dir.path().join("executions.log"),
            &recorded,
        ));
        last.shutdown().await.expect("shutdown");
        assert!(
            problems.is_empty(),
            "{} problems:\n{}",
            problems.len(),
            problems.join("\n")
        );
    });
}
