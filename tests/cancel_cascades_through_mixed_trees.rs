//! Cancels of trees three levels deep, with children waited for (`ctx.child`)
//! and detached (`ctx.start_child`), whose handlers react to the request in every
//! way the README allows: returning the cancellation, completing anyway, failing
//! in their cleanup, cleaning up through `ctx.shielded()`, starting one more child
//! while cleaning up. Each run ends as the README says, with the reason it says:
//!
//! - a run whose handler ends with any error after the request is `Cancelled`
//!   with its own (first) request's reason; one that returns a value completes;
//! - a child the run waits on is asked to cancel with `parent cancelled: <the
//!   parent's reason>`, whichever way the parent then ends, and a run already
//!   cancelling keeps its first request's reason;
//! - detached children, and what they started, are never cancelled by their
//!   parent, also when the parent later waits on them;
//! - `result()` callers on every run get the final outcome.
//!
//! The clock only moves by hand: no grace runs out unless a test says so.

mod common;
#[path = "cancel_trees/mod.rs"]
mod trees;

use std::collections::BTreeMap;
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};
use trees::{
    CLEANUP, End, LIMIT, Node, OnCancel, attached, cancelled, check_all, check_end, check_waiters,
    clock, describe, detached, ids, leaf, nested, node, rejoined, releases, requested,
    spawn_waiters, until_in_cleanup, until_status, until_up,
};

const GRACE: Duration = Duration::from_secs(3600);

async fn host(dir: &tempfile::TempDir) -> reel::Result<Host> {
    trees::open(dir.path(), &clock(), GRACE).await
}

async fn signal(host: &Host, id: &str, name: &str, v: u32) -> reel::Result<()> {
    host.handle::<Node>(id)
        .signal(name, &v, &format!("{name}-{id}"))
        .await
}

/// Run `id` has not ended and its log holds no cancel request.
async fn untouched(host: &Host, id: &str) -> anyhow::Result<()> {
    let run = host.run(id);
    let status = run.status().await?;
    let events = run.events().await?;
    anyhow::ensure!(
        matches!(status, RunStatus::Suspended { .. } | RunStatus::Running)
            && requested(&events).is_none(),
        "{id} was touched by its parent's cancel: {}",
        describe(host, id).await
    );
    Ok(())
}

fn ends(list: &[(&str, End)]) -> BTreeMap<String, End> {
    list.iter()
        .map(|(id, e)| ((*id).to_owned(), e.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_cancel_of_a_mixed_tree_ends_every_run_by_its_handler() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    let p = OnCancel::Propagate;
    let spec = node(
        p,
        vec![
            attached(
                "g/a",
                node(
                    CLEANUP,
                    vec![
                        attached("g/a/1", leaf(p)),
                        detached("g/a/2", node(p, vec![attached("g/a/2/x", leaf(p))])),
                    ],
                ),
            ),
            attached(
                "g/b",
                node(OnCancel::Complete, vec![attached("g/b/1", leaf(CLEANUP))]),
            ),
            attached(
                "g/c",
                node(
                    OnCancel::Fail,
                    vec![attached("g/c/1", leaf(OnCancel::Complete))],
                ),
            ),
            detached("g/d", node(p, vec![attached("g/d/1", leaf(p))])),
        ],
    );
    let all = ids("g", &spec);
    host.start::<Node>("g", spec.clone()).await?;
    until_up(&host, "g", &spec).await?;
    let waiters = spawn_waiters(&host, &all);

    // `cancel` returns once the root has ended: its handler returns the
    // cancellation at once, without waiting for its children's cleanup.
    within(LIMIT, "the root's cancel", host.run("g").cancel("R")).await??;
    until_in_cleanup(&host, "g/a").await?;
    until_in_cleanup(&host, "g/b/1").await?;
    // The detached subtrees go on, untouched.
    for id in ["g/a/2", "g/a/2/x", "g/d", "g/d/1"] {
        untouched(&host, id).await?;
    }
    signal(&host, "g/a", "cleanup-done", 0).await?;
    signal(&host, "g/b/1", "cleanup-done", 0).await?;
    for (id, v) in [("g/a/2/x", 7), ("g/a/2", 5), ("g/d/1", 4), ("g/d", 3)] {
        signal(&host, id, "finish", v).await?;
    }

    let expected = ends(&[
        ("g", cancelled("R")),
        ("g/a", End::Cancelled(nested(1, "R"))),
        ("g/a/1", End::Cancelled(nested(2, "R"))),
        ("g/a/2", End::Completed(12)),
        ("g/a/2/x", End::Completed(7)),
        // Completes anyway; its cleaning child keeps its parent's cancel.
        ("g/b", End::Completed(1000)),
        ("g/b/1", End::Cancelled(nested(2, "R"))),
        // A failed cleanup still ends the run cancelled.
        ("g/c", End::Cancelled(nested(1, "R"))),
        ("g/c/1", End::Completed(1000)),
        ("g/d", End::Completed(7)),
        ("g/d/1", End::Completed(4)),
    ]);
    check_all(&host, waiters, &expected).await?;
    // Each cancelled or cancel-completed run heard the request in its parent's
    // words; the detached subtrees heard none.
    for (id, want) in [
        ("g/b", Some(nested(1, "R"))),
        ("g/c/1", Some(nested(2, "R"))),
        ("g/a/2", None),
        ("g/d/1", None),
    ] {
        let got = requested(&host.run(id).events().await?);
        assert_eq!(got, want, "{id}");
    }
    assert_eq!((releases("g/a"), releases("g/b/1")), (1, 1));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_ends_every_attached_run_without_cleanup_and_spares_detached()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    let spec = node(
        CLEANUP,
        vec![
            attached("t/a", node(CLEANUP, vec![attached("t/a/1", leaf(CLEANUP))])),
            detached("t/d", node(CLEANUP, vec![attached("t/d/1", leaf(CLEANUP))])),
        ],
    );
    let all = ids("t", &spec);
    host.start::<Node>("t", spec.clone()).await?;
    until_up(&host, "t", &spec).await?;
    let waiters = spawn_waiters(&host, &all);

    within(LIMIT, "terminate", host.run("t").terminate("T")).await??;
    let expected = ends(&[
        ("t", cancelled("T")),
        ("t/a", End::Cancelled(nested(1, "T"))),
        ("t/a/1", End::Cancelled(nested(2, "T"))),
    ]);
    for (id, end) in &expected {
        check_end(&host, id, end).await?;
    }
    for id in ["t/d", "t/d/1"] {
        untouched(&host, id).await?;
    }
    signal(&host, "t/d/1", "finish", 1).await?;
    signal(&host, "t/d", "finish", 2).await?;
    let mut expected = expected;
    expected.insert("t/d".into(), End::Completed(3));
    expected.insert("t/d/1".into(), End::Completed(1));
    check_end(&host, "t/d", &End::Completed(3)).await?;
    check_waiters(waiters, &expected).await?;
    // A hard cancel runs no cleanup.
    for id in ["t", "t/a", "t/a/1"] {
        assert_eq!(releases(id), 0, "{id} cleaned up after a terminate");
        let events = host.run(id).events().await?;
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, Event::StepStarted { id, .. } if id == "release")),
            "{id}: {events:?}"
        );
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_during_a_graceful_cascade_ends_every_cleaning_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    let spec = node(
        CLEANUP,
        vec![attached(
            "x/a",
            node(CLEANUP, vec![attached("x/a/1", leaf(CLEANUP))]),
        )],
    );
    let all = ids("x", &spec);
    host.start::<Node>("x", spec.clone()).await?;
    until_up(&host, "x", &spec).await?;
    let waiters = spawn_waiters(&host, &all);

    host.run("x").request_cancel("R").await?;
    for id in &all {
        until_in_cleanup(&host, id).await?;
    }
    within(LIMIT, "terminate", host.run("x").terminate("T")).await??;
    // Which words a run terminated in the middle of its graceful cancel ends
    // with is not pinned down here (the graceful request's or the terminate's);
    // each run ends cancelled, with one of its parent's two, and nothing hangs.
    for (depth, id) in all.iter().enumerate() {
        let out = within(LIMIT, id, host.handle::<Node>(id).result()).await?;
        let (r, t) = (nested(depth, "R"), nested(depth, "T"));
        assert!(
            matches!(&out, Err(Error::Cancelled(got)) if *got == r || *got == t),
            "{id}: {out:?}; {}",
            describe(&host, id).await
        );
        assert_eq!(host.run(id).status().await?, RunStatus::Cancelled);
        assert_eq!(releases(id), 1, "{id}");
    }
    for (id, w) in waiters {
        let out = within(LIMIT, &id, w).await??;
        assert!(matches!(out, Err(Error::Cancelled(_))), "{id}: {out:?}");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_already_cancelling_keeps_its_reason_when_its_parent_is_cancelled()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    // The parent returns the cancellation, or completes anyway (and then asks
    // its unfinished child again).
    for (root, on, root_end) in [
        ("o", OnCancel::Propagate, cancelled("R")),
        ("o2", OnCancel::Complete, End::Completed(1000)),
    ] {
        let k = format!("{root}/k");
        let k1 = format!("{root}/k/1");
        let spec = node(
            on,
            vec![attached(
                &k,
                node(CLEANUP, vec![attached(&k1, leaf(OnCancel::Propagate))]),
            )],
        );
        host.start::<Node>(root, spec.clone()).await?;
        until_up(&host, root, &spec).await?;
        let waiters = spawn_waiters(&host, &ids(root, &spec));

        // The child is cancelled first, for a reason of its own.
        host.run(&k).request_cancel("own").await?;
        until_in_cleanup(&host, &k).await?;
        check_end(&host, &k1, &End::Cancelled(nested(1, "own"))).await?;
        // The parent still waits on it.
        until_status(&host, root, "waiting", |s| {
            matches!(s, RunStatus::Suspended { .. })
        })
        .await?;
        within(LIMIT, "the parent's cancel", host.run(root).cancel("R")).await??;
        check_end(&host, root, &root_end).await?;
        signal(&host, &k, "cleanup-done", 0).await?;
        let expected = ends(&[
            (root, root_end.clone()),
            (&k, cancelled("own")),
            (&k1, End::Cancelled(nested(1, "own"))),
        ]);
        check_all(&host, waiters, &expected).await?;
        let events = host.run(&k).events().await?;
        let requests = events
            .iter()
            .filter(|e| matches!(e, Event::CancelRequested { .. }))
            .count();
        assert_eq!(requests, 1, "{k}: {events:?}");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_cancelled_directly_while_its_parent_cancels_ends_with_the_first_reason()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;

    // The parent's request first: the child's own cancel changes nothing.
    let spec = node(
        OnCancel::Propagate,
        vec![attached(
            "v/k",
            node(CLEANUP, vec![attached("v/k/1", leaf(OnCancel::Propagate))]),
        )],
    );
    host.start::<Node>("v", spec.clone()).await?;
    until_up(&host, "v", &spec).await?;
    within(LIMIT, "the parent's cancel", host.run("v").cancel("R")).await??;
    until_in_cleanup(&host, "v/k").await?;
    host.run("v/k").request_cancel("own").await?;
    signal(&host, "v/k", "cleanup-done", 0).await?;
    check_end(&host, "v", &cancelled("R")).await?;
    check_end(&host, "v/k", &End::Cancelled(nested(1, "R"))).await?;
    check_end(&host, "v/k/1", &End::Cancelled(nested(2, "R"))).await?;

    // Both at once: the child ends with whichever request it took first, the
    // one its log records, and its own child with that one in its words.
    for i in 0..8 {
        let root = format!("w{i}");
        let k = format!("{root}/k");
        let k1 = format!("{root}/k/1");
        let spec = node(
            OnCancel::Propagate,
            vec![attached(
                &k,
                node(
                    OnCancel::Propagate,
                    vec![attached(&k1, leaf(OnCancel::Propagate))],
                ),
            )],
        );
        host.start::<Node>(&root, spec.clone()).await?;
        until_up(&host, &root, &spec).await?;
        let waiters = spawn_waiters(&host, &ids(&root, &spec));
        let (a, b) = (host.run(&root), host.run(&k));
        let (pa, pb) = within(LIMIT, "both cancels", async {
            tokio::join!(a.cancel("R"), b.cancel("own"))
        })
        .await?;
        pa?;
        assert!(
            matches!(pb, Ok(()) | Err(Error::RunFinished(_))),
            "{k}: {pb:?}"
        );
        check_end(&host, &root, &cancelled("R")).await?;
        let first = requested(&host.run(&k).events().await?)
            .ok_or_else(|| anyhow::anyhow!("{k} has no cancel request"))?;
        assert!(first == "own" || first == nested(1, "R"), "{k}: {first}");
        check_end(&host, &k, &End::Cancelled(first.clone())).await?;
        check_end(&host, &k1, &End::Cancelled(nested(1, &first))).await?;
        let expected = ends(&[
            (&root, cancelled("R")),
            (&k, End::Cancelled(first.clone())),
            (&k1, End::Cancelled(nested(1, &first))),
        ]);
        check_waiters(waiters, &expected).await?;
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_child_the_parent_waits_on_is_not_cancelled_with_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    // Graceful (the parent returns the cancellation, or completes anyway and
    // asks its unfinished children again), or hard.
    for (root, on, hard, root_end) in [
        ("j", OnCancel::Propagate, false, cancelled("R")),
        ("jc", OnCancel::Complete, false, End::Completed(1000)),
        ("jh", OnCancel::Propagate, true, cancelled("R")),
    ] {
        let d = format!("{root}/d");
        let d1 = format!("{root}/d/1");
        let spec = node(
            on,
            vec![rejoined(
                &d,
                node(
                    OnCancel::Propagate,
                    vec![attached(&d1, leaf(OnCancel::Propagate))],
                ),
            )],
        );
        host.start::<Node>(root, spec.clone()).await?;
        until_up(&host, root, &spec).await?;
        let waiters = spawn_waiters(&host, &ids(root, &spec));
        if hard {
            within(LIMIT, "terminate", host.run(root).terminate("R")).await??;
        } else {
            within(LIMIT, "cancel", host.run(root).cancel("R")).await??;
        }
        check_end(&host, root, &root_end).await?;
        untouched(&host, &d).await?;
        untouched(&host, &d1).await?;
        signal(&host, &d1, "finish", 1).await?;
        signal(&host, &d, "finish", 2).await?;
        let expected = ends(&[
            (root, root_end.clone()),
            (&d, End::Completed(3)),
            (&d1, End::Completed(1)),
        ]);
        check_all(&host, waiters, &expected).await?;
    }
    host.shutdown().await?;
    Ok(())
}

/// A parent that, cleaning up after its cancel, starts one more child it waits
/// on and then stops waiting for it (the wait loses a `select!`): the README
/// says a child that has not ended when its parent completes, fails, is
/// cancelled or continues as new is asked to cancel, also one the parent
/// stopped waiting for.
async fn a_child_started_in_cleanup(root: &str, then_complete: bool) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    let k = format!("{root}/k");
    let late = format!("{root}/late");
    let spec = node(
        OnCancel::StartLate { then_complete },
        vec![attached(&k, leaf(OnCancel::Propagate))],
    );
    host.start::<Node>(root, spec.clone()).await?;
    until_up(&host, root, &spec).await?;
    // Buffered: the cleanup's `select!` takes it at once.
    signal(&host, root, "give-up", 0).await?;
    let mut all = ids(root, &spec);
    all.push(late.clone());
    within(LIMIT, "the cancel", host.run(root).cancel("R")).await??;
    let root_end = if then_complete {
        End::Completed(3000)
    } else {
        cancelled("R")
    };
    let expected = ends(&[
        (root, root_end),
        (&k, End::Cancelled(nested(1, "R"))),
        (&late, End::Cancelled(nested(1, "R"))),
    ]);
    for (id, end) in &expected {
        check_end(&host, id, end).await?;
    }
    let waiters = spawn_waiters(&host, &all);
    check_waiters(waiters, &expected).await?;
    // The detached child it started in its cleanup goes on.
    let kept = format!("{root}/late-detached");
    untouched(&host, &kept).await?;
    signal(&host, &kept, "finish", 9).await?;
    check_end(&host, &kept, &End::Completed(9)).await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_started_in_cleanup_is_cancelled_when_the_parent_completes() -> anyhow::Result<()> {
    a_child_started_in_cleanup("lc", true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_started_in_cleanup_is_cancelled_when_the_parent_ends_cancelled()
-> anyhow::Result<()> {
    a_child_started_in_cleanup("l", false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_child_is_cancelled_at_once_with_its_subtree() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    let spec = node(
        OnCancel::Propagate,
        vec![attached(
            "pz/k",
            node(CLEANUP, vec![attached("pz/k/1", leaf(CLEANUP))]),
        )],
    );
    host.start::<Node>("pz", spec.clone()).await?;
    until_up(&host, "pz", &spec).await?;
    let waiters = spawn_waiters(&host, &ids("pz", &spec));
    host.run("pz/k").pause().await?;
    assert_eq!(host.run("pz/k").status().await?, RunStatus::Paused);
    within(LIMIT, "the cancel", host.run("pz").cancel("R")).await??;
    // A paused run cannot clean up: it ends at once, and cancels its own
    // children hard.
    let expected = ends(&[
        ("pz", cancelled("R")),
        ("pz/k", End::Cancelled(nested(1, "R"))),
        ("pz/k/1", End::Cancelled(nested(2, "R"))),
    ]);
    check_all(&host, waiters, &expected).await?;
    assert_eq!((releases("pz/k"), releases("pz/k/1")), (0, 0));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_spares_a_run_the_parent_only_attached_to() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    // `ext` is started by the service; the root's `ctx.child` on it only waits.
    host.start::<Node>("ext", leaf(CLEANUP)).await?;
    let spec = node(
        CLEANUP,
        vec![
            attached("ext", leaf(CLEANUP)),
            attached("te/k", leaf(CLEANUP)),
        ],
    );
    host.start::<Node>("te", spec.clone()).await?;
    until_up(&host, "te", &spec).await?;
    let waiters = spawn_waiters(&host, &ids("te", &spec));
    within(LIMIT, "terminate", host.run("te").terminate("T")).await??;
    check_end(&host, "te", &cancelled("T")).await?;
    check_end(&host, "te/k", &End::Cancelled(nested(1, "T"))).await?;
    untouched(&host, "ext").await?;
    signal(&host, "ext", "finish", 4).await?;
    let expected = ends(&[
        ("te", cancelled("T")),
        ("te/k", End::Cancelled(nested(1, "T"))),
        ("ext", End::Completed(4)),
    ]);
    check_end(&host, "ext", &End::Completed(4)).await?;
    check_waiters(waiters, &expected).await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_tree_of_passivated_runs_is_cancelled_whole() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .clock(clock())
        .cancel_grace(GRACE)
        .passivate_after(Duration::from_millis(1))
        .register(Node)
        .build()
        .await?;
    let p = OnCancel::Propagate;
    let mut kids = Vec::new();
    let mut expected = BTreeMap::new();
    let mut cleaning = Vec::new();
    let mut detached_ids = Vec::new();
    expected.insert("wd".to_owned(), cancelled("R"));
    for i in 0..12 {
        let k = format!("wd/{i}");
        let on = if i % 3 == 0 { CLEANUP } else { p };
        let on1 = if i % 4 == 0 { CLEANUP } else { p };
        let (k0, k1, kd) = (format!("{k}/0"), format!("{k}/1"), format!("{k}/d"));
        kids.push(attached(
            &k,
            node(
                on,
                vec![
                    attached(&k0, leaf(p)),
                    attached(&k1, leaf(on1)),
                    detached(&kd, leaf(p)),
                ],
            ),
        ));
        expected.insert(k.clone(), End::Cancelled(nested(1, "R")));
        expected.insert(k0, End::Cancelled(nested(2, "R")));
        expected.insert(k1.clone(), End::Cancelled(nested(2, "R")));
        expected.insert(kd.clone(), End::Completed(i));
        if i % 3 == 0 {
            cleaning.push(k);
        }
        if i % 4 == 0 {
            cleaning.push(k1);
        }
        detached_ids.push(kd);
    }
    let spec = node(p, kids);
    host.start::<Node>("wd", spec.clone()).await?;
    until_up(&host, "wd", &spec).await?;
    within(LIMIT, "every run passivated", async {
        while host.live_runs().await > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    let waiters = spawn_waiters(&host, &ids("wd", &spec));
    within(LIMIT, "the cancel", host.run("wd").cancel("R")).await??;
    for id in &cleaning {
        until_in_cleanup(&host, id).await?;
    }
    for id in &detached_ids {
        untouched(&host, id).await?;
    }
    for id in &cleaning {
        signal(&host, id, "cleanup-done", 0).await?;
    }
    for (i, id) in detached_ids.iter().enumerate() {
        signal(&host, id, "finish", i as u32).await?;
    }
    check_all(&host, waiters, &expected).await?;
    for id in &cleaning {
        assert_eq!(releases(id), 1, "{id}");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_ending_as_its_parent_is_cancelled_ends_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    for i in 0..10 {
        let root = format!("re{i}");
        let k = format!("{root}/k");
        let spec = node(
            OnCancel::Propagate,
            vec![attached(&k, leaf(OnCancel::Propagate))],
        );
        host.start::<Node>(&root, spec.clone()).await?;
        until_up(&host, &root, &spec).await?;
        let waiters = spawn_waiters(&host, &ids(&root, &spec));
        let kid = host.handle::<Node>(&k);
        let parent = host.run(&root);
        let (sent, cancel) = within(LIMIT, "signal and cancel", async {
            tokio::join!(kid.signal("finish", &5u32, "f"), parent.cancel("R"))
        })
        .await?;
        cancel?;
        assert!(
            matches!(sent, Ok(()) | Err(Error::RunFinished(_))),
            "{k}: {sent:?}"
        );
        check_end(&host, &root, &cancelled("R")).await?;
        // Either the signal won (a value completes it, also after a request) or
        // the parent's cancel did; never both, never neither.
        let out = within(LIMIT, "the child's end", kid.result()).await?;
        let end = match out {
            Ok(5) => End::Completed(5),
            Err(Error::Cancelled(r)) if r == nested(1, "R") => End::Cancelled(r),
            other => anyhow::bail!("{k}: {other:?}; {}", describe(&host, &k).await),
        };
        check_end(&host, &k, &end).await?;
        let expected = ends(&[(&root, cancelled("R")), (&k, end)]);
        check_waiters(waiters, &expected).await?;
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_completing_after_its_cancel_spares_a_run_it_only_attached_to()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(&dir).await?;
    host.start::<Node>("ext2", leaf(CLEANUP)).await?;
    let spec = node(
        OnCancel::Complete,
        vec![
            attached("ext2", leaf(CLEANUP)),
            attached("tc/k", leaf(OnCancel::Propagate)),
        ],
    );
    host.start::<Node>("tc", spec.clone()).await?;
    until_up(&host, "tc", &spec).await?;
    let waiters = spawn_waiters(&host, &ids("tc", &spec));
    // The parent hears the request, completes, and asks its unfinished
    // children again in the request's words: `ext2` is not one of them.
    within(LIMIT, "the cancel", host.run("tc").cancel("R")).await??;
    check_end(&host, "tc", &End::Completed(1000)).await?;
    check_end(&host, "tc/k", &End::Cancelled(nested(1, "R"))).await?;
    untouched(&host, "ext2").await?;
    signal(&host, "ext2", "finish", 4).await?;
    let expected = ends(&[
        ("tc", End::Completed(1000)),
        ("tc/k", End::Cancelled(nested(1, "R"))),
        ("ext2", End::Completed(4)),
    ]);
    check_end(&host, "ext2", &End::Completed(4)).await?;
    check_waiters(waiters, &expected).await?;
    host.shutdown().await?;
    Ok(())
}

/// Waits on its child (a `Node` leaf that propagates) and on signal `boom`;
/// `boom` makes it fail.
struct Brittle;

impl Workflow for Brittle {
    const NAME: &'static str = "cancel-tree-brittle";
    type Input = String;
    type Output = u32;
    async fn run(&self, ctx: Ctx, kid: String) -> reel::Result<u32> {
        let child = ctx.child::<Node>(&kid, leaf(OnCancel::Propagate));
        let boom = ctx.wait_for_signal::<u32>("boom");
        tokio::select! {
            biased;
            b = boom => {
                b?;
                Err(Error::Codec("boom".to_owned()))
            }
            c = child => c,
        }
    }
}

/// A parent failing as its cancel request lands: if the request made it into
/// the parent's log (the parent ended cancelled, or failed with the request
/// recorded), its child ends with the parent's cancel (`parent cancelled: R`),
/// whichever of the request and the parent's end reached it first; if not, the
/// parent failed first and the child ends with `parent failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_failing_as_its_cancel_lands_passes_on_one_reason() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .clock(clock())
        .cancel_grace(GRACE)
        .register(Node)
        .register(Brittle)
        .build()
        .await?;
    let mut seen = BTreeMap::new();
    for i in 0..24 {
        let root = format!("bf{i}");
        let k = format!("{root}/k");
        let run = host.start::<Brittle>(&root, k.clone()).await?;
        until_status(&host, &k, "up", |s| {
            matches!(s, RunStatus::Suspended { .. })
        })
        .await?;
        until_status(&host, &root, "up", |s| {
            matches!(s, RunStatus::Suspended { .. })
        })
        .await?;
        let parent_waiter = {
            let run = run.clone();
            tokio::spawn(async move { run.result().await })
        };
        let kid_waiters = spawn_waiters(&host, std::slice::from_ref(&k));
        // Sent together, in either order.
        let (boom, cancel) = within(LIMIT, "boom and cancel", async {
            if i % 2 == 0 {
                tokio::join!(run.signal("boom", &1u32, "boom"), run.cancel("R"))
            } else {
                let (c, b) = tokio::join!(run.cancel("R"), run.signal("boom", &1u32, "boom"));
                (b, c)
            }
        })
        .await?;
        assert!(
            matches!(boom, Ok(()) | Err(Error::RunFinished(_))),
            "{root}: {boom:?}"
        );
        assert!(
            matches!(cancel, Ok(()) | Err(Error::RunFinished(_))),
            "{root}: {cancel:?}"
        );
        let out = within(LIMIT, "the parent", run.result()).await?;
        let events = run.events().await?;
        let request = requested(&events);
        let status = run.status().await?;
        let kid_end = match (&out, &request) {
            (Err(Error::Cancelled(r)), Some(q)) if r == "R" && q == "R" => {
                assert_eq!(status, RunStatus::Cancelled);
                End::Cancelled(nested(1, "R"))
            }
            (Err(e), Some(q)) if q == "R" && !matches!(e, Error::Cancelled(_)) => {
                assert!(matches!(status, RunStatus::Failed { .. }), "{status:?}");
                End::Cancelled(nested(1, "R"))
            }
            (Err(e), None) if !matches!(e, Error::Cancelled(_)) => {
                assert!(matches!(status, RunStatus::Failed { .. }), "{status:?}");
                cancelled("parent failed")
            }
            other => anyhow::bail!("{root}: {other:?}; {}", describe(&host, &root).await),
        };
        *seen
            .entry(format!("{:?} / {kid_end:?}", status.kind()))
            .or_insert(0) += 1;
        check_end(&host, &k, &kid_end).await?;
        let got = within(LIMIT, "the parent's waiter", parent_waiter).await??;
        assert_eq!(format!("{got:?}"), format!("{out:?}"), "{root}");
        check_waiters(kid_waiters, &ends(&[(&k, kid_end)])).await?;
    }
    println!("outcomes: {seen:?}");
    host.shutdown().await?;
    Ok(())
}
