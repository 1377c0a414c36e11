//! Acceptance: patching and versioning scenarios ported from Temporal's sdk-core
//! patch tests (temporalio/sdk-core,
//! `crates/sdk-core/tests/integ_tests/workflow_tests/patches.rs`) and DBOS's
//! fork tests (dbos-inc/dbos-transact-py, `tests/test_workflow_management.py`),
//! onto `ctx.patched` / `ctx.deprecate_patch` (README "Changing a workflow's
//! code") and `Host::fork`: a patch first reached after a crash, a removed patch
//! next to one that stays, many patches in one run, a patch met at a
//! continue-as-new boundary, forks of an old run on either side of a patch, and
//! the fork of a version-1 run on a host with versions 1 and 2. Live runs on real
//! stores in temp dirs, restarted between deployments.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::{Replayed, TestClock, replay, replay_as};
use reel::{Ctx, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(30);
const HOUR: Duration = Duration::from_secs(3600);

/// 2027-01-10T00:00:00Z.
fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_799_539_200_000)
}

/// How often each step body really ran, by `<run id>/<step>`.
#[derive(Clone, Default)]
struct Tally(Arc<Mutex<BTreeMap<String, u32>>>);

impl Tally {
    fn bump(&self, key: &str) {
        *self
            .0
            .lock()
            .expect("tally")
            .entry(key.to_owned())
            .or_default() += 1;
    }
    fn get(&self, key: &str) -> u32 {
        self.0.lock().expect("tally").get(key).copied().unwrap_or(0)
    }
}

fn markers(events: &[Event], id: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Patched { id: p } if p == id))
        .count()
}

async fn go(host: &Host, run: &str, name: &str, id: &str) -> anyhow::Result<()> {
    host.run(run).signal(name, &(), id).await?;
    Ok(())
}

/// A timer, a crash the first time it wakes (outside any step), then
/// `patched("my-patch")` and another timer.
#[derive(Clone)]
struct TimerPatchedTimer {
    fail_once: Arc<AtomicBool>,
}

impl Workflow for TimerPatchedTimer {
    const NAME: &'static str = "timer_patched_timer";
    type Input = ();
    type Output = bool;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<bool> {
        ctx.sleep(HOUR).await?;
        if self.fail_once.swap(false, Ordering::SeqCst) {
            panic!("Enchi is hungry! (deliberate)");
        }
        let p = ctx.patched("my-patch");
        ctx.sleep(HOUR).await?;
        Ok(p)
    }
}

/// Ports sdk-core `patches.rs::patched_on_second_workflow_task_is_deterministic`:
/// the patch is first reached in a later activation (after a timer), and that
/// activation crashes once before reaching it. The execution after the crash
/// reaches the patch for the first time: true, one marker, and the log replays
/// to the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_first_reached_after_a_crash_is_taken_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let wf = TimerPatchedTimer {
        fail_once: Arc::new(AtomicBool::new(true)),
    };
    let host = Host::builder()
        .path(dir.path().join("store"))
        .clock(TestClock::auto(t0()))
        .register(wf.clone())
        .build()
        .await?;
    let run = host.start::<TimerPatchedTimer>("wf", ()).await?;
    assert!(within(LIMIT, "the run", run.result()).await??);
    assert!(
        !wf.fail_once.load(Ordering::SeqCst),
        "the crash did not happen"
    );
    let events = run.events().await?;
    assert_eq!(markers(&events, "my-patch"), 1, "{events:?}");
    match replay(wf.clone(), &events).await? {
        Replayed::Completed(p) => assert!(p),
        other => panic!("replay: {other:?}"),
    }
    host.shutdown().await?;
    Ok(())
}

/// The three deployments of sdk-core's `can_remove_deprecated_patch_near_other_patch`,
/// with reel's cleanup: 0 calls `patched("getting-deprecated")` (recording a
/// marker) then `patched("staying")`; 1 has removed the first call; 2 has
/// replaced it with `deprecate_patch`.
#[derive(Clone)]
struct Near {
    deploy: u32,
}

impl Workflow for Near {
    const NAME: &'static str = "near";
    type Input = ();
    type Output = bool;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<bool> {
        ctx.wait_for_signal::<()>("one").await?;
        match self.deploy {
            0 => {
                let _ = ctx.patched("getting-deprecated");
            }
            2 => ctx.deprecate_patch("getting-deprecated"),
            _ => {}
        }
        let staying = ctx.patched("staying");
        ctx.wait_for_signal::<()>("two").await?;
        Ok(staying)
    }
}

async fn open_near(path: &Path, deploy: u32) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(Near { deploy })
        .build()
        .await
}

/// Ports sdk-core `patches.rs::can_remove_deprecated_patch_near_other_patch`:
/// runs that recorded the markers of two adjacent patches resume on code that
/// has dropped the first call (or replaced it with `deprecate_patch`): the
/// second patch still answers true, nothing diverges and no marker is added;
/// a run started on the new code records only the remaining patch's marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_removed_next_to_another_leaves_the_other_true() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let host = open_near(&path, 0).await?;
    for run in ["removed", "deprecated"] {
        host.start::<Near>(run, ()).await?;
        go(&host, run, "one", "one").await?;
        within(LIMIT, run, async {
            loop {
                let events = host.run(run).events().await?;
                if markers(&events, "staying") == 1
                    && matches!(host.run(run).status().await?, RunStatus::Suspended { .. })
                {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await??;
    }
    host.shutdown().await?;

    for (deploy, run) in [(1, "removed"), (2, "deprecated")] {
        let host = open_near(&path, deploy).await?;
        go(&host, run, "two", "two").await?;
        let out = within(LIMIT, run, host.handle::<Near>(run).result()).await?;
        assert!(
            matches!(out, Ok(true)),
            "{run} on deployment {deploy}: {out:?}"
        );
        let events = host.run(run).events().await?;
        assert_eq!(markers(&events, "getting-deprecated"), 1, "{events:?}");
        assert_eq!(markers(&events, "staying"), 1, "{events:?}");
        match replay(Near { deploy }, &events).await? {
            Replayed::Completed(true) => {}
            other => panic!("{run} replayed on deployment {deploy}: {other:?}"),
        }

        let fresh = format!("fresh-{deploy}");
        host.start::<Near>(&fresh, ()).await?;
        go(&host, &fresh, "one", "one").await?;
        go(&host, &fresh, "two", "two").await?;
        let out = within(LIMIT, "fresh", host.handle::<Near>(&fresh).result()).await??;
        assert!(out);
        let events = host.run(&fresh).events().await?;
        assert_eq!(markers(&events, "getting-deprecated"), 0, "{events:?}");
        assert_eq!(markers(&events, "staying"), 1, "{events:?}");
        host.shutdown().await?;
    }
    Ok(())
}

const PATCHES: usize = 60;

/// Before deployment 1 there were no patches: the run just waits for `go`. From
/// deployment 1 on, sixty patches come first, then the wait, then the same
/// sixty again; it returns how many answered true each time.
#[derive(Clone)]
struct Many {
    patched: bool,
}

impl Workflow for Many {
    const NAME: &'static str = "many";
    type Input = ();
    type Output = (usize, usize);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(usize, usize)> {
        let count = |ctx: &Ctx| {
            (0..PATCHES)
                .filter(|i| ctx.patched(&format!("patch-{i}")))
                .count()
        };
        let first = if self.patched { count(&ctx) } else { 0 };
        ctx.wait_for_signal::<()>("go").await?;
        let second = if self.patched { count(&ctx) } else { 0 };
        Ok((first, second))
    }
}

/// Ports sdk-core `patches.rs::many_patches_combine_in_search_attrib_update` and
/// `::patch_marker_size_overflow_replay_is_deterministic`: sixty patches in one
/// run each record one marker and answer true, again after a restart and on
/// replay; a second call of each returns the first answer. A run recorded before
/// the patches existed answers false to all sixty, both times, and records none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_patches_in_one_run_answer_by_the_log() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let open = |patched| {
        Host::builder()
            .path(&path)
            .register(Many { patched })
            .build()
    };
    let host = open(false).await?;
    let old = host.start::<Many>("old", ()).await?;
    within(LIMIT, "old waits", old.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = open(true).await?;
    let new = host.start::<Many>("new", ()).await?;
    within(LIMIT, "new waits", new.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = open(true).await?;
    for run in ["old", "new"] {
        go(&host, run, "go", "go").await?;
    }
    let old_out = within(LIMIT, "old", host.handle::<Many>("old").result()).await??;
    let new_out = within(LIMIT, "new", host.handle::<Many>("new").result()).await??;
    assert_eq!(old_out, (0, 0));
    assert_eq!(new_out, (PATCHES, PATCHES));
    let old_events = host.run("old").events().await?;
    let new_events = host.run("new").events().await?;
    for i in 0..PATCHES {
        let id = format!("patch-{i}");
        assert_eq!(markers(&old_events, &id), 0);
        assert_eq!(markers(&new_events, &id), 1, "{id}");
    }
    match replay(Many { patched: true }, &new_events).await? {
        Replayed::Completed(out) => assert_eq!(out, (PATCHES, PATCHES)),
        other => panic!("{other:?}"),
    }
    match replay(Many { patched: true }, &old_events).await? {
        Replayed::Completed(out) => assert_eq!(out, (0, 0)),
        other => panic!("{other:?}"),
    }
    host.shutdown().await?;
    Ok(())
}

/// A long-lived entity: each segment takes a branch (`old` before the patch,
/// `new` after), waits for `op`, and continues as new until `left` is 0; it
/// returns the branches its segments took.
#[derive(Clone)]
struct Entity {
    patched: bool,
    tally: Tally,
}

impl Workflow for Entity {
    const NAME: &'static str = "entity";
    type Input = (u32, Vec<String>);
    type Output = Vec<String>;
    async fn run(
        &self,
        ctx: Ctx,
        (left, mut seen): (u32, Vec<String>),
    ) -> reel::Result<Vec<String>> {
        let branch = if self.patched && ctx.patched("new-step") {
            "new"
        } else {
            "old"
        };
        let key = format!("{}/{}/{branch}", ctx.run_id(), seen.len());
        ctx.step(branch, |_| async {
            self.tally.bump(&key);
            Ok::<_, String>(())
        })
        .await?;
        seen.push(branch.to_owned());
        ctx.wait_for_signal::<()>("op").await?;
        if left == 0 {
            return Ok(seen);
        }
        ctx.continue_as_new::<Entity>((left - 1, seen)).await
    }
}

/// Temporal's rule that a patch belongs to one run's history, at reel's
/// continue-as-new boundary (the README: "a long-lived run can move to new code
/// at a segment boundary"): a run waiting in a segment recorded before the patch
/// keeps the old branch in that segment, and its next segment, which starts
/// from nothing, takes the new branch (recording its own marker); each step ran
/// once, and the segment-2 idempotency keys differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_segment_after_a_deploy_takes_the_patched_branch() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let tally = Tally::default();
    let open = |patched| {
        Host::builder()
            .path(&path)
            .register(Entity {
                patched,
                tally: tally.clone(),
            })
            .build()
    };
    let host = open(false).await?;
    let run = host.start::<Entity>("cart", (2, Vec::new())).await?;
    within(LIMIT, "segment 1 waits", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = open(true).await?;
    let run = host.handle::<Entity>("cart");
    for k in 0..3 {
        within(LIMIT, "a segment waits", run.wait_until_suspended()).await??;
        run.signal("op", &(), &format!("op-{k}")).await?;
        if k < 2 {
            // Wait for the next segment before signalling it.
            within(LIMIT, "the next segment", async {
                while run.info().await?.segment <= k {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                anyhow::Ok(())
            })
            .await??;
        }
    }
    let out = within(LIMIT, "cart ends", run.result()).await??;
    assert_eq!(out, vec!["old", "new", "new"]);
    assert_eq!(tally.get("cart/0/old"), 1);
    assert_eq!(tally.get("cart/1/new"), 1);
    assert_eq!(tally.get("cart/2/new"), 1);
    let events = run.events().await?;
    assert_eq!(markers(&events, "new-step"), 2, "{events:?}");
    host.shutdown().await?;
    Ok(())
}

/// Before the patch: step `charge`, a wait for `ship`. After it: a patched
/// `email` step between them. Returns whether it took the patched branch.
#[derive(Clone)]
struct Charge {
    patched: bool,
    tally: Tally,
}

impl Workflow for Charge {
    const NAME: &'static str = "charge";
    type Input = ();
    type Output = bool;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<bool> {
        let run = ctx.run_id().to_owned();
        ctx.step("charge", |_| async {
            self.tally.bump(&format!("{run}/charge"));
            Ok::<_, String>(())
        })
        .await?;
        let p = self.patched && ctx.patched("receipt");
        if p {
            ctx.step("email", |_| async {
                self.tally.bump(&format!("{run}/email"));
                Ok::<_, String>(())
            })
            .await?;
        }
        ctx.wait_for_signal::<()>("ship").await?;
        Ok(p)
    }
}

/// Ports DBOS `tests/test_workflow_management.py::test_fork_steps` (a fork
/// replays the steps before its cut and runs the rest with the code deployed
/// now) against Temporal's patch semantics: an old run forked on the patched
/// code after its `charge` step goes past the patch position for the first
/// time and takes the new branch (its `email` runs; `charge` does not run
/// again); forked at its end, where the log already holds the old branch's
/// wait, it keeps the old branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_of_an_old_run_take_the_patch_only_past_its_log() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let tally = Tally::default();
    let open = |patched| {
        Host::builder()
            .path(&path)
            .register(Charge {
                patched,
                tally: tally.clone(),
            })
            .build()
    };
    let host = open(false).await?;
    let old = host.start::<Charge>("old", ()).await?;
    within(LIMIT, "old waits", old.wait_until_suspended()).await??;
    old.signal("ship", &(), "ship").await?;
    assert!(!within(LIMIT, "old ends", old.result()).await??);
    host.shutdown().await?;

    let host = open(true).await?;
    let records = host.run("old").records().await?;
    let awaited = records
        .iter()
        .find(|r| matches!(r.event, Event::SignalAwaited { .. }))
        .map(|r| r.seq)
        .ok_or_else(|| anyhow::anyhow!("no wait in {records:?}"))?;
    let end = records
        .iter()
        .find(|r| matches!(r.event, Event::RunCompleted { .. }))
        .map(|r| r.seq)
        .ok_or_else(|| anyhow::anyhow!("no end in {records:?}"))?;

    host.fork("old", awaited, "after-charge").await?;
    let after = host.handle::<Charge>("after-charge");
    within(LIMIT, "the fork waits", after.wait_until_suspended()).await??;
    after.signal("ship", &(), "ship").await?;
    assert!(within(LIMIT, "after-charge", after.result()).await??);
    assert_eq!(
        tally.get("after-charge/charge"),
        0,
        "a step below the cut ran"
    );
    assert_eq!(tally.get("after-charge/email"), 1);
    assert_eq!(markers(&after.events().await?, "receipt"), 1);

    host.fork("old", end, "at-end").await?;
    let at_end = host.handle::<Charge>("at-end");
    let out = within(LIMIT, "at-end", at_end.result()).await?;
    assert!(matches!(out, Ok(false)), "{out:?}");
    assert_eq!(tally.get("at-end/charge"), 0);
    assert_eq!(tally.get("at-end/email"), 0);
    assert_eq!(markers(&at_end.events().await?, "receipt"), 0);
    assert_eq!(tally.get("old/charge"), 1);
    match replay_as(
        Charge {
            patched: true,
            tally: Tally::default(),
        },
        "after-charge",
        &after.events().await?,
    )
    .await?
    {
        Replayed::Completed(true) => {}
        other => panic!("the fork's log replayed: {other:?}"),
    }
    host.shutdown().await?;
    Ok(())
}

/// Version 1 of `job`: waits for `go`, answers "v1".
struct JobV1;

impl Workflow for JobV1 {
    const NAME: &'static str = "job";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.wait_for_signal::<()>("go").await?;
        Ok("v1".into())
    }
}

/// Version 2 of `job`: a step first, then as version 1, answering "v2".
struct JobV2;

impl Workflow for JobV2 {
    const NAME: &'static str = "job";
    const VERSION: u32 = 2;
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("prepare", |_| async { Ok::<_, String>(()) })
            .await?;
        ctx.wait_for_signal::<()>("go").await?;
        Ok("v2".into())
    }
}

/// Ports DBOS `tests/test_workflow_management.py::test_fork_version`: the fork of
/// a run keeps the version its log was written by (reel: "the registered code of
/// the segment's workflow and version"), also on a host where a newer version
/// is registered: it replays without divergence and answers as version 1, and
/// listing by version finds it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fork_of_a_v1_run_stays_on_v1_beside_v2() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("store");
    let host = Host::builder().path(&path).register(JobV1).build().await?;
    let run = host.start::<JobV1>("job-1", ()).await?;
    within(LIMIT, "job-1 waits", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = Host::builder()
        .path(&path)
        .register(JobV1)
        .register(JobV2)
        .build()
        .await?;
    let end = host
        .run("job-1")
        .records()
        .await?
        .last()
        .map_or(0, |r| r.seq)
        + 1;
    let fork = host.fork("job-1", end, "job-1-fork").await?;
    assert_eq!(fork.info().await?.version, 1);
    within(LIMIT, "the fork waits", fork.wait_until_suspended()).await??;
    fork.signal("go", &(), "go").await?;
    let out = within(LIMIT, "the fork ends", fork.result::<String>()).await??;
    assert_eq!(out, "v1");
    let fresh = host.start::<JobV2>("job-2", ()).await?;
    fresh.signal("go", &(), "go").await?;
    assert_eq!(within(LIMIT, "job-2", fresh.result()).await??, "v2");
    let v1 = host
        .list(reel::RunFilter::default().version(1).limit(10))
        .await?;
    let ids: Vec<&str> = v1.items.iter().map(|r| r.run_id.as_str()).collect();
    assert!(
        ids.contains(&"job-1-fork") && ids.contains(&"job-1"),
        "{ids:?}"
    );
    assert!(!ids.contains(&"job-2"), "{ids:?}");
    host.shutdown().await?;
    Ok(())
}
