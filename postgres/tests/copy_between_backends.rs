//! Moving a service between the embedded store and PostgreSQL with
//! `reel_storage::copy_store` (what `reel copy` runs): fjall -> Postgres -> fjall
//! keeps every record (sequence numbers, append times, events), the metadata, the
//! pending timers and the schedules; a host over the Postgres copy carries on a
//! waiting run; a non-empty destination is refused before anything is written.

mod support;

use std::time::Duration;

use reel::{Ctx, Host, RunStatus, ScheduleSpec, Workflow};
use reel_postgres::PgStore;
use reel_storage::{CopyError, FjallStore, Record, RunMeta, Store, TimerEntry, copy_store};

const LIMIT: Duration = Duration::from_secs(30);

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

type Dump = (Vec<(RunMeta, Vec<Record>)>, Vec<TimerEntry>, usize);

fn dump(store: &dyn Store) -> anyhow::Result<Dump> {
    let mut metas = store.list_runs()?.items;
    metas.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    let mut runs = Vec::new();
    for meta in metas {
        let records = store.read_records(&meta.run_id, 0)?;
        runs.push((meta, records));
    }
    let mut timers = store.timers()?.items;
    timers.sort();
    Ok((runs, timers, store.list_schedules()?.len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fjall_to_postgres_and_back() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = Host::builder()
        .path(dir.path().join("a"))
        .register(Approve)
        .build()
        .await?;
    for i in 0..20u32 {
        let run = h.start::<Approve>(&format!("run-{i:02}"), i).await?;
        tokio::time::timeout(LIMIT, run.wait_until_suspended()).await??;
        if i % 2 == 0 {
            h.run(&format!("run-{i:02}"))
                .signal("ok", &format!("yes-{i}"), "s")
                .await?;
            tokio::time::timeout(LIMIT, run.result()).await??;
        }
    }
    h.schedule::<Approve>("nightly", ScheduleSpec::cron("0 3 * * *"), 7)
        .await?;
    h.shutdown().await?;

    let fjall = FjallStore::open(dir.path().join("a"))?;
    let url = support::database("copy").await;
    let pg = PgStore::connect(&url).await?;
    let report = copy_store(&*fjall, &*pg).await?;
    assert_eq!(report.runs, 20);
    assert_eq!(report.schedules, 1);
    assert!(report.skipped.is_empty(), "{report:?}");
    let original = dump(&*fjall)?;
    assert_eq!(original, dump(&*pg)?);
    // Copying again into the filled database writes nothing.
    assert!(matches!(
        copy_store(&*fjall, &*pg).await,
        Err(CopyError::NotEmpty { runs: 20, .. })
    ));
    let back_dir = dir.path().join("b");
    let back = FjallStore::open(&back_dir)?;
    copy_store(&*pg, &*back).await?;
    assert_eq!(original, dump(&*back)?);
    fjall.close();
    back.close();
    pg.close();

    // A host over the Postgres copy carries on a waiting run.
    let pg = PgStore::connect(&url).await?;
    let h = Host::builder().store(pg).register(Approve).build().await?;
    assert!(matches!(
        h.run("run-01").status().await?,
        RunStatus::Suspended { .. }
    ));
    h.run("run-01").signal("ok", &"moved", "s").await?;
    let out = tokio::time::timeout(LIMIT, h.handle::<Approve>("run-01").result()).await??;
    assert_eq!(out.as_deref(), Some("moved"));
    assert_eq!(h.schedules().await?.len(), 1);
    h.shutdown().await?;
    Ok(())
}
