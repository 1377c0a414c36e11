//! A host process frozen (SIGSTOP: a VM pause, a stalled process) past its lease
//! while its runs are mid-work.
//!
//! Frozen between transactions: another host takes every partition over and runs
//! every run to its end; then the frozen process thaws (SIGCONT). "A host cut off
//! from the database past its lease cannot harm anything": it must not write to
//! the logs (every record of every run predates the thaw) and must not run a step
//! body once the step's completion is recorded (every step was recorded before
//! the thaw, so no body may begin after it).
//!
//! Frozen inside a write transaction (which holds its partitions' lease rows
//! `FOR KEY SHARE`): to the server its session is alive, as it is for a host cut
//! off from the database until TCP notices. Its leases still expire, and the
//! other host must take its partitions over within a bound of the lease time.

mod procs;
mod support;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use procs::{Proc, Tagged};
use reel::{Event, Host, RunStatus};

const RUNS: usize = 30;
const STEPS: usize = 30;
const CHILD_ENV: &str = "REEL_PG_PAUSED_OWNER_CHILD_DIR";

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Tagged {
            side: dir.join("executions.log"),
            tag: name.to_owned(),
            steps: STEPS,
            busy: Duration::from_millis(2),
            pause_every: 5,
            pause: Duration::from_millis(20),
        })
        .build()
        .await?)
}

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

/// The old host's heartbeat expiry (epoch ms).
async fn heartbeat(url: &str) -> u64 {
    let rows = procs::query(
        url,
        "SELECT (extract(epoch from expires_at) * 1000)::bigint FROM reel_hosts \
         WHERE host_id = 'old'",
    )
    .await;
    rows.first()
        .map_or(0, |r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0))
}

/// Freezes `old` at a moment when a transaction of its is open (`in_tx`) or when
/// none is (no session busy or in a transaction), trying again after some more of
/// its work until it is so.
async fn freeze(old: &Proc, url: &str, in_tx: bool) {
    for _ in 0..500 {
        old.signal(libc::SIGSTOP);
        let open = procs::sessions_in(url, &["idle in transaction"]).await > 0;
        let busy = procs::sessions_in(url, &["active", "idle in transaction"]).await > 0;
        if (in_tx && open) || (!in_tx && !busy) {
            return;
        }
        old.signal(libc::SIGCONT);
        old.progress("exec ", 1);
    }
    panic!("never caught the host in the state wanted");
}

/// Spawns the old host and lets it get well into its runs.
fn spawn_old(test: &str, dir: &Path) -> Proc {
    let old = Proc::spawn(test, CHILD_ENV, dir, &[]);
    let (mut started, mut executed) = (false, 0);
    old.until(Duration::from_secs(60), |line| {
        started |= line == "started";
        executed += usize::from(line.starts_with("exec "));
        started && executed >= 90
    });
    old
}

#[test]
fn paused_owner_resumes_after_takeover_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("paused_owner"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let old = spawn_old(
        "paused_owner_resumes_after_takeover_on_postgres",
        dir.path(),
    );
    rt.block_on(freeze(&old, &url, false));
    let thawed_ms = rt.block_on(async {
        let new = open(dir.path(), "new").await.expect("the new host");
        for i in 0..RUNS {
            let run = new.handle::<Tagged>(&format!("run-{i}"));
            if tokio::time::timeout(Duration::from_secs(30), run.result())
                .await
                .is_err()
            {
                let leases = procs::query(
                    &url,
                    "SELECT coalesce(owner, '-'), count(*) FROM reel_leases GROUP BY owner",
                )
                .await;
                let leases: Vec<(String, i64)> =
                    leases.iter().map(|r| (r.get(0), r.get(1))).collect();
                let activity = procs::query(
                    &url,
                    "SELECT state, coalesce(left(query, 60), '') FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .await;
                let activity: Vec<(String, String)> = activity
                    .iter()
                    .map(|r| (r.get::<_, Option<String>>(0).unwrap_or_default(), r.get(1)))
                    .collect();
                panic!(
                    "run-{i} did not end on the new host while the old one was frozen: \
                     {:?}; leases {leases:?}; sessions {activity:#?}",
                    run.status().await
                );
            }
        }
        let thawed_ms = procs::epoch_ms();
        old.signal(libc::SIGCONT);
        // The thawed host renews (and learns it lost everything), then renews
        // once more: what it did in between has landed by then.
        let ttl = u64::try_from(support::TEST_LEASE.as_millis()).expect("ms");
        procs::until(
            "the thawed host to renew twice",
            Duration::from_secs(30),
            || async { heartbeat(&url).await > thawed_ms + ttl + ttl / 3 },
        )
        .await;
        let mut problems = Vec::new();
        let mut recorded = HashMap::new();
        for i in 0..RUNS {
            let id = format!("run-{i}");
            let run = new.run(&id);
            let status = run.status().await.expect("status");
            if status != RunStatus::Completed {
                problems.push(format!("{id}: {status:?} after the thaw"));
            }
            let records = run.records().await.expect("records");
            for r in &records {
                let at = u64::try_from(
                    r.at.duration_since(UNIX_EPOCH)
                        .expect("after the epoch")
                        .as_millis(),
                )
                .expect("ms");
                if at >= thawed_ms {
                    problems.push(format!(
                        "{id}: record {} ({:?}) written after the thaw",
                        r.seq, r.event
                    ));
                }
            }
            let completed = records
                .iter()
                .filter(|r| matches!(r.event, Event::StepCompleted { .. }))
                .count();
            if completed != STEPS {
                problems.push(format!("{id}: {completed} step completions recorded"));
            }
            recorded.insert(
                id.clone(),
                new.handle::<Tagged>(&id).result().await.expect("result"),
            );
        }
        new.shutdown().await.expect("shutdown");
        for e in procs::executions(&dir.path().join("executions.log")) {
            if e.tag == "old" && e.begin >= thawed_ms {
                problems.push(format!(
                    "{}: the thawed host ran step {} {} ms after the thaw, after its \
                     completion was recorded",
                    e.run,
                    e.key,
                    e.begin - thawed_ms
                ));
            }
        }
        let old_after: Vec<_> = recorded
            .iter()
            .filter_map(|(run, tokens)| {
                let first_new = tokens.iter().position(|t| procs::tag_of(t) == "new")?;
                tokens[first_new..]
                    .iter()
                    .find(|t| procs::tag_of(t) == "old")
                    .map(|t| format!("{run}: the old host recorded {t} after the takeover"))
            })
            .collect();
        problems.extend(old_after);
        assert!(
            problems.is_empty(),
            "{} problems:\n{}",
            problems.len(),
            problems.join("\n")
        );
        thawed_ms
    });
    old.kill();
    println!("thawed at {thawed_ms}");
}

/// How soon every partition must have another owner after the freeze: the lease
/// runs out at most a lease after the frozen host's last renewal, and the taker
/// renews every third of a lease; plus slack for a loaded machine.
const TAKEOVER_BOUND: Duration = Duration::from_secs(15);

#[test]
fn host_frozen_inside_a_transaction_is_taken_over_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("frozen_in_tx"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let old = spawn_old(
        "host_frozen_inside_a_transaction_is_taken_over_on_postgres",
        dir.path(),
    );
    rt.block_on(async {
        freeze(&old, &url, true).await;
        let frozen = std::time::Instant::now();
        let new = open(dir.path(), "new").await.expect("the new host");
        let deadline = frozen + TAKEOVER_BOUND;
        loop {
            let rows = procs::query(
                &url,
                "SELECT count(*) FROM reel_leases WHERE owner IS DISTINCT FROM 'new'",
            )
            .await;
            let left: i64 = rows[0].get(0);
            if left == 0 {
                break;
            }
            if std::time::Instant::now() > deadline {
                let locked = procs::sessions_in(&url, &["idle in transaction"]).await;
                panic!(
                    "{left} partitions still not taken {:?} after the host froze \
                     ({locked} of its transactions open)",
                    frozen.elapsed()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // And every run ends there.
        for i in 0..RUNS {
            let run = new.handle::<Tagged>(&format!("run-{i}"));
            tokio::time::timeout(Duration::from_secs(30), run.result())
                .await
                .expect("every run ends on the new host")
                .expect("every run completes");
        }
        new.shutdown().await.expect("shutdown");
    });
    old.signal(libc::SIGCONT);
    old.kill();
}
