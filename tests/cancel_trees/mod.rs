//! A workflow that builds trees of runs for the cancellation tests: each node
//! starts its children (waited for with `ctx.child`, or detached with
//! `ctx.start_child`, perhaps waited for afterwards), waits for them and for its
//! signal `finish`, and reacts to a cancel request as its spec says. Plus the
//! checks those tests share: how every run of a tree ended, with which reason,
//! and that no waiter hangs.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, RunStatus, StepError, Workflow};
use serde::{Deserialize, Serialize};

use crate::common::within;

/// How long anything may take before it counts as a hang (a hang detector only).
pub const LIMIT: Duration = Duration::from_secs(15);

/// What a node does once its handler sees a cancel request.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub enum OnCancel {
    /// Returns the cancellation error.
    Propagate,
    /// Ignores it and completes with 1000.
    Complete,
    /// Runs a shielded compensation step that fails for good, and returns that
    /// error.
    Fail,
    /// Runs the shielded step `release`, waits (shielded) for signal
    /// `cleanup-done`, then returns the cancellation, or completes with
    /// `2000 + the signal's value` when `then_complete`.
    Cleanup { then_complete: bool },
    /// Through the shielded handle, starts a detached child
    /// (`<id>/late-detached`) and one more waited-for child (`<id>/late`),
    /// both leaves that propagate, and stops waiting for the latter: the
    /// wait loses a `select!` against signal `give-up` (sent before the cancel,
    /// so buffered). Then returns the cancellation, or completes with 3000 when
    /// `then_complete`.
    StartLate { then_complete: bool },
}

/// One child of a node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Kid {
    pub id: String,
    /// Started with `ctx.start_child` rather than `ctx.child`.
    pub detached: bool,
    /// Detached, then waited for with `ctx.child` on its id.
    pub rejoin: bool,
    pub spec: Spec,
}

/// A node: its children and what it does when cancelled.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    pub kids: Vec<Kid>,
    pub on_cancel: OnCancel,
}

pub fn leaf(on_cancel: OnCancel) -> Spec {
    Spec {
        kids: Vec::new(),
        on_cancel,
    }
}

pub fn node(on_cancel: OnCancel, kids: Vec<Kid>) -> Spec {
    Spec { kids, on_cancel }
}

pub fn attached(id: &str, spec: Spec) -> Kid {
    Kid {
        id: id.to_owned(),
        detached: false,
        rejoin: false,
        spec,
    }
}

pub fn detached(id: &str, spec: Spec) -> Kid {
    Kid {
        id: id.to_owned(),
        detached: true,
        rejoin: false,
        spec,
    }
}

pub fn rejoined(id: &str, spec: Spec) -> Kid {
    Kid {
        id: id.to_owned(),
        detached: true,
        rejoin: true,
        spec,
    }
}

pub const CLEANUP: OnCancel = OnCancel::Cleanup {
    then_complete: false,
};

/// Every run id of the tree under `root` (the root first, then depth first).
pub fn ids(root: &str, spec: &Spec) -> Vec<String> {
    let mut out = vec![root.to_owned()];
    for k in &spec.kids {
        out.extend(ids(&k.id, &k.spec));
    }
    out
}

/// How often each run's `release` body ran.
static RELEASES: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

pub fn releases(id: &str) -> u32 {
    RELEASES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(id)
        .copied()
        .unwrap_or(0)
}

fn bump_release(id: &str) {
    *RELEASES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(id.to_owned())
        .or_default() += 1;
}

pub struct Node;

impl Workflow for Node {
    const NAME: &'static str = "cancel-tree-node";
    type Input = Spec;
    type Output = u32;
    async fn run(&self, ctx: Ctx, spec: Spec) -> reel::Result<u32> {
        match work(&ctx, &spec).await {
            Err(Error::Cancelled(reason)) => on_cancel(&ctx, spec.on_cancel, reason).await,
            other => other,
        }
    }
}

/// Starts the children, then waits for the waited-for ones and for `finish`:
/// the output is `finish` plus their outputs.
async fn work(ctx: &Ctx, spec: &Spec) -> reel::Result<u32> {
    let mut waits = Vec::new();
    for kid in &spec.kids {
        if kid.detached {
            ctx.start_child::<Node>(&kid.id, kid.spec.clone()).await?;
            if kid.rejoin {
                waits.push(ctx.child::<Node>(&kid.id, kid.spec.clone()));
            }
        } else {
            waits.push(ctx.child::<Node>(&kid.id, kid.spec.clone()));
        }
    }
    let finish = ctx.wait_for_signal::<u32>("finish");
    let (kids, finish) = futures::join!(futures::future::join_all(waits), finish);
    let mut total = finish?;
    for k in kids {
        total += k?;
    }
    Ok(total)
}

async fn on_cancel(ctx: &Ctx, on: OnCancel, reason: String) -> reel::Result<u32> {
    let sh = ctx.shielded();
    match on {
        OnCancel::Propagate => Err(Error::Cancelled(reason)),
        OnCancel::Complete => Ok(1000),
        OnCancel::Fail => {
            // Non-retryable: whether a shielded attempt failing after the
            // request is retried is the business of
            // `shielded_step_failing_after_the_request_is_not_retried.rs`.
            sh.step("compensate", |_| async {
                Err::<u32, _>(StepError::non_retryable("compensation failed"))
            })
            .await?;
            Ok(0)
        }
        OnCancel::Cleanup { then_complete } => {
            let id = ctx.run_id().to_owned();
            sh.step("release", move |_| {
                let id = id.clone();
                async move {
                    bump_release(&id);
                    Ok::<_, String>(())
                }
            })
            .await?;
            let v = sh.wait_for_signal::<u32>("cleanup-done").await?;
            if then_complete {
                Ok(2000 + v)
            } else {
                Err(Error::Cancelled(reason))
            }
        }
        OnCancel::StartLate { then_complete } => {
            // A detached child started in cleanup is never cancelled by it.
            sh.start_child::<Node>(
                &format!("{}/late-detached", ctx.run_id()),
                leaf(OnCancel::Propagate),
            )
            .await?;
            let late =
                sh.child::<Node>(&format!("{}/late", ctx.run_id()), leaf(OnCancel::Propagate));
            tokio::select! {
                biased;
                r = late => { r?; }
                g = sh.wait_for_signal::<u32>("give-up") => { g?; }
            }
            if then_complete {
                Ok(3000)
            } else {
                Err(Error::Cancelled(reason))
            }
        }
    }
}

pub fn clock() -> TestClock {
    TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))
}

/// A host over `path` on `clock` (which moves only by hand, so a grace runs out
/// only when the test says so), with cancel grace `grace`.
pub async fn open(path: &Path, clock: &TestClock, grace: Duration) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .cancel_grace(grace)
        .register(Node)
        .build()
        .await
}

/// [`open`] over a store of the test's choosing.
pub async fn open_over(
    store: Arc<dyn reel::Store>,
    clock: &TestClock,
    grace: Duration,
) -> reel::Result<Host> {
    Host::builder()
        .store(store)
        .clock(clock.clone())
        .cancel_grace(grace)
        .register(Node)
        .build()
        .await
}

/// Reads the status of run `id` until `ok` holds of it.
pub async fn until_status(
    host: &Host,
    id: &str,
    what: &str,
    ok: impl Fn(&RunStatus) -> bool,
) -> anyhow::Result<RunStatus> {
    let run = host.run(id);
    let got = within(LIMIT, &format!("{id}: {what}"), async {
        loop {
            if let Ok(s) = run.status().await
                && ok(&s)
            {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    match got {
        Ok(s) => Ok(s),
        Err(e) => Err(e.context(describe(host, id).await)),
    }
}

/// Waits until every run of the tree exists and waits (for its children and
/// `finish`): the tree is up.
pub async fn until_up(host: &Host, root: &str, spec: &Spec) -> anyhow::Result<()> {
    for id in ids(root, spec) {
        until_status(host, &id, "up and waiting", |s| {
            matches!(s, RunStatus::Suspended { waiting_on } if !waiting_on.contains("cleanup-done"))
        })
        .await?;
    }
    Ok(())
}

/// Waits until run `id` has seen its cancel and waits in its shielded cleanup.
pub async fn until_in_cleanup(host: &Host, id: &str) -> anyhow::Result<()> {
    until_status(
        host,
        id,
        "waiting in its cleanup",
        |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains("cleanup-done")),
    )
    .await?;
    Ok(())
}

/// Status and log of run `id`, for failure messages.
pub async fn describe(host: &Host, id: &str) -> String {
    let run = host.run(id);
    let kinds = run
        .events()
        .await
        .map(|e| e.iter().map(Event::kind).collect::<Vec<_>>());
    format!("run `{id}`: status {:?}; log {kinds:?}", run.status().await)
}

/// The reason of the first `CancelRequested` in the log, if any.
pub fn requested(events: &[Event]) -> Option<String> {
    events.iter().find_map(|e| match e {
        Event::CancelRequested { reason } => Some(reason.clone()),
        _ => None,
    })
}

/// How a run of a tree must end.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    Cancelled(String),
    Completed(u32),
}

pub fn cancelled(reason: &str) -> End {
    End::Cancelled(reason.to_owned())
}

/// `"parent cancelled: "` `depth` times before `reason`.
pub fn nested(depth: usize, reason: &str) -> String {
    format!("{}{reason}", "parent cancelled: ".repeat(depth))
}

/// Checks that run `id` ended as `end`: its `result()`, its status, and the
/// last event of its log.
pub async fn check_end(host: &Host, id: &str, end: &End) -> anyhow::Result<()> {
    let run = host.handle::<Node>(id);
    let out = match within(LIMIT, &format!("the end of {id}"), run.result()).await {
        Ok(out) => out,
        Err(e) => return Err(e.context(format!("expected {end:?}; {}", describe(host, id).await))),
    };
    let status = run.status().await?;
    let events = run.events().await?;
    let last = events.last().cloned();
    match end {
        End::Cancelled(reason) => {
            anyhow::ensure!(
                matches!(&out, Err(Error::Cancelled(r)) if r == reason),
                "{id}: result {out:?}, expected Cancelled({reason:?}); {}",
                describe(host, id).await
            );
            anyhow::ensure!(status == RunStatus::Cancelled, "{id}: status {status:?}");
            anyhow::ensure!(
                matches!(&last, Some(Event::RunCancelled { reason: r }) if r == reason),
                "{id}: last event {last:?}, expected RunCancelled({reason:?})"
            );
        }
        End::Completed(v) => {
            anyhow::ensure!(
                matches!(&out, Ok(got) if got == v),
                "{id}: result {out:?}, expected Ok({v}); {}",
                describe(host, id).await
            );
            anyhow::ensure!(status == RunStatus::Completed, "{id}: status {status:?}");
            anyhow::ensure!(
                matches!(&last, Some(Event::RunCompleted { .. })),
                "{id}: last event {last:?}"
            );
        }
    }
    Ok(())
}

/// `result()` callers on each of `ids`, spawned now.
pub type Waiters = Vec<(String, tokio::task::JoinHandle<reel::Result<u32>>)>;

pub fn spawn_waiters(host: &Host, ids: &[String]) -> Waiters {
    ids.iter()
        .map(|id| {
            let run = host.handle::<Node>(id);
            (id.clone(), tokio::spawn(async move { run.result().await }))
        })
        .collect()
}

/// Each waiter answers (no hang), with the end `ends` names for its run.
/// Every run of `expected` ends as said ([`check_end`]), and so do the waiters on
/// them ([`check_waiters`]).
pub async fn check_all(
    host: &Host,
    waiters: Waiters,
    expected: &BTreeMap<String, End>,
) -> anyhow::Result<()> {
    for (id, end) in expected {
        check_end(host, id, end).await?;
    }
    check_waiters(waiters, expected).await
}

pub async fn check_waiters(waiters: Waiters, ends: &BTreeMap<String, End>) -> anyhow::Result<()> {
    for (id, w) in waiters {
        let out = within(LIMIT, &format!("the waiter on {id}"), w).await??;
        let Some(end) = ends.get(&id) else { continue };
        let ok = match end {
            End::Cancelled(reason) => matches!(&out, Err(Error::Cancelled(r)) if r == reason),
            End::Completed(v) => matches!(&out, Ok(got) if got == v),
        };
        anyhow::ensure!(ok, "waiter on {id}: {out:?}, expected {end:?}");
    }
    Ok(())
}
