//! Queues admit in the database, one admission at a time per queue (a
//! transaction under an advisory lock of the queue). A host process frozen
//! (SIGSTOP; to the server, like a host cut off until TCP notices) inside an
//! admission must not stop the queue for every other host: once its lease runs
//! out, the runs another host starts on the queue are admitted and end.

mod procs;
mod support;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use procs::Proc;
use reel::{Ctx, Host, QueueOptions, Workflow};

const CHILD_ENV: &str = "REEL_PG_QUEUE_FROZEN_CHILD_DIR";
const TEST: &str = "queue_admits_while_a_host_is_frozen_admitting_on_postgres";

/// One step, which prints `exec <run>`.
#[derive(Clone)]
struct Job;

impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        let run = ctx.run_id().to_owned();
        ctx.step("work", move |_| {
            let run = run.clone();
            async move {
                println!("exec {run}");
                Ok::<_, String>(())
            }
        })
        .await
    }
}

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Job)
        .queue("q", QueueOptions::default().concurrency(2))
        .build()
        .await?)
}

fn child(dir: &Path) {
    procs::runtime().block_on(async {
        let host = open(dir, "host-0").await.expect("open");
        for i in 0..2000 {
            host.start_on::<Job>("q", &format!("v-{i}"), ())
                .await
                .expect("start");
        }
        println!("started");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// Sessions inside an admission (a transaction whose last statement was one of
/// the queue's).
async fn admitting(url: &str) -> i64 {
    let rows = procs::query(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid() AND state = 'idle in transaction' \
         AND (query LIKE '%reel_queue%' OR query LIKE '%pg_advisory_xact_lock%')",
    )
    .await;
    rows[0].get(0)
}

#[test]
fn queue_admits_while_a_host_is_frozen_admitting_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("queue_frozen"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let frozen = Proc::spawn(TEST, CHILD_ENV, dir.path(), &[]);
    frozen.until(Duration::from_secs(120), |l| l.ends_with("started"));
    rt.block_on(async {
        let mut caught = false;
        for _ in 0..3000 {
            frozen.signal(libc::SIGSTOP);
            if admitting(&url).await > 0 {
                caught = true;
                break;
            }
            frozen.signal(libc::SIGCONT);
            frozen.progress("exec ", 1);
        }
        assert!(caught, "never caught the host inside an admission");
        let what = procs::query(
            &url,
            "SELECT a.query, (SELECT count(*) FROM pg_locks l WHERE l.pid = a.pid \
             AND l.locktype = 'advisory') FROM pg_stat_activity a \
             WHERE a.datname = current_database() AND a.state = 'idle in transaction'",
        )
        .await;
        for r in &what {
            println!(
                "frozen in: {} ({} advisory locks)",
                r.get::<_, String>(0),
                r.get::<_, i64>(1)
            );
        }
        let host = open(dir.path(), "host-1").await.expect("host 1");
        let mut stuck = Vec::new();
        for i in 0..3 {
            let id = format!("mine-{i}");
            host.start_on::<Job>("q", &id, ()).await.expect("start");
            let run = host.handle::<Job>(&id);
            if tokio::time::timeout(Duration::from_secs(20), run.result())
                .await
                .is_err()
            {
                stuck.push(format!("{id}: {:?}", run.status().await));
            }
        }
        let locked = admitting(&url).await;
        frozen.signal(libc::SIGCONT);
        host.shutdown().await.expect("shutdown");
        assert!(
            stuck.is_empty(),
            "runs started on the queue were never admitted while a host sat frozen in an \
             admission ({locked} such sessions):\n{}",
            stuck.join("\n")
        );
    });
    frozen.kill();
}
