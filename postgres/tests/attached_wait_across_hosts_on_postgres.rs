//! Attached waits across hosts: a run P calls `ctx.child` on the id of a run C
//! that the service started (not P), so P only waits for C's end. P and C are
//! owned by different hosts sharing one database. P must hear C's end when C
//! ends while P waits (a), when C had ended before P's call (b), and when C's
//! host is restarted between P's call and C's end (c). A control: the same wait
//! with P and C on one host.

mod support;

use std::time::{Duration, Instant};

use reel::{Ctx, Error, Host, RunStatus, Workflow};
use reel_postgres::partition_of;
use support::hosts::{owned_by, shutdown_all, until_status};

/// How long a parent is given to hear its attached run's end.
const HEAR: Duration = Duration::from_secs(20);

/// Waits for signal `go`; fails when it is `fail`, else returns `kid:<go>`.
struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<String> {
        let go: String = ctx.wait_for_signal("go").await?;
        if go == "fail" {
            return Err(Error::Failed("kid told to fail".into()));
        }
        Ok(format!("kid:{go}"))
    }
}

/// Attaches to the run it is given (started by the service) and returns its
/// output, or its error as text.
struct Attacher;
impl Workflow for Attacher {
    const NAME: &'static str = "attacher";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, kid: String) -> reel::Result<String> {
        match ctx.child::<Kid>(&kid, ()).await {
            Ok(out) => Ok(out),
            Err(e) => Ok(format!("kid error: {e}")),
        }
    }
}

async fn host(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Kid)
        .register(Attacher)
        .build()
        .await?)
}

/// Opens `host-0` and `host-1` and waits until their leases are settled (no
/// partition moves again while both live).
async fn two_hosts(url: &str) -> anyhow::Result<([Host; 2], Vec<usize>)> {
    let h0 = host(url, "host-0").await?;
    let h1 = host(url, "host-1").await?;
    let owners = support::settled_leases(url, "host-", 2).await;
    Ok(([h0, h1], owners))
}

/// Whether the run's log holds a `ChildStarted` (its `ctx.child` call is
/// recorded).
async fn called(host: &Host, run_id: &str) -> bool {
    host.run(run_id).events().await.is_ok_and(|events| {
        events
            .iter()
            .any(|e| matches!(e, reel::Event::ChildStarted { .. }))
    })
}

/// Waits (15 s at most) until the parent has recorded its call and waits.
async fn until_waiting(host: &Host, parent: &str) {
    until_status(host, parent, "waited", support::hosts::suspended).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while !called(host, parent).await {
        assert!(
            Instant::now() < deadline,
            "{parent} never recorded its child call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Awaits every parent's output through `host`, all at once, [`HEAR`] at most;
/// returns a line for each parent that did not end with `want(kid)`, naming
/// where it and its kid stand.
async fn unheard(
    host: &Host,
    pairs: &[(String, String)],
    want: impl Fn(&str) -> String,
    place: impl Fn(&str, &str) -> String,
) -> Vec<String> {
    let waits = pairs.iter().map(|(p, k)| {
        let expected = want(k);
        let place = place(p, k);
        async move {
            let run = host.handle::<Attacher>(p);
            match tokio::time::timeout(HEAR, run.result()).await {
                Ok(Ok(out)) if out == expected => None,
                Ok(other) => Some(format!("{p} ({place}): ended {other:?}, not {expected:?}")),
                Err(_) => {
                    let events = host.run(p).events().await.map(|e| {
                        e.iter()
                            .map(|e| format!("{e:?}").chars().take(60).collect::<String>())
                            .collect::<Vec<_>>()
                    });
                    Some(format!(
                        "{p} ({place}): still {:?} after {HEAR:?}; its kid {k} is {:?}; \
                         its log {events:?}",
                        run.status().await,
                        host.run(k).status().await,
                    ))
                }
            }
        }
    });
    futures::future::join_all(waits)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// What the kid is told: the first of `kids` fails, the others complete.
fn go_for(kids: &[String], kid: &str) -> String {
    if kids.first().is_some_and(|first| first == kid) {
        "fail".to_owned()
    } else {
        kid.to_owned()
    }
}

/// The output of the parent attached to `kid` (one of `kids`), told as
/// [`go_for`] says.
fn outcome(kids: &[String]) -> impl Fn(&str) -> String + use<> {
    let kids = kids.to_vec();
    move |kid| match go_for(&kids, kid).as_str() {
        "fail" => "kid error: kid told to fail".to_owned(),
        go => format!("kid:{go}"),
    }
}

/// Sends each kid its `go` (see [`go_for`]) through `via`.
async fn release(via: &Host, kids: &[String]) -> anyhow::Result<()> {
    for k in kids {
        via.handle::<Kid>(k)
            .signal("go", &go_for(kids, k), &format!("go-{k}"))
            .await?;
    }
    Ok(())
}

/// Starts the kids through `via` and waits until each waits for its signal.
/// Starts each parent through `via` on its run; with `waiting`, waits until each
/// parent waits there.
async fn attach_parents(
    via: &Host,
    waiting: Option<&Host>,
    parents: &[String],
    kids: &[String],
) -> anyhow::Result<()> {
    for (p, k) in parents.iter().zip(kids) {
        via.start::<Attacher>(p, k.clone()).await?;
    }
    if let Some(host) = waiting {
        for p in parents {
            until_waiting(host, p).await;
        }
    }
    Ok(())
}

/// Waits until every run of `kids` has ended, as `host` reads it.
async fn until_ended(host: &Host, kids: &[String]) {
    for k in kids {
        until_status(host, k, "ended", |s| {
            matches!(s, RunStatus::Completed | RunStatus::Failed { .. })
        })
        .await;
    }
}

fn assert_all_heard(bad: &[String]) {
    assert!(
        bad.is_empty(),
        "parents never heard their attached run's end:\n{}",
        bad.join("\n")
    );
}

async fn start_kids(via: &Host, kids: &[String]) -> anyhow::Result<()> {
    for k in kids {
        via.start::<Kid>(k, ()).await?;
    }
    for k in kids {
        until_status(via, k, "waited for its signal", support::hosts::suspended).await;
    }
    Ok(())
}

/// Control: parent and attached run on one host (host-0), the end comes while
/// the parent waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_wait_hears_an_end_on_its_own_host() -> anyhow::Result<()> {
    let url = support::database("attach_same").await;
    let (hosts, owners) = two_hosts(&url).await?;
    let parents = owned_by(&owners, 0, "p", 3);
    let kids = owned_by(&owners, 0, "k", 3);
    start_kids(&hosts[1], &kids).await?;
    attach_parents(&hosts[1], Some(&hosts[0]), &parents, &kids).await?;
    release(&hosts[1], &kids).await?;
    let want = outcome(&kids);
    let pairs: Vec<_> = parents.into_iter().zip(kids).collect();
    let bad = unheard(&hosts[0], &pairs, want, |_, _| "both on host-0".into()).await;
    shutdown_all(hosts).await?;
    assert_all_heard(&bad);
    Ok(())
}

/// (a) The parent (host-0) waits, suspended; the run it attached to (host-1)
/// ends then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_wait_hears_an_end_on_another_host_while_it_waits() -> anyhow::Result<()> {
    let url = support::database("attach_a").await;
    let (hosts, owners) = two_hosts(&url).await?;
    let parents = owned_by(&owners, 0, "p", 3);
    let kids = owned_by(&owners, 1, "k", 3);
    start_kids(&hosts[1], &kids).await?;
    attach_parents(&hosts[1], Some(&hosts[0]), &parents, &kids).await?;
    release(&hosts[0], &kids).await?;
    until_ended(&hosts[0], &kids).await;
    let want = outcome(&kids);
    let pairs: Vec<_> = parents.into_iter().zip(kids).collect();
    let bad = unheard(&hosts[0], &pairs, want, |_, _| {
        "parent on host-0, kid on host-1".into()
    })
    .await;
    shutdown_all(hosts).await?;
    assert_all_heard(&bad);
    Ok(())
}

/// (b) The run (host-1) has ended before the parent (host-0) calls
/// `ctx.child` on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_wait_on_a_run_that_ended_on_another_host() -> anyhow::Result<()> {
    let url = support::database("attach_b").await;
    let (hosts, owners) = two_hosts(&url).await?;
    let parents = owned_by(&owners, 0, "p", 3);
    let kids = owned_by(&owners, 1, "k", 3);
    start_kids(&hosts[1], &kids).await?;
    release(&hosts[0], &kids).await?;
    until_ended(&hosts[0], &kids).await;
    attach_parents(&hosts[1], None, &parents, &kids).await?;
    let want = outcome(&kids);
    let pairs: Vec<_> = parents.into_iter().zip(kids).collect();
    let bad = unheard(&hosts[0], &pairs, want, |_, _| {
        "parent on host-0, kid on host-1".into()
    })
    .await;
    shutdown_all(hosts).await?;
    assert_all_heard(&bad);
    Ok(())
}

/// (c) The parents (host-0) call `ctx.child` on runs of host-1 and wait; host-1
/// shuts down (giving its leases back) and a new host-1 joins, which takes
/// over runs of the old one and recovers them; once the leases have settled
/// again, the runs end. Which host ends up with each parent and run is read
/// from the leases: each failure names both owners, and the test asserts that
/// some pairs are on different hosts (otherwise it would not test the case).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_wait_hears_an_end_after_the_runs_host_is_restarted() -> anyhow::Result<()> {
    const PAIRS: usize = 16;
    let url = support::database("attach_c").await;
    let ([h0, h1], owners) = two_hosts(&url).await?;
    let parents = owned_by(&owners, 0, "p", PAIRS);
    let kids = owned_by(&owners, 1, "k", PAIRS);
    start_kids(&h1, &kids).await?;
    attach_parents(&h1, Some(&h0), &parents, &kids).await?;
    h1.shutdown().await?;
    // The partitions of the old host-1 are shared out between host-0 and the new
    // host-1 (host-0 may also give some of its own to the newcomer).
    let h1 = host(&url, "host-1").await?;
    let now = support::settled_leases(&url, "host-", 2).await;
    let owner = |id: &str| now[partition_of(id) as usize];
    let cross = parents
        .iter()
        .zip(&kids)
        .filter(|(p, k)| owner(p) != owner(k))
        .count();
    assert!(
        cross > 0,
        "after the restart every parent shares a host with its run: nothing crosses hosts"
    );
    release(&h0, &kids).await?;
    until_ended(&h0, &kids).await;
    let want = outcome(&kids);
    let pairs: Vec<_> = parents.into_iter().zip(kids).collect();
    let bad = unheard(&h0, &pairs, want, |p, k| {
        format!("parent on host-{}, kid on host-{}", owner(p), owner(k))
    })
    .await;
    shutdown_all([h0, h1]).await?;
    assert!(
        bad.is_empty(),
        "{} of {PAIRS} parents ({cross} of them apart from their run after the \
         restart) never heard their attached run's end:\n{}",
        bad.len(),
        bad.join("\n")
    );
    Ok(())
}
