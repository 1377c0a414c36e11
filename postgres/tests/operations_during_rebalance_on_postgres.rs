//! Operations sent while partitions move: one host runs everything, a second
//! joins, and while the first gives half of the partitions back (its runs winding
//! down, letters for them waiting for the next owner) both hosts pause runs
//! mid-steps, cancel, signal and fork waiting runs. Every operation takes effect
//! once, wherever the run ends up: paused runs are paused (no step recorded while
//! paused) and finish after a resume through the other host with no recorded
//! step run again; cancelled runs are cancelled; signalled runs and forks end with
//! their own signal.

mod procs;
mod support;

use std::collections::HashMap;
use std::time::Duration;

use procs::Tagged;
use reel::{Ctx, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(40);
const TAGGED: usize = 16;
const GATES: usize = 24;

/// A step, then waits for `go`, then a step with ten times the signal plus `n`.
#[derive(Clone)]
struct Gate;

impl Workflow for Gate {
    const NAME: &'static str = "gate";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("a", move |_| async move { Ok::<_, String>(n) })
            .await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        ctx.step("b", move |_| async move { Ok::<_, String>(go * 10 + n) })
            .await
    }
}

async fn host(url: &str, name: &str, dir: &std::path::Path) -> anyhow::Result<Host> {
    let store = support::join(url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Tagged {
            side: dir.join("executions.log"),
            tag: name.to_owned(),
            steps: 50,
            busy: Duration::from_millis(5),
            pause_every: 5,
            pause: Duration::from_millis(20),
        })
        .register(Gate)
        .build()
        .await?)
}

async fn steps_recorded(host: &Host, id: &str) -> usize {
    host.run(id)
        .events()
        .await
        .expect("events")
        .iter()
        .filter(|e| matches!(e, Event::StepCompleted { .. }))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_during_rebalance_on_postgres() -> anyhow::Result<()> {
    let url = support::database("ops_rebalance").await;
    let dir = tempfile::tempdir()?;
    let one = host(&url, "host-1", dir.path()).await?;
    support::spread_leases(&url, "host-", 1, 256).await;
    for i in 0..TAGGED {
        one.start::<Tagged>(&format!("t-{i}"), ()).await?;
    }
    for i in 0..GATES {
        one.start::<Gate>(&format!("g-{i}"), i as u32).await?;
    }
    for i in 0..GATES {
        one.run(&format!("g-{i}")).wait_until_suspended().await?;
    }
    // The second host joins; the first starts giving partitions back at its next
    // renewal, while these go out through both.
    let two = host(&url, "host-2", dir.path()).await?;
    let hosts = [&one, &two];
    let mut problems = Vec::new();
    let mut forks = Vec::new();
    for i in 0..GATES.max(TAGGED) {
        let via = hosts[i % 2];
        if i < TAGGED && i % 2 == 0 {
            via.run(&format!("t-{i}")).pause().await?;
        }
        if i < GATES {
            let id = format!("g-{i}");
            match i % 3 {
                0 => via.run(&id).request_cancel("moving").await?,
                1 => via.run(&id).signal("go", &(i as u32), "go").await?,
                _ => {
                    let end = via.run(&id).records().await?.len() as u64;
                    let fork = via.fork(&id, end, &format!("f-{i}")).await?;
                    fork.signal("go", &(100 + i as u32), "go").await?;
                    via.run(&id).signal("go", &(i as u32), "go").await?;
                    forks.push((i, fork));
                }
            }
        }
    }
    support::spread_leases(&url, "host-", 2, 100).await;

    for i in 0..GATES {
        let id = format!("g-{i}");
        let run = hosts[(i + 1) % 2].handle::<Gate>(&id);
        let got = tokio::time::timeout(LIMIT, run.result()).await;
        match (i % 3, got) {
            (0, Ok(Err(reel::Error::Cancelled(_)))) => {}
            (1 | 2, Ok(Ok(n))) if n == i as u32 * 10 + i as u32 => {}
            (_, other) => problems.push(format!("{id}: {other:?}")),
        }
    }
    for (i, fork) in forks {
        match tokio::time::timeout(LIMIT, fork.result::<u32>()).await {
            Ok(Ok(n)) if n == (100 + i as u32) * 10 + i as u32 => {}
            other => problems.push(format!("f-{i}: {other:?}")),
        }
    }
    // Paused runs hold still wherever they are now.
    for i in (0..TAGGED).step_by(2) {
        let run = two.run(&format!("t-{i}"));
        procs::until("a pause to take hold", LIMIT, || async {
            matches!(run.status().await, Ok(RunStatus::Paused))
        })
        .await;
    }
    let at_pause: Vec<usize> = {
        let mut v = Vec::new();
        for i in (0..TAGGED).step_by(2) {
            v.push(steps_recorded(&one, &format!("t-{i}")).await);
        }
        v
    };
    // The unpaused ones run to their end meanwhile.
    let mut recorded = HashMap::new();
    for i in (1..TAGGED).step_by(2) {
        let id = format!("t-{i}");
        match tokio::time::timeout(LIMIT, one.handle::<Tagged>(&id).result()).await {
            Ok(Ok(tokens)) => {
                recorded.insert(id, tokens);
            }
            other => problems.push(format!("{id}: {other:?}")),
        }
    }
    for (k, i) in (0..TAGGED).step_by(2).enumerate() {
        let id = format!("t-{i}");
        let now = steps_recorded(&two, &id).await;
        if now != at_pause[k] {
            problems.push(format!("{id}: {} -> {now} steps while paused", at_pause[k]));
        }
        hosts[(i / 2 + 1) % 2].run(&id).resume().await?;
    }
    for i in (0..TAGGED).step_by(2) {
        let id = format!("t-{i}");
        match tokio::time::timeout(LIMIT, two.handle::<Tagged>(&id).result()).await {
            Ok(Ok(tokens)) => {
                recorded.insert(id, tokens);
            }
            other => problems.push(format!("{id}: {other:?}")),
        }
    }
    problems.extend(procs::not_last(
        &dir.path().join("executions.log"),
        &recorded,
    ));
    one.shutdown().await?;
    two.shutdown().await?;
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    Ok(())
}
