//! `reel copy FROM TO` copies a store offline into an empty one: every run's
//! records (sequence numbers and append times), metadata, pending timers and the
//! schedules. A host opened on the copy carries on where the original stopped. A
//! destination that is not empty, or a source a host holds, is refused with a
//! clear message and a failing exit code.

use std::process::{Command, Output};
use std::time::Duration;

use reel::{Ctx, Host, RunStatus, ScheduleSpec, Workflow};
use reel_storage::{FjallStore, LogReader, MetaReader, Store, TimerReader};

const LIMIT: Duration = Duration::from_secs(20);

/// A step, then a signal wait with a one-day timeout (a pending timer).
struct Approve;
impl Workflow for Approve {
    const NAME: &'static str = "approve";
    type Input = u32;
    type Output = Option<String>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Option<String>> {
        ctx.step("prepare", |_| async move { Ok::<_, String>(n + 1) })
            .await?;
        ctx.wait_for_signal_timeout("ok", Duration::from_secs(86_400))
            .await
    }
}

async fn host(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder().path(dir).register(Approve).build().await
}

fn reel(args: &[&str]) -> Output {
    tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_reel"))
            .args(args)
            .env_remove("REEL_URL")
            .env_remove("REEL_STORE")
            .output()
            .expect("the reel binary runs")
    })
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every run with its records and metadata, and the timer index, read directly.
type Dump = (
    Vec<(reel_storage::RunMeta, Vec<reel_storage::Record>)>,
    Vec<reel_storage::TimerEntry>,
);

fn dump(dir: &std::path::Path) -> anyhow::Result<Dump> {
    let store = FjallStore::open(dir)?;
    let mut runs = Vec::new();
    let mut metas = store.list_runs()?.items;
    metas.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    for meta in metas {
        let records = store.read_records(&meta.run_id, 0)?;
        runs.push((meta, records));
    }
    let timers = store.timers()?.items;
    store.close();
    Ok((runs, timers))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_moves_a_store_and_refuses_what_it_must() -> anyhow::Result<()> {
    let src = tempfile::tempdir()?;
    let dst = tempfile::tempdir()?;
    let dst_store = dst.path().join("copy");
    let (from, to) = (
        src.path().to_str().expect("utf-8").to_owned(),
        dst_store.to_str().expect("utf-8").to_owned(),
    );
    let h = host(src.path()).await?;
    let done = h.start::<Approve>("done", 1).await?;
    h.run("done").signal("ok", &"yes", "s1").await?;
    tokio::time::timeout(LIMIT, done.result()).await??;
    let waiting = h.start::<Approve>("waiting", 2).await?;
    tokio::time::timeout(LIMIT, waiting.wait_until_suspended()).await??;
    h.schedule::<Approve>("nightly", ScheduleSpec::cron("0 3 * * *"), 7)
        .await?;

    // A host holds the source: refused, nothing created.
    let out = reel(&["copy", &from, &to]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stop the host first"),
        "{}",
        text(&out)
    );
    h.shutdown().await?;

    let out = reel(&["--json", "copy", &from, &to]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(report["runs"], 2, "{report}");
    assert_eq!(report["schedules"], 1, "{report}");
    assert!(report["timers"].as_u64() >= Some(1), "{report}");

    // The same records (sequence numbers, times, events), metadata and timers.
    assert_eq!(dump(src.path())?, dump(&dst_store)?);

    // Copying into a store that holds runs is refused.
    let out = reel(&["copy", &from, &to]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not empty"),
        "{}",
        text(&out)
    );

    // A host on the copy carries on.
    let h = host(&dst_store).await?;
    assert!(matches!(
        h.run("waiting").status().await?,
        RunStatus::Suspended { .. }
    ));
    h.run("waiting").signal("ok", &"later", "s2").await?;
    let result = tokio::time::timeout(LIMIT, h.handle::<Approve>("waiting").result()).await??;
    assert_eq!(result.as_deref(), Some("later"));
    let schedules = h.schedules().await?;
    assert_eq!(schedules.len(), 1);
    assert_eq!(schedules[0].id, "nightly");
    h.shutdown().await?;
    Ok(())
}
