//! Invariant 8 for keys of the wrong shape (written while no host ran), outside the
//! cases `corrupt_record_harms_one_run` covers: a `listing` index key too short or
//! naming no UTF-8 run id, a status count of the wrong size, and a log key of the
//! wrong length at the end of one finished run's log. The host opens; listing,
//! counting and retention still serve every other run; operations on the damaged run
//! are typed errors (no panic, no hang).

mod common;

use std::path::Path;
use std::time::Duration;

use common::schedules::{HOUR, t0};
use common::within;
use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel::testing::TestClock;
use reel::{Ctx, Error, Host, Retention, RunFilter, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// One step, then done.
struct Once;
impl Workflow for Once {
    const NAME: &'static str = "once";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("s", |_| async move { Ok::<_, String>(n + 1) })
            .await
    }
}

const RUNS: [&str; 3] = ["r1", "r2", "r3"];

async fn open(path: &Path, clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(Once)
        .retention(
            Retention::keep_all()
                .completed_after(HOUR)
                .every(Duration::from_secs(3600)),
        )
        .build()
        .await
}

/// Three completed runs, then the host shuts down.
async fn three_completed(path: &Path, clock: &TestClock) -> anyhow::Result<()> {
    let host = open(path, clock).await?;
    for (i, id) in RUNS.iter().enumerate() {
        assert_eq!(
            host.start::<Once>(id, i as u32).await?.result().await?,
            i as u32 + 1
        );
    }
    host.shutdown().await?;
    Ok(())
}

fn with_keyspace(
    dir: &Path,
    name: &str,
    edit: impl FnOnce(&fjall::Keyspace) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let db = Database::builder(dir).open()?;
    let ks = db.keyspace(name, KeyspaceCreateOptions::default)?;
    edit(&ks)?;
    db.persist(PersistMode::SyncAll)?;
    Ok(())
}

async fn listed(host: &Host, status: Option<Vec<StatusKind>>) -> reel::Result<Vec<String>> {
    let page = host
        .list(RunFilter {
            status,
            limit: 100,
            ..RunFilter::default()
        })
        .await?;
    let mut ids: Vec<String> = page.items.into_iter().map(|r| r.run_id).collect();
    ids.sort();
    Ok(ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_serves_every_run_past_malformed_index_keys() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    three_completed(dir.path(), &clock).await?;
    with_keyspace(dir.path(), "listing", |listing| {
        // Too short to hold a creation time.
        listing.insert([b'c', 0x01, 0x02], [])?;
        // A creation time, then a run id that is not UTF-8, under every status.
        for status in 0..8u8 {
            let mut k = vec![b's', status];
            k.extend_from_slice(&1u64.to_be_bytes());
            k.extend_from_slice(b"\xff\xfe");
            listing.insert(k, [])?;
        }
        Ok(())
    })?;

    let host = open(dir.path(), &clock).await?;
    assert_eq!(within(LIMIT, "list", listed(&host, None)).await??, RUNS);
    assert_eq!(
        within(
            LIMIT,
            "list completed",
            listed(&host, Some(vec![StatusKind::Completed]))
        )
        .await??,
        RUNS
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_status_count_is_not_silently_misread() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    three_completed(dir.path(), &clock).await?;
    let host = open(dir.path(), &clock).await?;
    let before = host.count().await?;
    assert_eq!(before.get(&StatusKind::Completed), Some(&3));
    host.shutdown().await?;
    with_keyspace(dir.path(), "listing", |listing| {
        let key = listing
            .prefix([b'n'])
            .map(|g| g.key())
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .find(|k| {
                listing
                    .get(k)
                    .ok()
                    .flatten()
                    .is_some_and(|v| *v == 3u64.to_be_bytes())
            })
            .ok_or_else(|| anyhow::anyhow!("the completed count is stored"))?;
        listing.insert(key, [0x00, 0x03])?;
        Ok(())
    })?;

    // Counted again from the status index, never read as a number: not a silent 0.
    let host = open(dir.path(), &clock).await?;
    let counts = within(LIMIT, "count", host.count()).await??;
    assert_eq!(counts.get(&StatusKind::Completed), Some(&3), "{counts:?}");
    // The writer counts on from the repaired count, and writes it back.
    assert_eq!(host.start::<Once>("r4", 3).await?.result().await?, 4);
    let counts = host.count().await?;
    assert_eq!(counts.get(&StatusKind::Completed), Some(&4), "{counts:?}");
    host.shutdown().await?;
    with_keyspace(dir.path(), "listing", |listing| {
        let stored = listing
            .prefix([b'n'])
            .map(|g| g.into_inner())
            .collect::<Result<Vec<_>, _>>()?;
        assert!(
            stored.iter().all(|(_, v)| v.len() == 8),
            "every stored count is whole again: {stored:?}"
        );
        Ok(())
    })?;
    let host = open(dir.path(), &clock).await?;
    let counts = host.count().await?;
    assert_eq!(counts.get(&StatusKind::Completed), Some(&4), "{counts:?}");
    host.shutdown().await?;
    Ok(())
}

/// Adds a log key of the wrong length after `run`'s last record.
fn malformed_log_key(dir: &Path, run: &str) -> anyhow::Result<()> {
    with_keyspace(dir, "log", |log| {
        let mut k = run.as_bytes().to_vec();
        k.extend_from_slice(&[0, 0xff]);
        log.insert(k, [0x90])?;
        Ok(())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_on_a_run_with_a_malformed_log_key_are_typed_errors() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    three_completed(dir.path(), &clock).await?;
    malformed_log_key(dir.path(), "r2")?;

    let host = open(dir.path(), &clock).await?;
    let bad = host.run("r2");
    let typed = |r: Result<(), Error>, what: &str| {
        assert!(
            matches!(r, Err(Error::Storage(_) | Error::Corrupt { .. })),
            "{what}: {r:?}"
        );
    };
    typed(
        within(LIMIT, "events", bad.events()).await?.map(drop),
        "events",
    );
    typed(within(LIMIT, "delete", bad.delete()).await?, "delete");
    typed(
        within(LIMIT, "fork", host.fork("r2", 1, "r2-fork"))
            .await?
            .map(drop),
        "fork",
    );
    // The others answer as before.
    for id in ["r1", "r3"] {
        let events = host.run(id).events().await?;
        assert!(
            matches!(events.last(), Some(reel::Event::RunCompleted { .. })),
            "{id}"
        );
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_skips_a_run_with_a_malformed_log_key() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    three_completed(dir.path(), &clock).await?;
    malformed_log_key(dir.path(), "r2")?;

    clock.advance(2 * HOUR);
    let host = open(dir.path(), &clock).await?;
    let deleted = within(LIMIT, "a retention pass", host.enforce_retention()).await??;
    assert_eq!(deleted, 2);
    for id in ["r1", "r3"] {
        assert!(
            matches!(host.run(id).status().await, Err(Error::UnknownRun(_))),
            "{id} is deleted"
        );
    }
    host.shutdown().await?;
    Ok(())
}
