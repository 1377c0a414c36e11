//! Changing a workflow's code under runs in flight with `ctx.patched`, through the
//! public API across host restarts: a run started by the old code and waiting when
//! the new code is deployed takes the old branch; a run started by the new code
//! takes the new branch, records one marker, and keeps taking it after another
//! restart without running its new step again; the cleanup code
//! (`ctx.deprecate_patch`) and then code with the call removed resume both kinds of
//! run; an empty patch id parks the run.

mod common;

use std::collections::HashMap;
use std::sync::Mutex;

use reel::{Ctx, Event, RunStatus, Workflow};

/// Emails sent, by run id (the tests run in parallel and use distinct run ids).
static EMAILS: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);

fn emails(run_id: &str) -> u32 {
    let emails = EMAILS.lock().unwrap_or_else(|p| p.into_inner());
    emails
        .as_ref()
        .and_then(|m| m.get(run_id))
        .copied()
        .unwrap_or(0)
}

async fn email(ctx: &Ctx) -> reel::Result<String> {
    let run_id = ctx.run_id().to_owned();
    ctx.step("email", |_| {
        let run_id = run_id.clone();
        async move {
            let mut emails = EMAILS.lock().unwrap_or_else(|p| p.into_inner());
            *emails.get_or_insert_default().entry(run_id).or_default() += 1;
            Ok::<_, String>("receipt".to_owned())
        }
    })
    .await
}

/// The code first deployed: charge, wait for `ship`, answer.
struct V1;
impl Workflow for V1 {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        ctx.step("charge", |_| async move { Ok::<_, String>(cents) })
            .await?;
        let to: String = ctx.wait_for_signal("ship").await?;
        Ok(format!("{cents} to {to}, no receipt"))
    }
}

/// The same workflow (name and version) with a receipt email patched in.
struct V2;
impl Workflow for V2 {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        ctx.step("charge", |_| async move { Ok::<_, String>(cents) })
            .await?;
        let receipt = if ctx.patched("receipt-email") {
            email(&ctx).await?
        } else {
            "no receipt".to_owned()
        };
        // Asked again: the first answer, nothing recorded.
        if ctx.patched("receipt-email") != (receipt != "no receipt") {
            return Err(reel::Error::failed("the second answer differs"));
        }
        let to: String = ctx.wait_for_signal("ship").await?;
        Ok(format!("{cents} to {to}, {receipt}"))
    }
}

/// Cleanup, once every run from before the patch has finished.
struct V3;
impl Workflow for V3 {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        ctx.step("charge", |_| async move { Ok::<_, String>(cents) })
            .await?;
        ctx.deprecate_patch("receipt-email");
        let receipt = email(&ctx).await?;
        let to: String = ctx.wait_for_signal("ship").await?;
        Ok(format!("{cents} to {to}, {receipt}"))
    }
}

/// The deprecated call removed.
struct V4;
impl Workflow for V4 {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        ctx.step("charge", |_| async move { Ok::<_, String>(cents) })
            .await?;
        let receipt = email(&ctx).await?;
        let to: String = ctx.wait_for_signal("ship").await?;
        Ok(format!("{cents} to {to}, {receipt}"))
    }
}

fn markers(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Patched { id } if id == "receipt-email"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_runs_take_the_old_branch_and_new_runs_the_new_one() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;

    // Version 1 deployed; a run waits for its signal.
    let h = common::hosts::open(dir.path(), V1).await?;
    h.start::<V1>("old", 100)
        .await?
        .wait_until_suspended()
        .await?;
    h.shutdown().await?;

    // Redeployed with the patch: a new run takes the new branch.
    let h = common::hosts::open(dir.path(), V2).await?;
    let new = h.start::<V2>("new", 200).await?;
    new.wait_until_suspended().await?;
    assert_eq!(markers(&new.events().await?), 1);
    assert_eq!(emails("new"), 1);
    // The old run, woken, replays: the log has its signal wait where the patch
    // is asked, so it takes the old branch and records no marker.
    let old = h.handle::<V2>("old");
    old.signal("ship", &"Lyon", "ship-old").await?;
    assert_eq!(old.result().await?, "100 to Lyon, no receipt");
    assert_eq!((markers(&old.events().await?), emails("old")), (0, 0));
    h.shutdown().await?;

    // Another restart: the new run replays its marker, takes the new branch
    // again, and its email is not sent twice.
    let h = common::hosts::open(dir.path(), V2).await?;
    let new = h.handle::<V2>("new");
    new.signal("ship", &"Nice", "ship-new").await?;
    assert_eq!(new.result().await?, "200 to Nice, receipt");
    assert_eq!(markers(&new.events().await?), 1);
    assert_eq!(emails("new"), 1);
    h.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprecated_then_removed_patches_resume_runs_with_and_without_marker() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let h = common::hosts::open(dir.path(), V2).await?;
    h.start::<V2>("patched", 1)
        .await?
        .wait_until_suspended()
        .await?;
    h.shutdown().await?;

    // Cleanup code: the patched run replays (its marker consumed), a run started
    // now records no marker.
    let h = common::hosts::open(dir.path(), V3).await?;
    let clean = h.start::<V3>("clean", 2).await?;
    clean.wait_until_suspended().await?;
    assert_eq!(markers(&clean.events().await?), 0);
    h.shutdown().await?;

    // The call removed: both runs resume and finish.
    let h = common::hosts::open(dir.path(), V4).await?;
    for (id, to) in [("patched", "1 to A, receipt"), ("clean", "2 to A, receipt")] {
        let run = h.handle::<V4>(id);
        run.signal("ship", &"A", "ship-1").await?;
        assert_eq!(run.result().await?, to, "run {id}");
    }
    assert_eq!(markers(&h.handle::<V4>("patched").events().await?), 1);
    assert_eq!((emails("patched"), emails("clean")), (1, 1));
    h.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_patch_id_parks_the_run() -> anyhow::Result<()> {
    struct Empty;
    impl Workflow for Empty {
        const NAME: &'static str = "empty-patch";
        type Input = ();
        type Output = bool;
        async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<bool> {
            Ok(ctx.patched(""))
        }
    }
    let dir = tempfile::tempdir()?;
    let h = common::hosts::open(dir.path(), Empty).await?;
    let run = h.start::<Empty>("e", ()).await?;
    match run.result().await {
        Err(reel::Error::Failed(m)) => assert!(m.contains("empty patch id"), "{m}"),
        other => panic!("expected the run to be parked, got {other:?}"),
    }
    assert!(matches!(run.status().await?, RunStatus::Parked { .. }));
    assert_eq!(run.events().await?.len(), 1, "nothing recorded");
    h.shutdown().await?;
    Ok(())
}
