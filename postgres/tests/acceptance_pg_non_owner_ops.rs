//! Acceptance: operations through a host that does not own the run, on hosts
//! joined to one PostgreSQL database. README, "Several hosts on one database":
//! "`start`, `signal`, `cancel`, `pause`, `resume`, `retry`, `result`, `status`
//! and the listings work on any host for any run".
//!
//! - an approval sent through a non-owner reaches the run on its owner;
//! - `cancel` through a non-owner returns only once the run has ended (its
//!   shielded cleanup recorded), and every host then reads it cancelled;
//! - starting an existing run again through another host changes nothing, and
//!   starting it as another workflow is `RunExists`;
//! - `result()` through a non-owner of a failed run is the owner's answer;
//! - `runs()` and a status-filtered `list` on a non-owner follow the owner.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reel::{Ctx, Error, Host, RunFilter, RunStatus, StatusKind, Workflow};
use support::hosts::{owned_by, result_of, shutdown_all, spread, suspended, until_status};

/// Every step execution: (run id, step, host).
type Log = Arc<Mutex<Vec<(String, String, String)>>>;

/// Waits for an approval, a step naming the host, returns what it saw.
#[derive(Clone)]
struct Approve {
    host: String,
    log: Log,
}

impl Workflow for Approve {
    const NAME: &'static str = "approve";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let (host, log, id) = (self.host.clone(), self.log.clone(), ctx.run_id().to_owned());
        let first = ctx
            .step("first", move |_| {
                let (host, log, id) = (host.clone(), log.clone(), id.clone());
                async move {
                    log.lock()
                        .expect("log")
                        .push((id, "first".into(), host.clone()));
                    Ok::<_, String>(host)
                }
            })
            .await?;
        let decision = ctx.approval("ship").await?;
        Ok(format!(
            "{n}|{first}|{}|{}",
            decision.approved,
            decision.feedback.unwrap_or_default()
        ))
    }
}

/// Released by the test: the shielded cleanup waits on it.
static CLEANUP_GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
/// How many times the cleanup body started.
static CLEANUP_STARTED: AtomicU32 = AtomicU32::new(0);

/// Waits for a signal; on cancel, runs a gated shielded cleanup step.
#[derive(Clone)]
struct Cleans;

impl Workflow for Cleans {
    const NAME: &'static str = "cleans";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        match ctx.wait_for_signal::<String>("go").await {
            Err(Error::Cancelled(reason)) => {
                ctx.shielded()
                    .step("cleanup", |_| async {
                        CLEANUP_STARTED.fetch_add(1, Ordering::SeqCst);
                        let permit = CLEANUP_GATE.acquire().await.expect("gate");
                        permit.forget();
                        Ok::<_, String>(())
                    })
                    .await?;
                Err(Error::Cancelled(reason))
            }
            other => other,
        }
    }
}

/// Fails with its input as the message, after a step.
#[derive(Clone)]
struct Fails;

impl Workflow for Fails {
    const NAME: &'static str = "fails";
    type Input = String;
    type Output = u32;
    async fn run(&self, ctx: Ctx, why: String) -> reel::Result<u32> {
        ctx.step("before", |_| async { Ok::<_, String>(1u32) })
            .await?;
        Err(Error::failed(why))
    }
}

/// Waits for a signal and returns it.
#[derive(Clone)]
struct Waits;

impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.wait_for_signal("go").await
    }
}

async fn open(url: &str, name: &str, log: &Log) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Approve {
            host: name.to_owned(),
            log: log.clone(),
        })
        .register(Cleans)
        .register(Fails)
        .register(Waits)
        .build()
        .await?)
}

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_through_a_non_owner_reaches_the_run() -> anyhow::Result<()> {
    let url = support::database("acc_approve").await;
    let log = Log::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |u, n| open(u, n, &log).await).await?;
    let ids = owned_by(&owners, 1, "appr", 2);
    for (i, id) in ids.iter().enumerate() {
        hosts[0].start::<Approve>(id, i as u32).await?;
    }
    for id in &ids {
        until_status(
            &hosts[0],
            id,
            "waited for the approval",
            |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains("ship")),
        )
        .await;
    }
    hosts[0]
        .run(&ids[0])
        .approve("ship", true, Some("ok from host-0".into()))
        .await?;
    hosts[0].run(&ids[1]).approve("ship", false, None).await?;
    let first = result_of::<Approve>(&hosts[1], &ids[0]).await??;
    assert_eq!(first, "0|host-1|true|ok from host-0");
    let second = result_of::<Approve>(&hosts[0], &ids[1]).await??;
    assert_eq!(second, "1|host-1|false|");
    let executions = log.lock().expect("log").clone();
    for id in &ids {
        let ran: Vec<_> = executions.iter().filter(|(r, _, _)| r == id).collect();
        assert_eq!(ran.len(), 1, "{id}: the step ran once: {ran:?}");
    }
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_through_a_non_owner_returns_once_the_run_ended() -> anyhow::Result<()> {
    let url = support::database("acc_cancel_waits").await;
    let log = Log::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |u, n| open(u, n, &log).await).await?;
    let id = owned_by(&owners, 1, "clean", 1).remove(0);
    hosts[0].start::<Cleans>(&id, ()).await?;
    until_status(&hosts[0], &id, "waited", suspended).await;

    let via = hosts[0].clone();
    let cancel_id = id.clone();
    let cancel =
        tokio::spawn(async move { via.handle::<Cleans>(&cancel_id).cancel("called off").await });
    // The cleanup starts on the owner; while it is held, the cancel has not
    // returned.
    tokio::time::timeout(LIMIT, async {
        while CLEANUP_STARTED.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("the cleanup never started"))?;
    assert!(
        !cancel.is_finished(),
        "cancel() through a non-owner returned while the run's cleanup was still running: {:?}",
        hosts[0].run(&id).status().await
    );
    CLEANUP_GATE.add_permits(1);
    tokio::time::timeout(LIMIT, cancel)
        .await
        .map_err(|_| anyhow::anyhow!("cancel() did not return"))???;
    // "returns once it has ended": read at once, through either host.
    for h in &hosts {
        assert_eq!(
            h.run(&id).status().await?,
            RunStatus::Cancelled,
            "read right after cancel() returned"
        );
    }
    let ended = result_of::<Cleans>(&hosts[0], &id).await?;
    assert!(
        matches!(&ended, Err(Error::Cancelled(r)) if r.contains("called off")),
        "{ended:?}"
    );
    assert_eq!(CLEANUP_STARTED.load(Ordering::SeqCst), 1);
    let events = hosts[0].run(&id).events().await?;
    let completed = events
        .iter()
        .filter(|e| matches!(e, reel::Event::StepCompleted { .. }))
        .count();
    assert_eq!(completed, 1, "the cleanup is recorded: {events:?}");
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_again_through_another_host_changes_nothing() -> anyhow::Result<()> {
    let url = support::database("acc_restart").await;
    let log = Log::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |u, n| open(u, n, &log).await).await?;
    // One run owned by each host, first started through the other.
    let mut ids = owned_by(&owners, 1, "again", 1);
    ids.extend(owned_by(&owners, 0, "again", 1));
    for (i, id) in ids.iter().enumerate() {
        let first = &hosts[i % 2];
        let second = &hosts[(i + 1) % 2];
        first.start::<Approve>(id, 7).await?;
        // Again, with another input, through the owner and the non-owner alike.
        second.start::<Approve>(id, 8).await?;
        first.start::<Approve>(id, 9).await?;
        let other = second.start::<Waits>(id, ()).await;
        assert!(
            matches!(&other, Err(Error::RunExists { .. })),
            "{id}: another workflow on the id: {:?}",
            other.as_ref().map(|_| ())
        );
        until_status(
            second,
            id,
            "waited for the approval",
            |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains("ship")),
        )
        .await;
        second.run(id).approve("ship", true, None).await?;
        let out = result_of::<Approve>(first, id).await??;
        let owner = format!("host-{}", owners[reel_postgres::partition_of(id) as usize]);
        assert_eq!(out, format!("7|{owner}|true|"), "{id}");
    }
    let executions = log.lock().expect("log").clone();
    for id in &ids {
        let ran: Vec<_> = executions.iter().filter(|(r, _, _)| r == id).collect();
        assert_eq!(ran.len(), 1, "{id}: one run, its step once: {ran:?}");
    }
    let page = hosts[0]
        .list(RunFilter::default().workflow("approve").limit(10))
        .await?;
    assert_eq!(page.items.len(), 2, "{:?}", page.items);
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_result_through_a_non_owner_is_the_owners() -> anyhow::Result<()> {
    let url = support::database("acc_failed").await;
    let log = Log::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |u, n| open(u, n, &log).await).await?;
    let id = owned_by(&owners, 1, "fail", 1).remove(0);
    // Waiting through the non-owner before the run even exists on its owner's side.
    let waiter = {
        let h = hosts[0].clone();
        let id = id.clone();
        tokio::spawn(async move {
            tokio::time::timeout(LIMIT, async {
                loop {
                    match h.handle::<Fails>(&id).result().await {
                        Err(Error::UnknownRun(_)) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        other => return other,
                    }
                }
            })
            .await
        })
    };
    hosts[0].start::<Fails>(&id, "out of stock".into()).await?;
    let through_other = waiter
        .await?
        .map_err(|_| anyhow::anyhow!("result() through the non-owner hung"))?;
    let through_owner = result_of::<Fails>(&hosts[1], &id).await?;
    assert!(
        matches!(&through_other, Err(Error::Failed(m)) if m.contains("out of stock")),
        "{through_other:?}"
    );
    assert_eq!(format!("{through_other:?}"), format!("{through_owner:?}"));
    for h in &hosts {
        assert_eq!(h.run(&id).status().await?.kind(), StatusKind::Failed);
    }
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_on_a_non_owner_follow_the_owner() -> anyhow::Result<()> {
    let url = support::database("acc_listing").await;
    let log = Log::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |u, n| open(u, n, &log).await).await?;
    let mut ids = owned_by(&owners, 0, "lst", 3);
    ids.extend(owned_by(&owners, 1, "lst", 3));
    for (i, id) in ids.iter().enumerate() {
        hosts[i % 2].start::<Waits>(id, ()).await?;
    }
    for id in &ids {
        until_status(&hosts[0], id, "waited", suspended).await;
    }
    // Finish every other run, each through the host that does not own it; once
    // its result is back, every host's listings say it.
    let mut done = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        if i % 2 == 1 {
            continue;
        }
        let owner = owners[reel_postgres::partition_of(id) as usize];
        let other = &hosts[1 - owner];
        other
            .handle::<Waits>(id)
            .signal("go", "v", &format!("go-{id}"))
            .await?;
        let out = result_of::<Waits>(other, id).await??;
        assert_eq!(out, "v");
        done.push(id.clone());
        for h in &hosts {
            let completed: Vec<String> = h
                .list(
                    RunFilter::default()
                        .status([StatusKind::Completed])
                        .limit(50),
                )
                .await?
                .items
                .into_iter()
                .map(|r| r.run_id)
                .collect();
            let mut want = done.clone();
            want.sort();
            let mut got = completed.clone();
            got.sort();
            assert_eq!(got, want, "completed runs listed");
        }
    }
    for h in &hosts {
        let all = h.runs().await?;
        assert_eq!(all.len(), ids.len(), "{all:?}");
        for info in &all {
            let want_done = done.contains(&info.run_id);
            assert_eq!(
                info.status.kind(),
                if want_done {
                    StatusKind::Completed
                } else {
                    StatusKind::Suspended
                },
                "{}: {:?}",
                info.run_id,
                info.status
            );
        }
        let waiting: Vec<String> = h
            .list(
                RunFilter::default()
                    .status([StatusKind::Suspended])
                    .oldest_first()
                    .limit(50),
            )
            .await?
            .items
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(waiting.len(), ids.len() - done.len(), "{waiting:?}");
        let counts = h.count().await?;
        assert_eq!(counts[&StatusKind::Completed], done.len() as u64);
        assert_eq!(
            counts[&StatusKind::Suspended],
            (ids.len() - done.len()) as u64
        );
    }
    shutdown_all(hosts).await
}

/// The errors of operations on a finished or unknown run are the same through
/// the owner and through a non-owner (the documented ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_through_a_non_owner_match_the_owners() -> anyhow::Result<()> {
    let url = support::database("acc_refusals").await;
    let log = Log::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |u, n| open(u, n, &log).await).await?;
    let id = owned_by(&owners, 1, "fin", 1).remove(0);
    hosts[0].start::<Waits>(&id, ()).await?;
    until_status(&hosts[0], &id, "waited", suspended).await;
    hosts[0]
        .handle::<Waits>(&id)
        .signal("go", "x", "go-1")
        .await?;
    assert_eq!(result_of::<Waits>(&hosts[0], &id).await??, "x");
    let missing = owned_by(&owners, 1, "nothing-here", 1).remove(0);
    for (who, h) in [("non-owner", &hosts[0]), ("owner", &hosts[1])] {
        let run = h.run(&id);
        let signal = run.signal("go", "y", "go-2").await;
        assert!(
            matches!(signal, Err(Error::RunFinished(_))),
            "{who}: signal to a completed run: {signal:?}"
        );
        let cancel = run.cancel("late").await;
        assert!(
            matches!(cancel, Err(Error::RunFinished(_))),
            "{who}: cancel of a completed run: {cancel:?}"
        );
        let pause = run.pause().await;
        assert!(
            matches!(pause, Err(Error::InvalidState { .. })),
            "{who}: pause of a completed run: {pause:?}"
        );
        let resume = run.resume().await;
        assert!(
            matches!(resume, Err(Error::InvalidState { .. })),
            "{who}: resume of a completed run: {resume:?}"
        );
        let retry = run.retry().await;
        assert!(
            matches!(retry, Err(Error::InvalidState { .. })),
            "{who}: retry of a completed run: {retry:?}"
        );
        let unknown = h.run(&missing);
        let s = unknown.signal("go", "y", "go-3").await;
        assert!(
            matches!(s, Err(Error::UnknownRun(_))),
            "{who}: signal to an unknown run: {s:?}"
        );
        let c = unknown.cancel("nothing").await;
        assert!(
            matches!(c, Err(Error::UnknownRun(_))),
            "{who}: cancel of an unknown run: {c:?}"
        );
        let st = unknown.status().await;
        assert!(
            matches!(st, Err(Error::UnknownRun(_))),
            "{who}: status of an unknown run: {st:?}"
        );
    }
    // Nothing of that reached the run's log, nor created the unknown run.
    let events = hosts[1].run(&id).events().await?;
    let signals = events
        .iter()
        .filter(|e| matches!(e, reel::Event::SignalReceived { .. }))
        .count();
    assert_eq!(signals, 1, "{events:?}");
    assert_eq!(hosts[1].runs().await?.len(), 1);
    shutdown_all(hosts).await
}

/// A run started with a timeout through a host that does not own it: the
/// deadline is kept and the run ends cancelled, read through either host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_of_a_run_started_through_a_non_owner_holds() -> anyhow::Result<()> {
    let url = support::database("acc_timeout").await;
    let log = Log::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |u, n| open(u, n, &log).await).await?;
    let id = owned_by(&owners, 1, "deadline", 1).remove(0);
    let options = reel::StartOptions::default().timeout(Duration::from_millis(300));
    hosts[0].start_with::<Waits>(&id, (), options).await?;
    let ended = result_of::<Waits>(&hosts[0], &id).await?;
    assert!(
        matches!(&ended, Err(Error::Cancelled(r)) if r.contains("deadline")),
        "{ended:?}"
    );
    for h in &hosts {
        assert_eq!(h.run(&id).status().await?, RunStatus::Cancelled);
    }
    shutdown_all(hosts).await
}

/// Held forever: the cleanup of `Stuck` never ends by itself.
static STUCK_GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
/// How many times the cleanup of `Stuck` started.
static STUCK_STARTED: AtomicU32 = AtomicU32::new(0);

/// Waits for a signal; on cancel, a shielded cleanup that never ends.
#[derive(Clone)]
struct Stuck;

impl Workflow for Stuck {
    const NAME: &'static str = "stuck";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        match ctx.wait_for_signal::<String>("go").await {
            Err(Error::Cancelled(reason)) => {
                ctx.shielded()
                    .step("cleanup", |_| async {
                        STUCK_STARTED.fetch_add(1, Ordering::SeqCst);
                        let _permit = STUCK_GATE.acquire().await.expect("gate");
                        Ok::<_, String>(())
                    })
                    .await?;
                Err(Error::Cancelled(reason))
            }
            other => other,
        }
    }
}

/// Through non-owners: a paused run that is cancelled ends cancelled at once; a
/// run whose graceful cancel is under way is ended by `terminate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_cancel_and_terminate_through_non_owners() -> anyhow::Result<()> {
    let url = support::database("acc_terminate").await;
    let open3 = async |u: &str, n: &str| -> anyhow::Result<Host> {
        Ok(support::hosts::joined(u, n)
            .await?
            .register(Waits)
            .register(Stuck)
            .build()
            .await?)
    };
    let (hosts, owners) = spread::<3>(&url, 60, open3).await?;
    let ids = owned_by(&owners, 2, "pc", 2);
    let (paused, stuck) = (&ids[0], &ids[1]);
    hosts[0].start::<Waits>(paused, ()).await?;
    hosts[1].start::<Stuck>(stuck, ()).await?;
    until_status(&hosts[0], paused, "waited", suspended).await;
    until_status(&hosts[0], stuck, "waited", suspended).await;

    hosts[0].run(paused).pause().await?;
    until_status(&hosts[1], paused, "paused", |s| {
        matches!(s, RunStatus::Paused)
    })
    .await;
    hosts[1].run(paused).request_cancel("off").await?;
    let ended = result_of::<Waits>(&hosts[0], paused).await?;
    assert!(matches!(&ended, Err(Error::Cancelled(_))), "{ended:?}");
    assert_eq!(hosts[1].run(paused).status().await?, RunStatus::Cancelled);

    hosts[1].run(stuck).request_cancel("first").await?;
    tokio::time::timeout(LIMIT, async {
        while STUCK_STARTED.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("the cleanup never started"))?;
    hosts[0].run(stuck).terminate("now").await?;
    let ended = result_of::<Stuck>(&hosts[1], stuck).await?;
    assert!(matches!(&ended, Err(Error::Cancelled(_))), "{ended:?}");
    for h in &hosts {
        assert_eq!(h.run(stuck).status().await?, RunStatus::Cancelled);
    }
    shutdown_all(hosts).await
}
