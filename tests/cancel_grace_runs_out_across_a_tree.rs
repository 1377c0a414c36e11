//! The cancel grace (`HostBuilder::cancel_grace`) running out while a tree of
//! runs cleans up, on a test clock moved by hand: each run still cleaning up
//! when its grace (counted from its own request) has passed is cancelled hard
//! with its first request's reason, its parent's hard cancel reaches its
//! children in the parent's words, detached subtrees go on, the deadline is
//! kept across a restart, and every `result()` caller gets the end.

mod common;
#[path = "cancel_trees/mod.rs"]
mod trees;

use std::collections::BTreeMap;
use std::time::Duration;

use common::within;
use reel::{Host, RunStatus, StartOptions};
use trees::{
    CLEANUP, End, Node, OnCancel, attached, cancelled, check_all, check_end, check_waiters, clock,
    detached, ids, leaf, nested, node, releases, requested, spawn_waiters, until_in_cleanup,
    until_up,
};

const GRACE: Duration = Duration::from_secs(60);
const SEC: Duration = Duration::from_secs(1);

async fn signal(host: &Host, id: &str, name: &str, v: u32) -> reel::Result<()> {
    host.handle::<Node>(id)
        .signal(name, &v, &format!("{name}-{id}"))
        .await
}

fn ends(list: &[(&str, End)]) -> BTreeMap<String, End> {
    list.iter()
        .map(|(id, e)| ((*id).to_owned(), e.clone()))
        .collect()
}

/// A tree cleaning up at three levels, one child that would complete after its
/// cleanup, and a detached subtree.
fn tree(root: &str) -> trees::Spec {
    node(
        CLEANUP,
        vec![
            attached(
                &format!("{root}/a"),
                node(
                    CLEANUP,
                    vec![attached(&format!("{root}/a/1"), leaf(CLEANUP))],
                ),
            ),
            attached(
                &format!("{root}/b"),
                leaf(OnCancel::Cleanup {
                    then_complete: true,
                }),
            ),
            detached(
                &format!("{root}/d"),
                node(
                    CLEANUP,
                    vec![attached(&format!("{root}/d/1"), leaf(CLEANUP))],
                ),
            ),
        ],
    )
}

fn cleaning(root: &str) -> Vec<String> {
    ["", "/a", "/a/1", "/b"]
        .iter()
        .map(|s| format!("{root}{s}"))
        .collect()
}

fn hard_ends(root: &str) -> BTreeMap<String, End> {
    let id = |s: &str| format!("{root}{s}");
    ends(&[
        (&id(""), cancelled("R")),
        (&id("/a"), End::Cancelled(nested(1, "R"))),
        (&id("/a/1"), End::Cancelled(nested(2, "R"))),
        // Cancelled hard before its cleanup could complete it.
        (&id("/b"), End::Cancelled(nested(1, "R"))),
    ])
}

/// The detached subtree was not touched; it completes when told.
async fn detached_goes_on(host: &Host, root: &str) -> anyhow::Result<()> {
    let d = format!("{root}/d");
    let d1 = format!("{root}/d/1");
    for id in [&d, &d1] {
        let run = host.run(id);
        let status = run.status().await?;
        assert!(
            matches!(status, RunStatus::Suspended { .. }),
            "{id}: {status:?}"
        );
        assert_eq!(requested(&run.events().await?), None, "{id}");
    }
    signal(host, &d1, "finish", 1).await?;
    signal(host, &d, "finish", 2).await?;
    check_end(host, &d1, &End::Completed(1)).await?;
    check_end(host, &d, &End::Completed(3)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_running_out_cancels_every_cleaning_run_hard() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    let spec = tree("gr");
    host.start::<Node>("gr", spec.clone()).await?;
    until_up(&host, "gr", &spec).await?;
    let waiters = spawn_waiters(&host, &ids("gr", &spec));
    host.run("gr").request_cancel("R").await?;
    for id in cleaning("gr") {
        until_in_cleanup(&host, &id).await?;
    }
    clock.advance(GRACE + SEC);
    let expected = hard_ends("gr");
    for (id, end) in &expected {
        check_end(&host, id, end).await?;
    }
    detached_goes_on(&host, "gr").await?;
    let mut all = expected;
    all.insert("gr/d".into(), End::Completed(3));
    all.insert("gr/d/1".into(), End::Completed(1));
    check_waiters(waiters, &all).await?;
    for id in cleaning("gr") {
        assert_eq!(releases(&id), 1, "{id}");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_is_kept_across_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    let spec = tree("gk");
    host.start::<Node>("gk", spec.clone()).await?;
    until_up(&host, "gk", &spec).await?;
    host.run("gk").request_cancel("R").await?;
    for id in cleaning("gk") {
        until_in_cleanup(&host, &id).await?;
    }
    clock.advance(GRACE / 2);
    host.shutdown().await?;

    // Reopened before the deadline: the cleanup goes on; then the rest of the
    // grace passes.
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    for id in cleaning("gk") {
        until_in_cleanup(&host, &id).await?;
    }
    let waiters = spawn_waiters(&host, &ids("gk", &spec));
    clock.advance(GRACE / 2 + SEC);
    let expected = hard_ends("gk");
    for (id, end) in &expected {
        check_end(&host, id, end).await?;
    }
    detached_goes_on(&host, "gk").await?;
    check_waiters(waiters, &expected).await?;
    for id in cleaning("gk") {
        assert_eq!(releases(&id), 1, "{id}: its cleanup ran again");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_that_passed_while_no_host_ran_ends_the_tree_on_reopen() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    let spec = tree("gp");
    host.start::<Node>("gp", spec.clone()).await?;
    until_up(&host, "gp", &spec).await?;
    host.run("gp").request_cancel("R").await?;
    for id in cleaning("gp") {
        until_in_cleanup(&host, &id).await?;
    }
    drop(host);
    clock.advance(2 * GRACE);
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    let waiters = spawn_waiters(&host, &ids("gp", &spec));
    let expected = hard_ends("gp");
    for (id, end) in &expected {
        check_end(&host, id, end).await?;
    }
    detached_goes_on(&host, "gp").await?;
    check_waiters(waiters, &expected).await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_whose_own_grace_runs_out_first_ends_with_its_own_reason() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    let spec = node(
        CLEANUP,
        vec![attached(
            "eg/k",
            node(CLEANUP, vec![attached("eg/k/1", leaf(CLEANUP))]),
        )],
    );
    host.start::<Node>("eg", spec.clone()).await?;
    until_up(&host, "eg", &spec).await?;
    let waiters = spawn_waiters(&host, &ids("eg", &spec));

    // The child is asked first, for its own reason; its grace runs from then.
    host.run("eg/k").request_cancel("own").await?;
    until_in_cleanup(&host, "eg/k").await?;
    until_in_cleanup(&host, "eg/k/1").await?;
    clock.advance(GRACE / 2);
    // The parent's request, half a grace later, does not restart the child's.
    host.run("eg").request_cancel("R").await?;
    until_in_cleanup(&host, "eg").await?;
    clock.advance(GRACE / 2 + SEC);
    check_end(&host, "eg/k", &cancelled("own")).await?;
    check_end(&host, "eg/k/1", &End::Cancelled(nested(1, "own"))).await?;
    // The parent's own grace has not passed: it still cleans up.
    until_in_cleanup(&host, "eg").await?;
    clock.advance(GRACE / 2);
    check_end(&host, "eg", &cancelled("R")).await?;
    let expected = ends(&[
        ("eg", cancelled("R")),
        ("eg/k", cancelled("own")),
        ("eg/k/1", End::Cancelled(nested(1, "own"))),
    ]);
    check_waiters(waiters, &expected).await?;
    for id in ["eg", "eg/k", "eg/k/1"] {
        assert_eq!(releases(id), 1, "{id}");
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_of_a_parent_that_ended_keep_their_own_grace() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    for (root, on, root_end) in [
        ("pe", OnCancel::Propagate, cancelled("R")),
        ("pc", OnCancel::Complete, End::Completed(1000)),
    ] {
        let k = format!("{root}/k");
        let k1 = format!("{root}/k/1");
        let spec = node(
            on,
            vec![attached(
                &k,
                node(CLEANUP, vec![attached(&k1, leaf(CLEANUP))]),
            )],
        );
        host.start::<Node>(root, spec.clone()).await?;
        until_up(&host, root, &spec).await?;
        let waiters = spawn_waiters(&host, &ids(root, &spec));
        host.run(root).request_cancel("R").await?;
        check_end(&host, root, &root_end).await?;
        until_in_cleanup(&host, &k).await?;
        until_in_cleanup(&host, &k1).await?;
        clock.advance(GRACE + SEC);
        let expected = ends(&[
            (root, root_end.clone()),
            (&k, End::Cancelled(nested(1, "R"))),
            (&k1, End::Cancelled(nested(2, "R"))),
        ]);
        check_all(&host, waiters, &expected).await?;
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parents_own_deadline_cancels_its_tree_in_its_words() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    let spec = node(
        OnCancel::Propagate,
        vec![
            attached(
                "dl/k",
                node(CLEANUP, vec![attached("dl/k/1", leaf(OnCancel::Propagate))]),
            ),
            detached("dl/d", leaf(OnCancel::Propagate)),
        ],
    );
    let hour = Duration::from_secs(3600);
    host.start_with::<Node>("dl", spec.clone(), StartOptions::default().timeout(hour))
        .await?;
    until_up(&host, "dl", &spec).await?;
    let waiters = spawn_waiters(&host, &ids("dl", &spec));
    clock.advance(hour + SEC);
    let out = within(
        trees::LIMIT,
        "the deadline",
        host.handle::<Node>("dl").result(),
    )
    .await?;
    let reason = match out {
        Err(reel::Error::Cancelled(r)) if r.starts_with("deadline exceeded") => r,
        other => anyhow::bail!("dl: {other:?}"),
    };
    until_in_cleanup(&host, "dl/k").await?;
    signal(&host, "dl/k", "cleanup-done", 0).await?;
    signal(&host, "dl/d", "finish", 6).await?;
    let expected = ends(&[
        ("dl", End::Cancelled(reason.clone())),
        ("dl/k", End::Cancelled(nested(1, &reason))),
        ("dl/k/1", End::Cancelled(nested(2, &reason))),
        ("dl/d", End::Completed(6)),
    ]);
    check_all(&host, waiters, &expected).await?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_running_out_spares_a_run_the_parent_only_attached_to() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let host = trees::open(dir.path(), &clock, GRACE).await?;
    host.start::<Node>("gx-ext", leaf(CLEANUP)).await?;
    let spec = node(
        CLEANUP,
        vec![
            attached("gx-ext", leaf(CLEANUP)),
            attached("gx/k", leaf(CLEANUP)),
        ],
    );
    host.start::<Node>("gx", spec.clone()).await?;
    until_up(&host, "gx", &spec).await?;
    let waiters = spawn_waiters(&host, &ids("gx", &spec));
    host.run("gx").request_cancel("R").await?;
    until_in_cleanup(&host, "gx").await?;
    until_in_cleanup(&host, "gx/k").await?;
    clock.advance(GRACE + SEC);
    check_end(&host, "gx", &cancelled("R")).await?;
    check_end(&host, "gx/k", &End::Cancelled(nested(1, "R"))).await?;
    let ext = host.run("gx-ext");
    let status = ext.status().await?;
    assert!(matches!(status, RunStatus::Suspended { .. }), "{status:?}");
    assert_eq!(requested(&ext.events().await?), None);
    signal(&host, "gx-ext", "finish", 8).await?;
    let expected = ends(&[
        ("gx", cancelled("R")),
        ("gx/k", End::Cancelled(nested(1, "R"))),
        ("gx-ext", End::Completed(8)),
    ]);
    check_end(&host, "gx-ext", &End::Completed(8)).await?;
    check_waiters(waiters, &expected).await?;
    host.shutdown().await?;
    Ok(())
}
