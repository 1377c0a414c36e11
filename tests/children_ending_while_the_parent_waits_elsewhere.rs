//! Children ending while their parent is passivated, paused, being cancelled or
//! restarting after a panic: the parent sees every child's result exactly once
//! and never hangs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use common::within;
use futures::future::try_join_all;
use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);
const KIDS: u32 = 6;

/// Waits for `go` and returns its input times ten.
struct Kid;

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, i: u32) -> reel::Result<u32> {
        ctx.wait_for_signal::<()>("go").await?;
        Ok(i * 10)
    }
}

fn kid_id(parent: &str, i: u32) -> String {
    format!("{parent}-kid{i}")
}

/// Calls `KIDS` children at once and returns their outputs.
struct Fan;

impl Workflow for Fan {
    const NAME: &'static str = "fan";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let me = ctx.run_id().to_owned();
        try_join_all((0..KIDS).map(|i| ctx.child::<Kid>(&kid_id(&me, i), i))).await
    }
}

/// Runs that have already panicked once (by run id).
static PANICKED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Takes its children one by one (in a loop, each result handed to the handler
/// as it lands), and panics the first time it has seen the third result.
struct Fragile;

impl Workflow for Fragile {
    const NAME: &'static str = "fragile";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let me = ctx.run_id().to_owned();
        let mut pending: futures::stream::FuturesUnordered<_> = (0..KIDS)
            .map(|i| ctx.child::<Kid>(&kid_id(&me, i), i))
            .collect();
        let mut got = Vec::new();
        use futures::StreamExt;
        while let Some(r) = pending.next().await {
            got.push(r?);
            if got.len() == 3
                && PANICKED
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(me.clone())
            {
                panic!("fragile parent panics after its third child");
            }
        }
        got.sort_unstable();
        Ok(got)
    }
}

async fn open(dir: &std::path::Path, passivate: Duration) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Kid)
        .register(Fan)
        .register(Fragile)
        .passivate_after(passivate)
        .restart_limit(5, Duration::from_secs(60))
        .build()
        .await
}

/// Waits until every child of `parent` exists and waits for `go`.
async fn kids_waiting(host: &Host, parent: &str) -> anyhow::Result<()> {
    for i in 0..KIDS {
        let kid = host.handle::<Kid>(&kid_id(parent, i));
        within(LIMIT, "a kid to exist", async {
            loop {
                match kid.wait_until_suspended().await {
                    Ok(_) => return anyhow::Ok(()),
                    Err(Error::UnknownRun(_)) => tokio::task::yield_now().await,
                    Err(e) => return Err(e.into()),
                }
            }
        })
        .await??;
    }
    Ok(())
}

/// Sends `go` to every child from its own task, all at once.
async fn release_all(host: &Host, parent: &str) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for i in 0..KIDS {
        let kid = host.handle::<Kid>(&kid_id(parent, i));
        tasks.push(tokio::spawn(
            async move { kid.signal("go", &(), "go").await },
        ));
    }
    for t in tasks {
        within(LIMIT, "a go", t).await???;
    }
    Ok(())
}

/// The child results in the parent's log, per wait id.
fn child_results(events: &[Event]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in events {
        if let Event::ChildCompleted { id, .. } = e {
            *m.entry(id.clone()).or_insert(0) += 1;
        }
    }
    m
}

/// Asserts the parent's log holds no child result twice.
fn no_result_twice(events: &[Event], iter: u32) {
    let results = child_results(events);
    assert!(
        results.values().all(|n| *n == 1),
        "iteration {iter}: {results:?}"
    );
}

/// Asserts the parent's log holds every child's result, each once.
fn every_result_once(events: &[Event], iter: u32) {
    let results = child_results(events);
    assert_eq!(
        results.len(),
        KIDS as usize,
        "iteration {iter}: {results:?}"
    );
    no_result_twice(events, iter);
}

fn expected() -> Vec<u32> {
    (0..KIDS).map(|i| i * 10).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_ending_while_the_parent_is_passivated() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path(), Duration::ZERO).await?;
    for iter in 0..10 {
        let parent = format!("p{iter}");
        let run = host.start::<Fan>(&parent, ()).await?;
        kids_waiting(&host, &parent).await?;
        run.wait_until_suspended().await?;
        release_all(&host, &parent).await?;
        let got = within(LIMIT, "the parent's result", run.result()).await??;
        assert_eq!(got, expected(), "iteration {iter}");
        every_result_once(&run.events().await?, iter);
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_ending_while_the_parent_is_paused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path(), Duration::from_millis(1)).await?;
    for iter in 0..8 {
        let parent = format!("q{iter}");
        let run = host.start::<Fan>(&parent, ()).await?;
        kids_waiting(&host, &parent).await?;
        run.wait_until_suspended().await?;
        run.pause().await?;
        release_all(&host, &parent).await?;
        for i in 0..KIDS {
            let kid = host.handle::<Kid>(&kid_id(&parent, i));
            assert_eq!(within(LIMIT, "a kid", kid.result()).await??, i * 10);
        }
        assert_eq!(run.status().await?, RunStatus::Paused, "iteration {iter}");
        run.resume().await?;
        let got = within(LIMIT, "the parent's result", run.result()).await??;
        assert_eq!(got, expected(), "iteration {iter}");
        every_result_once(&run.events().await?, iter);
    }
    host.shutdown().await?;
    Ok(())
}

/// Pause and resume race the children's ends (no waiting in between).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_racing_children_ends() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path(), Duration::ZERO).await?;
    for iter in 0..15 {
        let parent = format!("r{iter}");
        let run = host.start::<Fan>(&parent, ()).await?;
        kids_waiting(&host, &parent).await?;
        let releaser = {
            let (host, parent) = (host.clone(), parent.clone());
            tokio::spawn(async move { release_all(&host, &parent).await })
        };
        for _ in 0..3 {
            match run.pause().await {
                Ok(()) => {}
                Err(Error::InvalidState { .. }) => break, // completed already
                Err(e) => anyhow::bail!("pause: {e:?}"),
            }
            tokio::task::yield_now().await;
            match run.resume().await {
                Ok(()) => {}
                // A pause that reached the run as its handler had already returned
                // lets that end be recorded (see tests/hunt_d_pause.rs).
                Err(Error::InvalidState { .. }) => break,
                Err(e) => anyhow::bail!("iteration {iter}: resume after a pause: {e:?}"),
            }
        }
        within(LIMIT, "the releaser", releaser).await???;
        let got = within(LIMIT, "the parent's result", run.result()).await??;
        assert_eq!(got, expected(), "iteration {iter}");
        no_result_twice(&run.events().await?, iter);
    }
    host.shutdown().await?;
    Ok(())
}

/// The parent is cancelled while its children end: it ends (cancelled, or
/// completed if every result came first), each child ends, nothing hangs, and no
/// child result is recorded twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_cancelled_while_its_children_end() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path(), Duration::ZERO).await?;
    for iter in 0..15 {
        let parent = format!("c{iter}");
        let run = host.start::<Fan>(&parent, ()).await?;
        kids_waiting(&host, &parent).await?;
        let releaser = {
            let (host, parent) = (host.clone(), parent.clone());
            tokio::spawn(async move {
                // Some kids may be cancelled first: RunFinished is fine then.
                let mut tasks = Vec::new();
                for i in 0..KIDS {
                    let kid = host.handle::<Kid>(&kid_id(&parent, i));
                    tasks.push(tokio::spawn(
                        async move { kid.signal("go", &(), "go").await },
                    ));
                }
                let mut out = Vec::new();
                for t in tasks {
                    out.push(t.await);
                }
                out
            })
        };
        let cancel = within(LIMIT, "the cancel", run.cancel("parent cancelled")).await?;
        assert!(
            matches!(cancel, Ok(()) | Err(Error::RunFinished(_))),
            "iteration {iter}: {cancel:?}"
        );
        for r in within(LIMIT, "the releaser", releaser).await?? {
            let r = r?;
            assert!(
                matches!(r, Ok(()) | Err(Error::RunFinished(_))),
                "iteration {iter}: {r:?}"
            );
        }
        let r = within(LIMIT, "the parent's result", run.result()).await?;
        match &r {
            Ok(v) => assert_eq!(*v, expected()),
            Err(Error::Cancelled(_)) => {}
            other => panic!("iteration {iter}: {other:?}"),
        }
        for i in 0..KIDS {
            let kid = host.handle::<Kid>(&kid_id(&parent, i));
            let k = within(LIMIT, "a kid's end", kid.result()).await?;
            assert!(
                matches!(k, Ok(_) | Err(Error::Cancelled(_))),
                "iteration {iter}: kid {i}: {k:?}"
            );
        }
        no_result_twice(&run.events().await?, iter);
    }
    host.shutdown().await?;
    Ok(())
}

/// The parent panics after its third child result; the supervisor restarts it
/// while the other children end. Every result reaches it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_restarting_after_a_panic_while_children_end() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path(), Duration::from_secs(60)).await?;
    for iter in 0..10 {
        let parent = format!("f{iter}");
        let run = host.start::<Fragile>(&parent, ()).await?;
        kids_waiting(&host, &parent).await?;
        release_all(&host, &parent).await?;
        let got = within(LIMIT, "the parent's result", run.result()).await??;
        assert_eq!(got, expected(), "iteration {iter}");
        assert!(
            PANICKED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&parent),
            "the parent did panic"
        );
        every_result_once(&run.events().await?, iter);
    }
    host.shutdown().await?;
    Ok(())
}
