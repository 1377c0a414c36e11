//! Operations sent through the surviving hosts to runs whose owner (a child
//! process, `host-0`) was just SIGKILLed, before its leases ran out and while
//! its partitions move: the partitions are spread over three hosts and each run
//! below is on one of the child's.
//! - `cancel` of a run waiting for a signal returns once the taker ended it,
//!   cancelled;
//! - `pause` of a run mid-steps takes hold on the taker (status paused, no step
//!   recorded while paused), `resume` through the other host finishes it, and no
//!   recorded step ran again;
//! - `fork` of a waiting run at the end of its log gives a run that goes on on its
//!   own, while the original goes on after the takeover; each gets its own signal;
//! - `delete` of a run that completed on the dead host, then a new run under the
//!   same id started through the other host: it runs with its own input;
//! - `signal` + `terminate` of a run of the dead host: terminated, signal or not.

mod procs;
mod support;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use procs::{Proc, Tagged};
use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};
use reel_postgres::partition_of;

const CHILD_ENV: &str = "REEL_PG_OPS_KILLED_CHILD_DIR";
const TEST: &str = "operations_on_runs_of_a_killed_host_on_postgres";
const STEPS: usize = 60;
const LIMIT: Duration = Duration::from_secs(30);

/// A step, then waits for `go`, then a step with ten times the signal.
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

/// Returns its input plus one.
#[derive(Clone)]
struct Quick;

impl Workflow for Quick {
    const NAME: &'static str = "quick";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("inc", move |_| async move { Ok::<_, String>(n + 1) })
            .await
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
            steps: STEPS,
            busy: Duration::from_millis(10),
            pause_every: 5,
            pause: Duration::from_millis(20),
        })
        .register(Gate)
        .register(Quick)
        .build()
        .await?)
}

/// The first run id `<prefix>-<n>` on a partition of host `owner`.
fn id_on(owners: &[usize], owner: usize, prefix: &str) -> String {
    (0..)
        .map(|n| format!("{prefix}-{n}"))
        .find(|id| owners[partition_of(id) as usize] == owner)
        .expect("an id")
}

/// The runs, on partitions of host-0.
struct Ids {
    cancel: String,
    pause: String,
    fork: String,
    delete: String,
    terminate: String,
}

impl Ids {
    fn of(owners: &[usize]) -> Ids {
        Ids {
            cancel: id_on(owners, 0, "cancel"),
            pause: id_on(owners, 0, "pause"),
            fork: id_on(owners, 0, "fork"),
            delete: id_on(owners, 0, "delete"),
            terminate: id_on(owners, 0, "terminate"),
        }
    }
}

fn child(dir: &Path) {
    procs::runtime().block_on(async {
        let url = std::fs::read_to_string(dir.join("url")).expect("url");
        let host = open(dir, "host-0").await.expect("open");
        let go = dir.join("go");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !go.exists() {
            assert!(Instant::now() < deadline, "never told to go");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let owners = support::settled_leases(&url, "host-", 3).await;
        println!("phase settled");
        let ids = Ids::of(&owners);
        host.start::<Gate>(&ids.cancel, 1).await.expect("start");
        host.start::<Tagged>(&ids.pause, ()).await.expect("start");
        host.start::<Gate>(&ids.fork, 2).await.expect("start");
        host.start::<Gate>(&ids.terminate, 4).await.expect("start");
        let quick = host.start::<Quick>(&ids.delete, 3).await.expect("start");
        println!("phase started all");
        assert_eq!(quick.result().await.expect("quick"), 4);
        println!("phase quick done");
        for id in [&ids.cancel, &ids.fork, &ids.terminate] {
            host.run(id)
                .wait_until_suspended()
                .await
                .expect("suspended");
        }
        println!("started");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
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

#[test]
fn operations_on_runs_of_a_killed_host_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("ops_killed"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let victim = Proc::spawn(TEST, CHILD_ENV, dir.path(), &[]);
    let (hosts, ids) = rt.block_on(async {
        let hosts = vec![
            open(dir.path(), "host-1").await.expect("host 1"),
            open(dir.path(), "host-2").await.expect("host 2"),
        ];
        let owners = support::settled_leases(&url, "host-", 3).await;
        std::fs::write(dir.path().join("go"), "").expect("go");
        (hosts, Ids::of(&owners))
    });
    let mut execs = 0;
    victim.until(Duration::from_secs(60), |line| {
        // Shown if the child goes quiet: how far it got.
        println!("child: {line}");
        execs += usize::from(line.starts_with("exec host-0"));
        line == "started"
    });
    // Mid-steps.
    victim.until(Duration::from_secs(30), |line| {
        execs += usize::from(line.starts_with("exec host-0"));
        execs >= 8
    });
    victim.kill();
    rt.block_on(async {
        let (one, two) = (&hosts[0], &hosts[1]);
        let mut problems = Vec::new();

        // Through the survivors, before the takeover.
        one.run(&ids.pause).pause().await.expect("pause");
        let fork_at = one.run(&ids.fork).records().await.expect("records").len() as u64;
        let forked = one
            .fork(&ids.fork, fork_at, "forked")
            .await
            .expect("fork of a run of the dead host");
        one.run(&ids.delete).delete().await.expect("delete");
        match one.run(&ids.delete).status().await {
            Err(Error::UnknownRun(_)) => {}
            other => problems.push(format!("deleted run: status {other:?}")),
        }
        let again = two
            .start::<Quick>(&ids.delete, 10)
            .await
            .expect("start again");
        two.run(&ids.terminate)
            .signal("go", &7u32, "go-t")
            .await
            .expect("signal");
        let cancel = {
            let run = two.run(&ids.cancel);
            tokio::spawn(async move { run.cancel("no longer wanted").await })
        };
        two.run(&ids.terminate)
            .terminate("stop")
            .await
            .expect("terminate");

        match tokio::time::timeout(LIMIT, cancel).await {
            Ok(Ok(Ok(()))) => {}
            other => problems.push(format!("cancel: {other:?}")),
        }
        match one.run(&ids.cancel).status().await {
            Ok(RunStatus::Cancelled) => {}
            other => problems.push(format!("cancelled run: {other:?}")),
        }

        // The fork and the original each go on with their own signal.
        forked
            .signal("go", &5u32, "go-f")
            .await
            .expect("signal fork");
        two.run(&ids.fork)
            .signal("go", &6u32, "go-o")
            .await
            .expect("signal original");
        match tokio::time::timeout(LIMIT, forked.result::<u32>()).await {
            Ok(Ok(52)) => {}
            other => problems.push(format!("fork: {other:?}")),
        }
        match tokio::time::timeout(LIMIT, one.handle::<Gate>(&ids.fork).result()).await {
            Ok(Ok(62)) => {}
            other => problems.push(format!("original of the fork: {other:?}")),
        }

        match tokio::time::timeout(LIMIT, again.result()).await {
            Ok(Ok(11)) => {}
            other => problems.push(format!("run started again after delete: {other:?}")),
        }
        let terminated = one.run(&ids.terminate);
        procs::until("the terminated run to end", LIMIT, || async {
            !matches!(
                terminated.status().await,
                Ok(RunStatus::Running | RunStatus::Suspended { .. })
            )
        })
        .await;
        match terminated.status().await {
            Ok(RunStatus::Cancelled) => {}
            other => problems.push(format!("terminated run: {other:?}")),
        }

        // The pause holds on the taker: once paused, no step is recorded.
        let paused = one.run(&ids.pause);
        procs::until("the pause to take hold", LIMIT, || async {
            matches!(paused.status().await, Ok(RunStatus::Paused))
        })
        .await;
        let at_pause = steps_recorded(one, &ids.pause).await;
        // Long enough for several steps had it kept going: a timer of the
        // paused run's own pace, observed through another run's end.
        for p in 0..5 {
            let probe = two
                .start::<Quick>(&format!("probe-{p}"), 0)
                .await
                .expect("probe");
            probe.result().await.expect("probe");
        }
        let still = steps_recorded(one, &ids.pause).await;
        if still != at_pause {
            problems.push(format!(
                "{} steps recorded while paused ({at_pause} -> {still})",
                still - at_pause
            ));
        }
        if !matches!(paused.status().await, Ok(RunStatus::Paused)) {
            problems.push(format!("pause did not hold: {:?}", paused.status().await));
        }
        two.run(&ids.pause).resume().await.expect("resume");
        match tokio::time::timeout(LIMIT, two.handle::<Tagged>(&ids.pause).result()).await {
            Ok(Ok(tokens)) => {
                let recorded = HashMap::from([(ids.pause.clone(), tokens)]);
                problems.extend(procs::not_last(
                    &dir.path().join("executions.log"),
                    &recorded,
                ));
            }
            other => problems.push(format!("paused run: {other:?}")),
        }
        for host in hosts {
            host.shutdown().await.expect("shutdown");
        }
        assert!(
            problems.is_empty(),
            "{} problems:\n{}",
            problems.len(),
            problems.join("\n")
        );
    });
}
