//! Edge cases of names and ids a user can pick freely: step names that look like
//! reel's own generated ids or host timer ids.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, within};
use reel::testing::TestClock;
use reel::{Ctx, Host, RetryPolicy, Workflow};

const LIMIT: Duration = Duration::from_secs(3);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A step whose first attempt fails, retried after a one-second backoff.
struct Retried {
    name: &'static str,
    attempts: Counter,
}
impl Workflow for Retried {
    const NAME: &'static str = "retried";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = RetryPolicy::default()
            .with_max_attempts(3)
            .with_backoff(Duration::from_secs(1), Duration::from_secs(1));
        ctx.step_with(self.name, policy, |s| async move {
            self.attempts.bump();
            if s.attempt() == 1 {
                Err("first attempt fails".to_owned())
            } else {
                Ok(s.attempt())
            }
        })
        .await
    }
}

async fn retried_step_named(name: &'static str) -> anyhow::Result<u32> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let host = Host::builder()
        .path(dir.path())
        .clock(TestClock::auto(t0()))
        .register(Retried {
            name,
            attempts: attempts.clone(),
        })
        .build()
        .await?;
    let run = host.start::<Retried>("r", ()).await?;
    let out = within(LIMIT, &format!("step `{name}` to be retried"), run.result()).await;
    let kinds: Vec<&str> = run.events().await?.iter().map(|e| e.kind()).collect();
    host.shutdown().await?;
    let out = out.map_err(|e| anyhow::anyhow!("{e}; log: {kinds:?}"))??;
    assert_eq!(attempts.get(), 2);
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_step_with_an_ordinary_name_completes() -> anyhow::Result<()> {
    assert_eq!(retried_step_named("sync").await?, 2);
    assert_eq!(retried_step_named("timer#1").await?, 2);
    assert_eq!(retried_step_named("a/retry1").await?, 2);
    Ok(())
}

/// A step whose name begins with `@` is retried like any other: its backoff
/// timer's id (`@sync/retry1`) is not one of the host's deadlines. (It used to be
/// taken for one, by its `@`, and dropped as "unknown host timer": the run waited
/// for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_step_whose_name_starts_with_at_completes() -> anyhow::Result<()> {
    assert_eq!(retried_step_named("@sync").await?, 2);
    Ok(())
}

/// Sends a signal to itself from its handler, then waits for it.
struct SelfTalk;
impl Workflow for SelfTalk {
    const NAME: &'static str = "self-talk";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let me = ctx.run_id().to_owned();
        ctx.signal(&me, "note", "to myself", "n-1").await?;
        ctx.wait_for_signal("note").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_can_signal_itself() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), SelfTalk).await?;
    let run = host.start::<SelfTalk>("me", ()).await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, "to myself");
    host.shutdown().await?;
    Ok(())
}

/// Calls a child with an id no run can have.
struct BadChildId;
impl Workflow for BadChildId {
    const NAME: &'static str = "bad-child-id";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, id: String) -> reel::Result<String> {
        match ctx.child::<SelfTalk>(&id, ()).await {
            Ok(v) => Ok(format!("ok {v}")),
            Err(e) => Ok(format!("err {e}")),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_with_an_impossible_id_is_an_error_not_a_hang() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), SelfTalk, BadChildId).await?;
    for (i, id) in ["".to_owned(), "nul\0inside".to_owned(), "x".repeat(600)]
        .into_iter()
        .enumerate()
    {
        let run = host
            .start::<BadChildId>(&format!("p-{i}"), id.clone())
            .await?;
        let out = within(LIMIT, &format!("parent of child id {id:?}"), run.result())
            .await
            .map_err(|e| anyhow::anyhow!("{e} (child id of {} bytes)", id.len()))??;
        assert!(out.starts_with("err "), "{out}");
    }
    host.shutdown().await?;
    Ok(())
}
