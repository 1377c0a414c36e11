//! What a run keeps across continue-as-new, seen by those waiting on it:
//!
//! - its deadline (`StartOptions::timeout`): `result()` callers that began in
//!   segment 0 get the cancel the deadline causes in a later segment;
//! - its children's terms: a child started detached (`ctx.start_child`: "the
//!   parent does not cancel it") stays detached when a later segment of the
//!   parent waits on it with `ctx.child` and then continues as new again, and
//!   when a parent that waited on it ends (Temporal fixes a child's parent-close
//!   policy when the child starts).

mod common;

use std::time::{Duration, UNIX_EPOCH};

use common::within;
use reel::{Ctx, Error, Host, RunStatus, StartOptions, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

/// Each segment waits for `go`; continues as new while hops remain, then
/// returns what it gathered.
struct Hopper;
impl Workflow for Hopper {
    const NAME: &'static str = "hopper";
    type Input = (u32, Vec<String>);
    type Output = String;
    async fn run(&self, ctx: Ctx, (hops, mut got): Self::Input) -> reel::Result<String> {
        let go: String = ctx.wait_for_signal("go").await?;
        got.push(go);
        if hops > 0 {
            return ctx.continue_as_new::<Hopper>((hops - 1, got)).await;
        }
        Ok(got.join(","))
    }
}

/// Starts `kid` detached, waits on it (`ctx.child`) against a `done` signal, and
/// returns when the signal wins: its end asks its unfinished children to cancel.
struct Leaver;
impl Workflow for Leaver {
    const NAME: &'static str = "leaver";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, kid: String) -> reel::Result<String> {
        ctx.start_child::<Hopper>(&kid, (0, Vec::new())).await?;
        let call = ctx.child::<Hopper>(&kid, (0, Vec::new()));
        let done = ctx.wait_for_signal::<()>("done");
        tokio::select! {
            biased;
            r = call => Ok(format!("{r:?}")),
            r = done => r.map(|()| "done".to_owned()),
        }
    }
}

/// Segment 0 starts `kid` detached and continues as new. Segment 1 waits on it
/// (`ctx.child`) against a `hop` signal; when the signal wins it continues as
/// new. Segment 2 waits on it and returns what it answered.
struct Starter;
impl Workflow for Starter {
    const NAME: &'static str = "starter";
    type Input = (String, u32);
    type Output = String;
    async fn run(&self, ctx: Ctx, (kid, segment): Self::Input) -> reel::Result<String> {
        match segment {
            0 => {
                ctx.start_child::<Hopper>(&kid, (0, Vec::new())).await?;
                ctx.continue_as_new::<Starter>((kid, 1)).await
            }
            1 => {
                let call = ctx.child::<Hopper>(&kid, (0, Vec::new()));
                let hop = ctx.wait_for_signal::<()>("hop");
                tokio::select! {
                    biased;
                    r = call => return Ok(format!("segment 1: {r:?}")),
                    r = hop => r?,
                }
                ctx.continue_as_new::<Starter>((kid, 2)).await
            }
            _ => Ok(format!(
                "{:?}",
                ctx.child::<Hopper>(&kid, (0, Vec::new())).await
            )),
        }
    }
}

async fn until_segment(host: &Host, id: &str, segment: u32) -> anyhow::Result<()> {
    let run = host.run(id);
    within(
        LIMIT,
        &format!("{id} waiting in segment {segment}"),
        async {
            loop {
                if let Ok(info) = run.info().await
                    && info.segment == segment
                    && matches!(info.status, RunStatus::Suspended { .. })
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_callers_get_the_deadline_cancel_of_a_later_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = reel::testing::TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .register(Hopper)
        .build()
        .await?;
    let run = host
        .start_with::<Hopper>(
            "timed",
            (3, Vec::new()),
            StartOptions::default().timeout(Duration::from_secs(3600)),
        )
        .await?;
    until_segment(&host, "timed", 0).await?;
    let waits: Vec<_> = (0..3)
        .map(|_| {
            let h = run.clone();
            tokio::spawn(async move { h.result().await })
        })
        .collect();
    for k in 0..2 {
        until_segment(&host, "timed", k).await?;
        run.signal("go", &format!("g{k}"), &format!("go-{k}"))
            .await?;
    }
    until_segment(&host, "timed", 2).await?;
    clock.advance(Duration::from_secs(7200));
    for w in waits {
        let got = within(LIMIT, "a result() caller", w).await??;
        assert!(
            matches!(&got, Err(Error::Cancelled(r)) if r.contains("deadline")),
            "{got:?}"
        );
    }
    assert_eq!(run.info().await?.segment, 2);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_child_stays_detached_when_a_later_segment_waits_on_it_and_hops()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Hopper)
        .register(Starter)
        .build()
        .await?;
    let parent = host.start::<Starter>("starter", ("det".into(), 0)).await?;
    until_segment(&host, "starter", 1).await?;
    until_segment(&host, "det", 0).await?;
    // The continue-as-new of segment 0 left the detached child alone.
    parent.signal("hop", &(), "hop-1").await?;
    // Segment 2 waits on the child, unless the hop cancelled the child: then
    // segment 2 gets that cancel and the parent ends.
    within(LIMIT, "the parent in segment 2", async {
        loop {
            if let Ok(info) = parent.info().await
                && info.segment == 2
                && !matches!(info.status, RunStatus::Running)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    let kid = host.handle::<Hopper>("det");
    // A cancel request sent by the hop lands within moments (the child only
    // waits, so it ends at once): watch for one for a second, a negative check.
    let cancelled = tokio::time::timeout(Duration::from_secs(1), async {
        loop {
            if matches!(kid.status().await, Ok(RunStatus::Cancelled)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        cancelled.is_err(),
        "the child started detached was cancelled by a later segment's continue-as-new: \
         its end {:?}; the parent {:?} ended {:?}",
        kid.result().await,
        parent.status().await,
        tokio::time::timeout(Duration::from_millis(100), parent.result()).await,
    );
    kid.signal("go", "a", "go-a").await?;
    assert_eq!(
        within(LIMIT, "the parent", parent.result()).await??,
        "Ok(\"a\")"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_child_stays_detached_when_a_parent_that_waited_on_it_ends() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Hopper)
        .register(Leaver)
        .build()
        .await?;
    let parent = host.start::<Leaver>("leaver", "kid".into()).await?;
    until_segment(&host, "kid", 0).await?;
    within(LIMIT, "the parent waiting", parent.wait_until_suspended()).await??;
    parent.signal("done", &(), "done-1").await?;
    assert_eq!(within(LIMIT, "the parent", parent.result()).await??, "done");
    let kid = host.handle::<Hopper>("kid");
    // A cancel request sent by the parent's end lands within moments (the child
    // only waits, so it ends at once): watch for one for a second, a negative
    // check.
    let cancelled = tokio::time::timeout(Duration::from_secs(1), async {
        loop {
            if matches!(kid.status().await, Ok(RunStatus::Cancelled)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        cancelled.is_err(),
        "the child started detached was cancelled by its parent's end: {:?}",
        kid.result().await
    );
    kid.signal("go", "a", "go-a").await?;
    assert_eq!(within(LIMIT, "the child", kid.result()).await??, "a");
    host.shutdown().await?;
    Ok(())
}
