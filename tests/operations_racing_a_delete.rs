//! Operations racing the delete of a finished run: a start of the same id, a
//! fork of it, reads of its log and `result()`. Each answers `Ok` or its
//! documented typed error (a fork of a run being deleted: `UnknownRun`; a read
//! of it: the whole log or none, never a "corrupt record"), counts and listing
//! stay in agreement, and no step body runs again once its result is recorded.

mod common;

use std::time::Duration;

use common::{Counter, within};
use reel::{Ctx, Error, Host, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Completes at once after one counted step.
struct Quick {
    runs: Counter,
}

impl Workflow for Quick {
    const NAME: &'static str = "quick";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("once", |_| async {
            self.runs.bump();
            Ok::<u32, String>(1)
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_racing_a_start_of_the_same_id() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let runs = Counter::default();
    let host = Host::builder()
        .path(dir.path())
        .register(Quick { runs: runs.clone() })
        .build()
        .await?;
    for i in 0..12 {
        let id = format!("d{i}");
        let run = host.start::<Quick>(&id, ()).await?;
        within(LIMIT, "the first run", run.result()).await??;
        let before = runs.get();
        let (a, h) = (host.run(&id), host.clone());
        let sid = id.clone();
        let deleting = tokio::spawn(async move { a.delete().await });
        let starting = tokio::spawn(async move { h.start::<Quick>(&sid, ()).await.map(|_| ()) });
        let (deleted, started) = within(LIMIT, "delete and start", async {
            tokio::join!(deleting, starting)
        })
        .await?;
        let (deleted, started) = (deleted?, started?);
        assert!(started.is_ok(), "{started:?}");
        assert!(
            matches!(
                deleted,
                Ok(()) | Err(Error::InvalidState { .. } | Error::UnknownRun(_))
            ),
            "{deleted:?}"
        );
        let now = host.run(&id);
        match now.status().await {
            Err(Error::UnknownRun(_)) => assert!(deleted.is_ok()),
            Ok(_) => {
                let out = within(LIMIT, "the run under the id", now.result::<u32>()).await?;
                assert_eq!(out?, 1);
            }
            Err(e) => panic!("status: {e:?}"),
        }
        assert!(runs.get() <= before + 1, "{} bodies", runs.get());
        let total: u64 = host.count().await?.values().sum();
        let listed = host.runs().await?.len() as u64;
        assert_eq!(total, listed, "counts and listing disagree after run {id}");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_racing_a_delete_of_its_source_is_made_or_told_the_run_is_gone() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let runs = Counter::default();
    let host = Host::builder()
        .path(dir.path())
        .register(Quick { runs: runs.clone() })
        .build()
        .await?;
    let mut outcomes = std::collections::BTreeMap::<&str, u32>::new();
    for i in 0..200 {
        let id = format!("s{i}");
        let run = host.start::<Quick>(&id, ()).await?;
        within(LIMIT, "the source run", run.result()).await??;
        let (a, h, src, dst) = (
            host.run(&id),
            host.clone(),
            id.clone(),
            format!("s{i}-fork"),
        );
        let deleting = tokio::spawn(async move { a.delete().await });
        // Staggered by a varying number of yields, so the fork lands at
        // different points of the delete.
        for _ in 0..i % 20 {
            tokio::task::yield_now().await;
        }
        let forking = tokio::spawn(async move { h.fork(&src, 1, &dst).await.map(|_| ()) });
        let (deleted, forked) = within(LIMIT, "delete and fork", async {
            tokio::join!(deleting, forking)
        })
        .await?;
        let (deleted, forked) = (deleted?, forked?);
        assert!(deleted.is_ok(), "{deleted:?}");
        match forked {
            Ok(()) => {
                *outcomes.entry("forked").or_default() += 1;
                let fork = host.run(&format!("s{i}-fork"));
                assert_eq!(within(LIMIT, "the fork", fork.result::<u32>()).await??, 1);
            }
            Err(Error::UnknownRun(ref r)) if *r == id => {
                *outcomes.entry("unknown").or_default() += 1;
            }
            other => panic!("fork of a run being deleted answered {other:?}"),
        }
    }
    // Which way the races went (the fork mostly wins).
    eprintln!("{outcomes:?}");
    host.shutdown().await?;
    Ok(())
}

/// Runs `n` steps.
struct Many;

impl Workflow for Many {
    const NAME: &'static str = "many";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        for i in 0..n {
            ctx.step("s", move |_| async move { Ok::<u32, String>(i) })
                .await?;
        }
        Ok(n)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_results_of_a_run_being_deleted_see_it_whole_or_not_at_all() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Many).await?;
    for i in 0..8 {
        let id = format!("m{i}");
        let run = host.start::<Many>(&id, 300).await?;
        within(LIMIT, "the run", run.result()).await??;
        let whole = run.events().await?.len();
        let reader = host.run(&id);
        let reading = tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                match reader.events().await {
                    // Never an empty log: a deleted run is unknown.
                    Ok(events) => seen.push(Ok(events.len())),
                    Err(Error::UnknownRun(_)) => return seen,
                    Err(e) => seen.push(Err(e.to_string())),
                }
                tokio::task::yield_now().await;
            }
        });
        // `result()` of a finished run reads its last record.
        let waiter = host.handle::<Many>(&id);
        let waiting = tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                match waiter.result().await {
                    Err(Error::UnknownRun(_)) => return seen,
                    answer => seen.push(answer.map_err(|e| e.to_string())),
                }
                tokio::task::yield_now().await;
            }
        });
        tokio::task::yield_now().await;
        run.delete().await?;
        let seen = within(LIMIT, "the reader", reading).await??;
        for answer in &seen {
            assert_eq!(answer, &Ok(whole), "a read of run {id} as it was deleted");
        }
        let seen = within(LIMIT, "the result caller", waiting).await??;
        for answer in &seen {
            assert_eq!(answer, &Ok(300), "result() of run {id} as it was deleted");
        }
    }
    host.shutdown().await?;
    Ok(())
}
