//! Acceptance tests for versions and patching, written from DESIGN.md ("Versions")
//! and the README ("Changing a workflow's code"): a run whose version is no longer
//! registered is reported with `Error::VersionMismatch` (also one that nothing
//! wakes), its status text carries the error, and it resumes on its own version
//! once a host registers it again; `ctx.patched` answers by position, gives the
//! first answer again for the same id within one execution (also past the
//! recorded calls), and answers the same under `join!`, live and on replay.

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// Version 1: waits for `go`, answers `v1 <n> <go>`.
struct JobV1;
impl Workflow for JobV1 {
    const NAME: &'static str = "acc-job";
    const VERSION: u32 = 1;
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(format!("v1 {n} {go}"))
    }
}

/// Version 2 of the same workflow: another sequence of calls.
struct JobV2;
impl Workflow for JobV2 {
    const NAME: &'static str = "acc-job";
    const VERSION: u32 = 2;
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        ctx.sleep(Duration::from_millis(1)).await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(format!("v2 {n} {go}"))
    }
}

fn is_mismatch<T: std::fmt::Debug>(r: &reel::Result<T>) -> bool {
    matches!(r, Err(Error::VersionMismatch { workflow, version: 1 }) if workflow == "acc-job")
}

/// DESIGN, "Versions": "a run whose version is no longer registered is reported
/// (`Error::VersionMismatch`), not run with the wrong code"; README: "Parked runs
/// report `RunStatus::Parked { error }` from `status()`, and `result()` returns the
/// parking error"; DESIGN: a parked run's status "Debug text must carry the
/// error's Display text". A v1 run that waits for a signal when a host with only
/// v2 opens is reported so without anything waking it: `result()` answers
/// `VersionMismatch` rather than waiting for ever, and `runs()` does not list it
/// as a healthy waiting run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_run_of_a_missing_version_is_reported_without_a_wake_up() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), JobV1).await?;
    let run = host.start::<JobV1>("acc-v1-idle", 4).await?;
    within(LIMIT, "the v1 run to wait", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), JobV2).await?;
    let run = host.run("acc-v1-idle");
    let got = within(LIMIT, "result() of the v1 run", run.result::<String>()).await;
    let listed = host
        .runs()
        .await?
        .into_iter()
        .find(|r| r.run_id == "acc-v1-idle")
        .map(|r| (r.version, r.status));
    let status = run.status().await?;
    host.shutdown().await?;
    let report = format!("result(): {got:?}; status(): {status:?}; runs(): {listed:?}");
    assert!(matches!(&got, Ok(r) if is_mismatch(r)), "{report}");
    assert!(
        matches!(&status, RunStatus::Parked { error } if error.contains("version 1 is not registered")),
        "{report}"
    );
    assert!(
        matches!(&listed, Some((1, RunStatus::Parked { .. }))),
        "{report}"
    );
    Ok(())
}

/// The same run, woken by a signal on the v2-only host, is parked with
/// `VersionMismatch` (its `status()` Debug text carries the error's Display
/// text), keeps that signal, and completes on v1 with it once a host registers
/// v1 again, next to v2 runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_version_keeps_its_signal_and_resumes_on_its_own_code() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), JobV1).await?;
    let run = host.start::<JobV1>("acc-v1", 5).await?;
    within(LIMIT, "the v1 run to wait", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), JobV2).await?;
    let old = host.run("acc-v1");
    old.signal("go", &9u32, "go-1").await?;
    let status =
        common::status::until_status(&old, "parked", |s| matches!(s, RunStatus::Parked { .. }))
            .await?;
    let display = Error::VersionMismatch {
        workflow: "acc-job".into(),
        version: 1,
    }
    .to_string();
    assert!(
        format!("{status:?}").contains(&display),
        "{status:?} carries {display}"
    );
    assert!(is_mismatch(
        &within(LIMIT, "parked result", old.result::<String>()).await?
    ));
    let new = host.start::<JobV2>("acc-v2", 6).await?;
    new.signal("go", &1u32, "go-1").await?;
    assert_eq!(within(LIMIT, "v2 run", new.result()).await??, "v2 6 1");
    host.shutdown().await?;

    let host = common::hosts::open_two(dir.path(), JobV1, JobV2).await?;
    let old = host.handle::<JobV1>("acc-v1");
    assert_eq!(
        within(LIMIT, "resumed v1 run", old.result()).await??,
        "v1 5 9"
    );
    assert_eq!(old.info().await?.version, 1);
    host.shutdown().await?;
    Ok(())
}

/// Patch ids whose side steps ran, by run id.
static PATCHED_STEPS: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

fn patched_steps(id: &str) -> u32 {
    PATCHED_STEPS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(id)
        .copied()
        .unwrap_or(0)
}

async fn counted(ctx: &Ctx, name: &str) -> reel::Result<()> {
    let id = ctx.run_id().to_owned();
    ctx.step(name, |_| async {
        *PATCHED_STEPS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.clone())
            .or_default() += 1;
        Ok::<_, String>(())
    })
    .await
}

/// The code first deployed: charge, wait for `ship`, done.
struct Order;
impl Workflow for Order {
    const NAME: &'static str = "acc-order";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("charge", |_| async { Ok::<_, String>(1u32) })
            .await?;
        let to: String = ctx.wait_for_signal("ship").await?;
        ctx.step("done", |_| async { Ok::<_, String>(()) }).await?;
        Ok(format!("shipped to {to}"))
    }
}

/// The same workflow with patch `receipt` asked before the wait and again after
/// it: both answers must agree within one execution.
struct OrderPatched;
impl Workflow for OrderPatched {
    const NAME: &'static str = "acc-order";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("charge", |_| async { Ok::<_, String>(1u32) })
            .await?;
        let first = ctx.patched("receipt");
        if first {
            counted(&ctx, "email").await?;
        }
        let to: String = ctx.wait_for_signal("ship").await?;
        let second = ctx.patched("receipt");
        if second {
            counted(&ctx, "sms").await?;
        }
        ctx.step("done", |_| async { Ok::<_, String>(()) }).await?;
        Ok(format!("shipped to {to} first={first} second={second}"))
    }
}

fn markers(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Patched { id } if id == "receipt"))
        .count()
}

/// README: "A second `patched` call with the same id in one execution returns the
/// first answer", and `patched` is "false for a run whose log has another call at
/// that position (it was recorded before the patch)". A run waiting when the
/// patch is deployed answers false first; after its signal, the second call with
/// the same id (past its recorded calls, where a new run would record a marker)
/// still answers false, and no marker and no patched step appear in its log. A
/// new run answers true twice. Both replay to the same answers after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_patched_call_keeps_the_first_answer_past_the_recorded_calls() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Order).await?;
    let old = host.start::<Order>("acc-order-old", ()).await?;
    within(LIMIT, "the old run to wait", old.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), OrderPatched).await?;
    let old = host.handle::<OrderPatched>("acc-order-old");
    let new = host.start::<OrderPatched>("acc-order-new", ()).await?;
    within(LIMIT, "the new run to wait", new.wait_until_suspended()).await??;
    old.signal("ship", "ann", "s-1").await?;
    new.signal("ship", "bob", "s-1").await?;
    let old_out = within(LIMIT, "old", old.result()).await?;
    let new_out = within(LIMIT, "new", new.result()).await?;
    let old_events = old.events().await?;
    host.shutdown().await?;

    assert_eq!(
        old_out?, "shipped to ann first=false second=false",
        "log: {old_events:?}"
    );
    assert_eq!(markers(&old_events), 0, "{old_events:?}");
    assert_eq!(patched_steps("acc-order-old"), 0);
    assert_eq!(new_out?, "shipped to bob first=true second=true");
    assert_eq!(patched_steps("acc-order-new"), 2);

    // The saved logs replay to the same answers against the patched code.
    assert_eq!(
        reel::testing::replay(OrderPatched, &old_events).await?,
        reel::testing::Replayed::Completed("shipped to ann first=false second=false".into())
    );
    Ok(())
}

/// Before the patch: two joined steps, then a wait.
struct Joined;
impl Workflow for Joined {
    const NAME: &'static str = "acc-joined";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        // Each branch calls its step when first polled, in branch order.
        let (a, b) = futures::join!(
            async { ctx.step("a", |_| async { Ok::<_, String>(1u32) }).await },
            async { ctx.step("b", |_| async { Ok::<_, String>(2u32) }).await },
        );
        let () = ctx.wait_for_signal("go").await?;
        Ok(format!("{} {}", a?, b?))
    }
}

/// The patch asked inside the first branch of the join.
struct JoinedPatched;
impl Workflow for JoinedPatched {
    const NAME: &'static str = "acc-joined";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let (a, b): (reel::Result<(bool, u32)>, reel::Result<u32>) = futures::join!(
            async {
                let p = ctx.patched("extra");
                if p {
                    counted(&ctx, "extra").await?;
                }
                let a = ctx.step("a", |_| async { Ok::<_, String>(1u32) }).await?;
                reel::Result::Ok((p, a))
            },
            async { ctx.step("b", |_| async { Ok::<_, String>(2u32) }).await },
        );
        let (p, a) = a?;
        let () = ctx.wait_for_signal("go").await?;
        Ok(format!("{} {} patched={p}", a, b?))
    }
}

/// README: the patch's answer "is the same live, on replay, in
/// `reel::testing::replay` and under `join!`/`select!`". A run recorded by the
/// code before the patch answers false inside a `join!` branch; a new run answers
/// true, runs the patched step once and keeps the answer after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patched_inside_a_join_answers_by_the_log_live_and_after_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Joined).await?;
    let old = host.start::<Joined>("acc-joined-old", ()).await?;
    within(LIMIT, "old waits", old.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), JoinedPatched).await?;
    let new = host.start::<JoinedPatched>("acc-joined-new", ()).await?;
    within(LIMIT, "new waits", new.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), JoinedPatched).await?;
    let old = host.handle::<JoinedPatched>("acc-joined-old");
    let new = host.handle::<JoinedPatched>("acc-joined-new");
    old.signal("go", &(), "go-1").await?;
    new.signal("go", &(), "go-1").await?;
    let old_out = within(LIMIT, "old", old.result()).await?;
    let new_out = within(LIMIT, "new", new.result()).await?;
    let new_events = new.events().await?;
    host.shutdown().await?;
    assert_eq!(old_out?, "1 2 patched=false");
    assert_eq!(new_out?, "1 2 patched=true");
    assert_eq!(patched_steps("acc-joined-old"), 0);
    assert_eq!(patched_steps("acc-joined-new"), 1);
    assert_eq!(markers_of(&new_events, "extra"), 1, "{new_events:?}");
    Ok(())
}

fn markers_of(events: &[Event], id: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Patched { id: p } if p == id))
        .count()
}

/// Version 1 of a long-lived workflow that moves itself onto version 2 at its
/// segment boundary.
struct LongV1;
impl Workflow for LongV1 {
    const NAME: &'static str = "acc-long";
    const VERSION: u32 = 1;
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let () = ctx.wait_for_signal("next").await?;
        ctx.continue_as_new::<LongV2>(n + 1).await
    }
}

/// Version 2: waits for `go` and answers.
struct LongV2;
impl Workflow for LongV2 {
    const NAME: &'static str = "acc-long";
    const VERSION: u32 = 2;
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let go: String = ctx.wait_for_signal("go").await?;
        Ok(format!("v2 {n} {go}"))
    }
}

/// README, "Long-lived runs": "`W` is the run's own workflow, at any registered
/// version, so a long-lived run can move to new code at a segment boundary". A v1
/// run that continued as new onto v2 is a v2 run: `info()` and `runs()` say
/// version 2, a signal sent before the hop to a name the new segment waits on
/// carries over, and a host with only v2 registered finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_moved_to_v2_by_continue_as_new_runs_on_a_v2_only_host() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(LongV1)
        .register(LongV2)
        .build()
        .await?;
    let run = host.start::<LongV1>("acc-long", 1).await?;
    within(LIMIT, "v1 waits", run.wait_until_suspended()).await??;
    run.signal("go", "carried", "go-1").await?;
    run.signal("next", &(), "next-1").await?;
    within(LIMIT, "the v2 segment", async {
        loop {
            let info = run.info().await?;
            if info.segment == 1 && matches!(info.status, RunStatus::Completed) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await??;
    let info = run.info().await?;
    assert_eq!((info.version, info.segment), (2, 1));
    assert_eq!(
        within(LIMIT, "result", host.handle::<LongV2>("acc-long").result()).await??,
        "v2 2 carried"
    );
    let listed = host
        .runs()
        .await?
        .into_iter()
        .find(|r| r.run_id == "acc-long")
        .map(|r| r.version);
    assert_eq!(listed, Some(2));
    host.shutdown().await?;
    Ok(())
}

/// Like the test above, but the v2 segment waits when the host restarts with v2
/// only: it resumes there (its version is v2 now) and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hopped_run_waiting_on_v2_resumes_on_a_v2_only_host() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(LongV1)
        .register(LongV2)
        .build()
        .await?;
    let run = host.start::<LongV1>("acc-long-2", 1).await?;
    within(LIMIT, "v1 waits", run.wait_until_suspended()).await??;
    run.signal("next", &(), "next-1").await?;
    within(LIMIT, "the v2 segment waits", async {
        loop {
            let info = run.info().await?;
            if info.segment == 1 && matches!(info.status, RunStatus::Suspended { .. }) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), LongV2).await?;
    let run = host.handle::<LongV2>("acc-long-2");
    run.signal("go", "later", "go-1").await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, "v2 2 later");
    host.shutdown().await?;
    Ok(())
}
