//! A cancel cascade cut by the host going away, on fjall in a temp dir: shut
//! down or dropped while a tree cleans up, or SIGKILLed after the parent's
//! request is written but before it reached its child. The README: "The request
//! and its grace deadline are in the log and the timer index, so a restart in
//! the middle goes on with the cleanup", and "Children the run waits on are
//! cancelled with it". After the reopen every run ends with its reason, the
//! cleanup of each run ran once, detached subtrees go on, and nothing hangs.
//!
//! To cut the cascade exactly between the parent's request and its delivery, a
//! `FaultStore` refuses every append of the child (nothing of it lands), so the
//! child cannot record the request; the host then shuts down, or the process is
//! SIGKILLed, and the directory is reopened without faults. The parent then
//! ends after the reopen (completing, being cancelled by its handler, or hard
//! when its grace runs out), or had ended before the cut (its end written; the
//! cancel it owed its child lost with the host). Either way the child, which
//! waits on a signal that never comes, must end cancelled in its parent's
//! words ("parent cancelled: R"), not wait for ever.

mod common;
#[path = "cancel_trees/mod.rs"]
mod trees;

use std::path::Path;
use std::time::Duration;

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Error, FjallStore, Host, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};
use trees::{
    CLEANUP, End, LIMIT, Node, OnCancel, attached, cancelled, check_all, check_end, check_waiters,
    clock, describe, detached, ids, leaf, nested, node, releases, requested, spawn_waiters,
    until_in_cleanup, until_up,
};

const GRACE: Duration = Duration::from_secs(60);
const CHILD_ENV: &str = "REEL_CANCEL_KILL_CHILD_DIR";

async fn signal(host: &Host, id: &str, name: &str, v: u32) -> reel::Result<()> {
    host.handle::<Node>(id)
        .signal(name, &v, &format!("{name}-{id}"))
        .await
}

/// Cuts a graceful cascade by shutting the host down (or dropping it) while
/// three levels clean up, then reopens the directory and lets them finish.
async fn cut_mid_cleanup(root: &str, drop_it: bool) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    let a = format!("{root}/a");
    let a1 = format!("{root}/a/1");
    let a2 = format!("{root}/a/2");
    let d = format!("{root}/d");
    let d1 = format!("{root}/d/1");
    let p = OnCancel::Propagate;
    let spec = node(
        CLEANUP,
        vec![
            attached(
                &a,
                node(
                    CLEANUP,
                    vec![attached(&a1, leaf(CLEANUP)), attached(&a2, leaf(p))],
                ),
            ),
            detached(&d, node(p, vec![attached(&d1, leaf(p))])),
        ],
    );
    let all = ids(root, &spec);
    host.start::<Node>(root, spec.clone()).await?;
    until_up(&host, root, &spec).await?;
    let old_waiters = spawn_waiters(&host, &all);

    host.run(root).request_cancel("R").await?;
    for id in [root, a.as_str(), a1.as_str()] {
        until_in_cleanup(&host, id).await?;
    }
    check_end(&host, &a2, &End::Cancelled(nested(2, "R"))).await?;
    if drop_it {
        drop(host);
    } else {
        host.shutdown().await?;
    }
    // The old host's waiters answer: the end of a run that ended, `Shutdown`
    // for the others.
    for (id, w) in old_waiters {
        let out = within(LIMIT, &format!("the old waiter on {id}"), w).await??;
        let ok = if id == a2 {
            matches!(&out, Err(Error::Cancelled(r)) if *r == nested(2, "R"))
        } else {
            matches!(out, Err(Error::Shutdown))
        };
        assert!(ok, "old waiter on {id}: {out:?}");
    }

    let host = within(LIMIT, "the reopen", trees::open(dir.path(), &clock, GRACE)).await??;
    // The cleanup goes on where it was; nothing ended while no host ran.
    for id in [root, a.as_str(), a1.as_str()] {
        until_in_cleanup(&host, id).await?;
    }
    let waiters = spawn_waiters(&host, &all);
    // The root ends first, its children after it.
    for id in [root, a.as_str(), a1.as_str()] {
        signal(&host, id, "cleanup-done", 0).await?;
    }
    signal(&host, &d1, "finish", 1).await?;
    signal(&host, &d, "finish", 2).await?;
    let expected: std::collections::BTreeMap<String, End> = [
        (root.to_owned(), cancelled("R")),
        (a.clone(), End::Cancelled(nested(1, "R"))),
        (a1.clone(), End::Cancelled(nested(2, "R"))),
        (a2.clone(), End::Cancelled(nested(2, "R"))),
        (d.clone(), End::Completed(3)),
        (d1.clone(), End::Completed(1)),
    ]
    .into_iter()
    .collect();
    check_all(&host, waiters, &expected).await?;
    for id in [root, a.as_str(), a1.as_str()] {
        assert_eq!(releases(id), 1, "{id}: its cleanup step ran again");
    }
    for id in [&d, &d1] {
        assert_eq!(requested(&host.run(id).events().await?), None, "{id}");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_shut_down_mid_cleanup_goes_on_with_the_cascade() -> anyhow::Result<()> {
    cut_mid_cleanup("s", false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_dropped_mid_cleanup_goes_on_with_the_cascade() -> anyhow::Result<()> {
    cut_mid_cleanup("sd", true).await
}

/// How the parent ends, its child having missed the request: before the host
/// goes away (its end written, the cancel it then sends its child lost with
/// the host), or after the reopen.
#[derive(Clone, Copy, Debug)]
enum After {
    /// The handler returns the cancellation at once: the parent ends
    /// cancelled before the host goes away.
    EndedCancelledBeforeTheCut,
    /// The handler completes at once: the parent ends completed before the
    /// host goes away.
    CompletedBeforeTheCut,
    /// The handler cleans up; after the reopen it returns the cancellation.
    EndsCancelledAfterCleanup,
    /// The handler cleans up; after the reopen it completes.
    CompletesAfterCleanup,
    /// The handler cleans up for longer than the grace: after the reopen the
    /// grace runs out and the parent is cancelled hard.
    OutlivesItsGrace,
}

impl After {
    fn on_cancel(self) -> OnCancel {
        match self {
            After::EndedCancelledBeforeTheCut => OnCancel::Propagate,
            After::CompletedBeforeTheCut => OnCancel::Complete,
            After::CompletesAfterCleanup => OnCancel::Cleanup {
                then_complete: true,
            },
            After::EndsCancelledAfterCleanup | After::OutlivesItsGrace => CLEANUP,
        }
    }

    fn ended_before_the_cut(self) -> bool {
        matches!(
            self,
            After::EndedCancelledBeforeTheCut | After::CompletedBeforeTheCut
        )
    }

    fn parent_end(self) -> End {
        match self {
            After::CompletesAfterCleanup => End::Completed(2007),
            After::CompletedBeforeTheCut => End::Completed(1000),
            _ => cancelled("R"),
        }
    }

    fn from_name(name: &str) -> After {
        match name {
            "ended-cancelled" => After::EndedCancelledBeforeTheCut,
            "completed" => After::CompletedBeforeTheCut,
            "ends-cancelled" => After::EndsCancelledAfterCleanup,
            "completes" => After::CompletesAfterCleanup,
            _ => After::OutlivesItsGrace,
        }
    }
}

fn tree(root: &str, after: After) -> trees::Spec {
    node(
        after.on_cancel(),
        vec![attached(&format!("{root}/k"), leaf(OnCancel::Propagate))],
    )
}

/// Over a store that refuses every append of the child: starts the tree, asks
/// the parent to cancel, and returns once the parent's request is written, the
/// child has refused to record it, and the parent has ended (or waits in its
/// cleanup). The child is still waiting with no request in its log.
async fn cancel_past_the_child(
    host: &Host,
    faults: &FaultStore,
    root: &str,
    after: After,
) -> anyhow::Result<()> {
    let spec = tree(root, after);
    let kid = format!("{root}/k");
    host.start::<Node>(root, spec.clone()).await?;
    until_up(host, root, &spec).await?;
    faults.inject(Fault::fail(Op::Submit).for_run(&kid).until_healed());
    host.run(root).request_cancel("R").await?;
    within(LIMIT, "the child's refusal", async {
        while faults.injected() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    if after.ended_before_the_cut() {
        check_end(host, root, &after.parent_end()).await?;
    } else {
        until_in_cleanup(host, root).await?;
    }
    let status = host.run(&kid).status().await?;
    let events = host.run(&kid).events().await?;
    anyhow::ensure!(
        matches!(status, RunStatus::Suspended { .. }) && requested(&events).is_none(),
        "the child took the request after all: {}",
        describe(host, &kid).await
    );
    Ok(())
}

/// After the reopen: the parent ends as `after` says and its child, which
/// never recorded the parent's request, is cancelled in its words.
async fn finish_after_reopen(
    dir: &Path,
    clock: &TestClock,
    root: &str,
    after: After,
) -> anyhow::Result<()> {
    let host = within(LIMIT, "the reopen", trees::open(dir, clock, GRACE)).await??;
    let kid = format!("{root}/k");
    let waiters = spawn_waiters(&host, &[root.to_owned(), kid.clone()]);
    match after {
        After::EndedCancelledBeforeTheCut | After::CompletedBeforeTheCut => {}
        After::EndsCancelledAfterCleanup | After::CompletesAfterCleanup => {
            until_in_cleanup(&host, root).await?;
            signal(&host, root, "cleanup-done", 7).await?;
        }
        After::OutlivesItsGrace => {
            until_in_cleanup(&host, root).await?;
            clock.advance(GRACE + Duration::from_secs(1));
        }
    }
    let expected: std::collections::BTreeMap<String, End> = [
        (root.to_owned(), after.parent_end()),
        (kid.clone(), End::Cancelled(nested(1, "R"))),
    ]
    .into_iter()
    .collect();
    check_end(&host, root, &after.parent_end()).await?;
    check_end(&host, &kid, &End::Cancelled(nested(1, "R")))
        .await
        .map_err(|e| e.context(format!("parent ending {after:?}")))?;
    check_waiters(waiters, &expected).await?;
    host.shutdown().await?;
    Ok(())
}

/// The host shuts down between the parent's request and its delivery.
async fn missed_request_then_shutdown(root: &str, after: After) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let host = trees::open_over(faults.clone(), &clock, GRACE).await?;
    cancel_past_the_child(&host, &faults, root, after).await?;
    within(LIMIT, "the shutdown", host.shutdown()).await??;
    drop(faults);
    finish_after_reopen(dir.path(), &clock, root, after).await
}

// The parent ends after the reopen: its end asks the child again.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_missed_the_request_is_cancelled_when_its_parent_completes_after_a_restart()
-> anyhow::Result<()> {
    missed_request_then_shutdown("mc", After::CompletesAfterCleanup).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_missed_the_request_is_cancelled_when_its_parents_grace_runs_out_after_a_restart()
-> anyhow::Result<()> {
    missed_request_then_shutdown("mg", After::OutlivesItsGrace).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_missed_the_request_is_cancelled_when_its_parent_ends_cancelled_after_a_restart()
-> anyhow::Result<()> {
    missed_request_then_shutdown("me", After::EndsCancelledAfterCleanup).await
}

// The parent ended before the host went away: what its end owed the child (the
// cancel, again) went with the host.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_missed_the_request_is_cancelled_when_its_parent_ended_cancelled_before_a_restart()
-> anyhow::Result<()> {
    missed_request_then_shutdown("mp", After::EndedCancelledBeforeTheCut).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_missed_the_request_is_cancelled_when_its_parent_completed_before_a_restart()
-> anyhow::Result<()> {
    missed_request_then_shutdown("mq", After::CompletedBeforeTheCut).await
}

/// The killed process: cuts the cascade as above, says `ready`, and waits to be
/// killed. The directory's last component names how the parent ends.
fn kill_child(dir: &Path) {
    let after = After::from_name(
        &dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    common::kill::runtime().block_on(async {
        let clock = clock();
        let faults = FaultStore::new(FjallStore::open(dir.join("store")).expect("store"));
        let host = trees::open_over(faults.clone(), &clock, GRACE)
            .await
            .expect("open");
        cancel_past_the_child(&host, &faults, "kill", after)
            .await
            .expect("cut the cascade");
        // On a line of its own: the harness's `test ... ` has no newline yet.
        println!("\nready");
        std::io::Write::flush(&mut std::io::stdout()).ok();
        std::future::pending::<()>().await;
    });
}

/// SIGKILLs the process between the parent's request and its delivery to the
/// child, then reopens the directory (the test clock starts where the killed
/// process's did: the grace is measured from the same instant).
fn killed_between_request_and_delivery(test: &str, mode: &str) {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        if Path::new(&dir).file_name().is_some_and(|n| n == mode) {
            kill_child(Path::new(&dir));
        }
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(mode);
    std::fs::create_dir_all(&dir).expect("dir");
    let kills = common::kill::Rounds {
        test,
        env: CHILD_ENV,
        rounds: 1,
        marker: "ready",
        done: "all-done",
        min: 1,
        spread: 1,
    }
    .run(&dir);
    assert_eq!(kills, 1, "the child process was not killed at `ready`");
    let after = After::from_name(mode);
    common::kill::runtime().block_on(async {
        finish_after_reopen(&dir.join("store"), &clock(), "kill", after)
            .await
            .expect("after the kill");
    });
}

#[test]
fn sigkill_before_the_delivery_then_the_parent_completes() {
    killed_between_request_and_delivery(
        "sigkill_before_the_delivery_then_the_parent_completes",
        "completes",
    );
}

#[test]
fn sigkill_before_the_delivery_then_the_parent_ends_cancelled() {
    killed_between_request_and_delivery(
        "sigkill_before_the_delivery_then_the_parent_ends_cancelled",
        "ends-cancelled",
    );
}

#[test]
fn sigkill_before_the_delivery_of_a_parent_that_ended_cancelled() {
    killed_between_request_and_delivery(
        "sigkill_before_the_delivery_of_a_parent_that_ended_cancelled",
        "ended-cancelled",
    );
}
/// Segment 0: waits on its child `<id>/k` (a `Node` leaf, its cancel reaction
/// in the input) and on signal `finish`; when cancelled, waits (shielded) for
/// signal `hop` and continues as new. Segment 1 (the cancel request carried
/// over) returns the cancellation.
struct HopOnCancel;

impl Workflow for HopOnCancel {
    const NAME: &'static str = "cancel-tree-hop-on-cancel";
    type Input = (u32, OnCancel);
    type Output = u32;
    async fn run(&self, ctx: Ctx, (segment, kid_on): (u32, OnCancel)) -> reel::Result<u32> {
        if segment > 0 {
            let reason = ctx.cancelled().await;
            return Err(Error::Cancelled(reason));
        }
        let child = ctx.child::<Node>(&format!("{}/k", ctx.run_id()), leaf(kid_on));
        let finish = ctx.wait_for_signal::<u32>("finish");
        let (c, f) = futures::join!(child, finish);
        if ctx.is_cancelled() {
            let sh = ctx.shielded();
            sh.wait_for_signal::<u32>("hop").await?;
            return sh.continue_as_new::<HopOnCancel>((1, kid_on)).await;
        }
        Ok(c? + f?)
    }
}

async fn open_hopper(
    store: std::sync::Arc<dyn reel::Store>,
    clock: &TestClock,
) -> reel::Result<Host> {
    Host::builder()
        .store(store)
        .clock(clock.clone())
        .cancel_grace(GRACE)
        .register(Node)
        .register(HopOnCancel)
        .build()
        .await
}

async fn until_waits_on_hop(host: &Host, id: &str) -> anyhow::Result<()> {
    trees::until_status(
        host,
        id,
        "waiting on `hop`",
        |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains("`hop`")),
    )
    .await?;
    Ok(())
}

/// Control: a parent asked to cancel that continues as new in its cleanup
/// (its children are asked to cancel again, "parent continued as new"): its
/// child, which took the request, keeps the request's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_keeps_its_parents_cancel_when_the_parent_continues_as_new() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let host = open_hopper(FjallStore::open(dir.path())?, &clock).await?;
    let parent = host.start::<HopOnCancel>("hk", (0, CLEANUP)).await?;
    until_up(&host, "hk/k", &leaf(CLEANUP)).await?;
    parent.wait_until_suspended().await?;
    parent.request_cancel("R").await?;
    until_in_cleanup(&host, "hk/k").await?;
    until_waits_on_hop(&host, "hk").await?;
    parent.signal("hop", &0u32, "hop").await?;
    let out = within(LIMIT, "the parent", parent.result()).await?;
    assert_eq!(out, Err(Error::Cancelled("R".into())));
    until_in_cleanup(&host, "hk/k").await?;
    signal(&host, "hk/k", "cleanup-done", 0).await?;
    check_end(&host, "hk/k", &End::Cancelled(nested(1, "R"))).await?;
    host.shutdown().await?;
    Ok(())
}

/// The child missed its parent's request (the host went away between the
/// request's write and its delivery). After the reopen the parent, cleaning
/// up, continues as new and then ends cancelled: the child is asked to cancel
/// by the hop. As for a parent that completes or fails after its request
/// (`finish`, "asks them again with the words of its first request"), the
/// child ends with its parent's cancel, not with "parent continued as new".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_missed_the_request_gets_it_when_its_parent_continues_as_new()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let host = open_hopper(faults.clone(), &clock).await?;
    let parent = host
        .start::<HopOnCancel>("hm", (0, OnCancel::Propagate))
        .await?;
    until_up(&host, "hm/k", &leaf(OnCancel::Propagate)).await?;
    parent.wait_until_suspended().await?;
    faults.inject(Fault::fail(Op::Submit).for_run("hm/k").until_healed());
    parent.request_cancel("R").await?;
    within(LIMIT, "the child's refusal", async {
        while faults.injected() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    until_waits_on_hop(&host, "hm").await?;
    assert_eq!(requested(&host.run("hm/k").events().await?), None);
    within(LIMIT, "the shutdown", host.shutdown()).await??;
    drop(faults);

    let host = open_hopper(FjallStore::open(dir.path())?, &clock).await?;
    let parent = host.handle::<HopOnCancel>("hm");
    until_waits_on_hop(&host, "hm").await?;
    parent.signal("hop", &0u32, "hop").await?;
    let out = within(LIMIT, "the parent", parent.result()).await?;
    assert_eq!(out, Err(Error::Cancelled("R".into())));
    check_end(&host, "hm/k", &End::Cancelled(nested(1, "R"))).await?;
    host.shutdown().await?;
    Ok(())
}
