//! Acceptance, ported from peers' own test suites: child runs (a child that
//! catches its cancel and returns a value, a signal sent to a child the parent
//! waits on, a child whose id or workflow changed in new code), and cancels and
//! signals across continue-as-new. Each test names the peer test it ports.

mod common;

use std::pin::pin;
use std::time::Duration;

use common::{until_log, waits_on, within};
use futures::future::{Either, select};
use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

async fn until_status(
    host: &Host,
    id: &str,
    what: &str,
    done: impl Fn(&RunStatus) -> bool,
) -> anyhow::Result<RunStatus> {
    within(LIMIT, what, async {
        loop {
            if let Ok(s) = host.run(id).status().await
                && done(&s)
            {
                return anyhow::Ok(s);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?
}

fn run_starts(events: &[Event]) -> Vec<usize> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::RunStarted { .. }))
        .map(|(i, _)| i)
        .collect()
}

// ---------------------------------------------------------------------------
// A child that catches its cancel and returns a value.
// ---------------------------------------------------------------------------

/// Waits for a signal that never comes, or for its cancel, whose reason it returns.
struct Stubborn;
impl Workflow for Stubborn {
    const NAME: &'static str = "stubborn";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let never = ctx.wait_for_signal::<String>("never");
        let cancelled = ctx.cancelled();
        match select(pin!(cancelled), pin!(never)).await {
            Either::Left((reason, _)) => Ok(format!("caught: {reason}")),
            Either::Right((v, _)) => Ok(format!("signal: {}", v?)),
        }
    }
}

/// Waits on its child `<me>/kid` and reports what the wait gave.
struct Guardian;
impl Workflow for Guardian {
    const NAME: &'static str = "guardian";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let kid = format!("{}/kid", ctx.run_id());
        match ctx.child::<Stubborn>(&kid, ()).await {
            Ok(v) => Ok(format!("ok:{v}")),
            Err(e) => Ok(format!("child_err:{e}")),
        }
    }
}

async fn open_guardians(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Guardian)
        .register(Stubborn)
        .build()
        .await
}

/// Ports Temporal sdk-core `crates/sdk-core/tests/integ_tests/workflow_tests/child_workflows.rs::cancelled_child_gets_reason`
/// (and duroxide `tests/cancellation_tests.rs::cancel_child_directly_signals_parent`):
/// a child cancelled directly sees the reason through `ctx.cancelled()` and
/// returns a value, so it completes (README: "a value completes it"), and its
/// waiting parent gets that value, not an error; also after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_catches_its_cancel_hands_its_value_to_the_parent() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open_guardians(dir.path()).await?;
    let parent = host.start::<Guardian>("g1", ()).await?;
    until_status(&host, "g1/kid", "the kid waiting", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await?;
    within(
        LIMIT,
        "the kid's cancel",
        host.run("g1/kid").cancel("Die reason"),
    )
    .await??;
    let kid = host.handle::<Stubborn>("g1/kid");
    assert_eq!(kid.status().await?, RunStatus::Completed);
    assert_eq!(kid.result().await?, "caught: Die reason");
    let out = within(LIMIT, "the parent's result", parent.result()).await??;
    assert_eq!(out, "ok:caught: Die reason");
    host.shutdown().await?;

    let host = open_guardians(dir.path()).await?;
    assert_eq!(host.handle::<Guardian>("g1").result().await?, out);
    host.shutdown().await?;
    Ok(())
}

/// Ports Temporal sdk-core `child_workflows.rs::abandoned_child_bug_repro` (cancel
/// the parent, then the child, with no failure anywhere) with the child of
/// `cancelled_child_gets_reason`: the parent's cancel reaches the child in the
/// README's words ("parent cancelled: …"), the child catches it and completes;
/// the parent's own wait ends `Cancelled` and, as its handler returns a value, the
/// parent completes with it. A later cancel of the ended child changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parents_cancel_reaches_a_child_that_catches_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open_guardians(dir.path()).await?;
    let parent = host.start::<Guardian>("g2", ()).await?;
    until_status(&host, "g2/kid", "the kid waiting", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await?;
    within(LIMIT, "the parent's cancel", parent.cancel("die")).await??;
    let out = within(LIMIT, "the parent's result", parent.result()).await??;
    assert_eq!(out, "child_err:cancelled: die");
    let kid = host.handle::<Stubborn>("g2/kid");
    let kid_out = within(LIMIT, "the kid's result", kid.result()).await??;
    assert_eq!(kid_out, "caught: parent cancelled: die");

    // Cancelling the ended child too: a no-op or a typed refusal, never a change.
    let again = within(LIMIT, "the second cancel", kid.cancel("die")).await?;
    assert!(
        matches!(
            again,
            Ok(()) | Err(Error::RunFinished(_)) | Err(Error::InvalidState { .. })
        ),
        "{again:?}"
    );
    assert_eq!(kid.status().await?, RunStatus::Completed);
    assert_eq!(kid.result().await?, kid_out);
    assert_eq!(parent.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A signal sent by the parent to the child it waits on.
// ---------------------------------------------------------------------------

/// Returns the payload of its first `hi` signal.
struct Echo;
impl Workflow for Echo {
    const NAME: &'static str = "echo";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.wait_for_signal("hi").await
    }
}

/// Calls its child, signals it before awaiting it, then awaits it.
struct Caller;
impl Workflow for Caller {
    const NAME: &'static str = "caller";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let kid_id = format!("{}/echo", ctx.run_id());
        let kid = ctx.child::<Echo>(&kid_id, ());
        ctx.signal(&kid_id, "hi", "from parent", "hi-1").await?;
        kid.await
    }
}

/// Starts its child detached, signals it, then waits for it with `ctx.child`.
struct DetachedCaller;
impl Workflow for DetachedCaller {
    const NAME: &'static str = "detached-caller";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let kid_id = format!("{}/echo", ctx.run_id());
        ctx.start_child::<Echo>(&kid_id, ()).await?;
        ctx.signal(&kid_id, "hi", "from parent", "hi-1").await?;
        ctx.child::<Echo>(&kid_id, ()).await
    }
}

async fn open_callers(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Caller)
        .register(DetachedCaller)
        .register(Echo)
        .build()
        .await
}

fn signals_received(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::SignalReceived { .. }))
        .count()
}

/// Ports Temporal sdk-core `child_workflows.rs::signal_child_workflow` (and
/// `signals.rs::sends_signal_to_child`), with a detached child: the parent starts
/// it (`start_child` returns once it exists), signals it and waits for its
/// result, the signal's payload; after a restart the result and the single
/// delivery stand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_signals_the_detached_child_it_then_waits_on() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open_callers(dir.path()).await?;
    let run = host.start::<DetachedCaller>("c2", ()).await?;
    assert_eq!(
        within(LIMIT, "the parent", run.result()).await??,
        "from parent"
    );
    host.shutdown().await?;
    let host = open_callers(dir.path()).await?;
    assert_eq!(signals_received(&host.run("c2/echo").events().await?), 1);
    let run = host.handle::<DetachedCaller>("c2");
    assert_eq!(run.result().await?, "from parent");
    host.shutdown().await?;
    Ok(())
}

/// Ports Temporal sdk-core `child_workflows.rs::signal_child_workflow` with an
/// attached child: the parent calls `ctx.child` (README: "The child starts even if
/// the future is never awaited"), signals the child, then awaits the call. The
/// log holds `ChildStarted` before the send, so the send must find the child:
/// the child's start runs in a task of its own, and the send's step body waits
/// for it (it used to be answered `UnknownRun`, recorded for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_signals_the_attached_child_it_called() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open_callers(dir.path()).await?;
    let run = host.start::<Caller>("c1", ()).await?;
    assert_eq!(
        within(LIMIT, "the parent", run.result()).await??,
        "from parent"
    );
    host.shutdown().await?;
    let host = open_callers(dir.path()).await?;
    assert_eq!(signals_received(&host.run("c1/echo").events().await?), 1);
    assert_eq!(host.handle::<Caller>("c1").result().await?, "from parent");
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// New code that calls another child id or another child workflow.
// ---------------------------------------------------------------------------

/// Doubles its input.
struct Double;
impl Workflow for Double {
    const NAME: &'static str = "double";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _ctx: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n * 2)
    }
}

/// Triples its input: another workflow, for the "type changed" deploy.
struct Triple;
impl Workflow for Triple {
    const NAME: &'static str = "triple";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _ctx: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n * 3)
    }
}

#[derive(Clone, Copy)]
enum Deploy {
    Original,
    OtherId,
    OtherWorkflow,
}

/// One definition (same name and version) in three deploys: calls child
/// `<me>/kid-1` of `double` (original), `<me>/kid-2` of `double`, or `<me>/kid-1`
/// of `triple`; then waits for `go`.
struct Picker(Deploy);
impl Workflow for Picker {
    const NAME: &'static str = "picker";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let me = ctx.run_id().to_string();
        let v = match self.0 {
            Deploy::Original => ctx.child::<Double>(&format!("{me}/kid-1"), 5).await?,
            Deploy::OtherId => ctx.child::<Double>(&format!("{me}/kid-2"), 5).await?,
            Deploy::OtherWorkflow => ctx.child::<Triple>(&format!("{me}/kid-1"), 5).await?,
        };
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(v + go)
    }
}

async fn open_picker(dir: &std::path::Path, deploy: Deploy) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Picker(deploy))
        .register(Double)
        .register(Triple)
        .build()
        .await
}

/// Ports Temporal sdk-core `crates/sdk-core/tests/integ_tests/workflow_tests/determinism.rs::child_wf_id_or_type_change_is_nondeterministic`
/// (both cases): code deployed under a waiting run that calls its recorded child
/// with another id, or the same id with another workflow, parks the run with a
/// `ReplayDivergence` when it wakes, starts no child, and the run completes once
/// the original code is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_whose_id_or_workflow_changed_is_a_divergence() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open_picker(dir.path(), Deploy::Original).await?;
    let run = host.start::<Picker>("pick", ()).await?;
    until_log(&run, LIMIT, "the wait on go", |e| waits_on(e, "go") == 1).await?;
    host.shutdown().await?;

    for (deploy, what) in [(Deploy::OtherId, "id"), (Deploy::OtherWorkflow, "workflow")] {
        let host = open_picker(dir.path(), deploy).await?;
        let run = host.handle::<Picker>("pick");
        // The signal wakes the run, whose replay meets the changed call.
        let _ = run.signal("go", &1u32, "go-1").await;
        let status = until_status(&host, "pick", "the run parked", |s| {
            matches!(s, RunStatus::Parked { .. })
        })
        .await
        .map_err(|e| anyhow::anyhow!("child {what} changed: {e}"))?;
        let RunStatus::Parked { error } = &status else {
            unreachable!()
        };
        assert!(error.contains("diverged"), "child {what} changed: {error}");
        let r = run.result().await;
        assert!(
            matches!(r, Err(Error::ReplayDivergence { .. })),
            "child {what} changed: {r:?}"
        );
        let kid2 = host.run("pick/kid-2").status().await;
        assert!(
            matches!(kid2, Err(Error::UnknownRun(_))),
            "child {what} changed: a new child was started: {kid2:?}"
        );
        host.shutdown().await?;
    }

    let host = open_picker(dir.path(), Deploy::Original).await?;
    let run = host.handle::<Picker>("pick");
    let _ = run.signal("go", &1u32, "go-1").await;
    assert_eq!(within(LIMIT, "the result", run.result()).await??, 11);
    let kid = host.run("pick/kid-1").info().await?;
    assert_eq!(kid.workflow, "double");
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Continue-as-new: signals and cancels reach the latest segment.
// ---------------------------------------------------------------------------

/// Continues as new with `n + 1` until `n` is 2, then waits for `Go`.
struct Hopper;
impl Workflow for Hopper {
    const NAME: &'static str = "hopper";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        if n < 2 {
            return ctx.continue_as_new::<Hopper>(n + 1).await;
        }
        let go: String = ctx.wait_for_signal("Go").await?;
        Ok(format!("done:{n}:{go}"))
    }
}

/// Ports duroxide `tests/continue_as_new_tests.rs::continue_as_new_event_routes_to_latest`
/// and `continue_as_new_without_await`: a run that continues as new twice at once
/// (three segments, the input counting up) and then waits; a signal sent then
/// lands in the last segment and completes it; a restart in between changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_after_two_hops_lands_in_the_last_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Hopper).await?;
    let run = host.start::<Hopper>("hop", 0).await?;
    until_log(&run, LIMIT, "the wait on Go", |e| waits_on(e, "Go") == 1).await?;
    host.shutdown().await?;
    let host = common::hosts::open(dir.path(), Hopper).await?;
    let run = host.handle::<Hopper>("hop");
    assert_eq!(run.info().await?.segment, 2);
    run.signal("Go", "ok", "go-1").await?;
    assert_eq!(
        within(LIMIT, "the result", run.result()).await??,
        "done:2:ok"
    );
    let events = run.events().await?;
    let starts = run_starts(&events);
    assert_eq!(starts.len(), 3, "{events:?}");
    let received = events
        .iter()
        .position(|e| matches!(e, Event::SignalReceived { .. }))
        .expect("the signal is in the log");
    assert!(
        received > starts[2],
        "the signal landed in an old segment: {events:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// Ports duroxide `tests/cancellation_tests.rs::cancel_continue_as_new_second_exec`:
/// a cancel sent while the run waits in a later segment ends the run cancelled
/// with its reason; the request is recorded in that segment only; `result()` and
/// `status()` agree, also after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_later_segment_ends_the_run_with_its_reason() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Hopper).await?;
    let run = host.start::<Hopper>("hop-cancel", 0).await?;
    until_log(&run, LIMIT, "the wait on Go", |e| waits_on(e, "Go") == 1).await?;
    within(LIMIT, "the cancel", run.cancel("by_test_can")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let r = run.result().await;
    assert_eq!(r, Err(Error::Cancelled("by_test_can".into())));
    let events = run.events().await?;
    let starts = run_starts(&events);
    let requests: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::CancelRequested { .. }))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(requests.len(), 1, "{events:?}");
    assert!(requests[0] > starts[2], "{events:?}");
    assert!(
        matches!(events.last(), Some(Event::RunCancelled { reason }) if reason == "by_test_can"),
        "{events:?}"
    );
    // A signal to the ended run is refused.
    let late = run.signal("Go", "late", "go-late").await;
    assert!(matches!(late, Err(Error::RunFinished(_))), "{late:?}");
    host.shutdown().await?;
    let host = common::hosts::open(dir.path(), Hopper).await?;
    let run = host.handle::<Hopper>("hop-cancel");
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert_eq!(
        run.result().await,
        Err(Error::Cancelled("by_test_can".into()))
    );
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A child of an earlier segment that ends after the hop.
// ---------------------------------------------------------------------------

static LATE_GATE: common::Gate = common::Gate::new();

/// Waits for `never`; when asked to cancel, runs a shielded step that holds until
/// the test opens `LATE_GATE`, then completes with a value.
struct SlowToCancel;
impl Workflow for SlowToCancel {
    const NAME: &'static str = "slow-to-cancel";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let never = ctx.wait_for_signal::<String>("never");
        let cancelled = ctx.cancelled();
        match select(pin!(cancelled), pin!(never)).await {
            Either::Left((reason, _)) => {
                ctx.shielded()
                    .step("cleanup", |_| async {
                        LATE_GATE.wait().await;
                        Ok::<_, String>(())
                    })
                    .await?;
                Ok(format!("late: {reason}"))
            }
            Either::Right((v, _)) => Ok(format!("signal: {}", v?)),
        }
    }
}

/// Segment 0 calls child `<me>/a` (`slow-to-cancel`), waits for `hop` and
/// continues as new. Segment 1 calls child `<me>/b` (`echo`), at the same
/// position, and returns its output.
struct Relay;
impl Workflow for Relay {
    const NAME: &'static str = "relay";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<String> {
        let me = ctx.run_id().to_string();
        if segment == 0 {
            let a = ctx.child::<SlowToCancel>(&format!("{me}/a"), ());
            let _: () = ctx.wait_for_signal("hop").await?;
            drop(a);
            return ctx.continue_as_new::<Relay>(1).await;
        }
        ctx.child::<Echo>(&format!("{me}/b"), ()).await
    }
}

/// Ports duroxide `tests/continue_as_new_tests.rs::old_execution_completions_are_ignored`:
/// a completion addressed to an earlier segment must not resolve anything in the
/// current one. Here the earlier segment's child (asked to cancel at the hop)
/// ends only after the new segment has called a child at the same position
/// (`child#1` in both): the new segment keeps waiting for its own child and gets
/// that child's output, also across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_end_of_an_earlier_segments_child_does_not_reach_the_new_segment()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = || async {
        Host::builder()
            .path(dir.path())
            .register(Relay)
            .register(SlowToCancel)
            .register(Echo)
            .build()
            .await
    };
    let host = open().await?;
    let run = host.start::<Relay>("relay", 0).await?;
    until_status(&host, "relay/a", "child a waiting", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await?;
    run.signal("hop", &(), "hop-1").await?;
    until_status(&host, "relay/b", "child b waiting", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await?;
    // Child a is still cleaning up; let it end now.
    let a = host.run("relay/a");
    assert!(
        matches!(
            a.status().await?,
            RunStatus::Running | RunStatus::Suspended { .. }
        ),
        "{:?}",
        a.status().await?
    );
    LATE_GATE.open();
    let a_out: String = within(LIMIT, "child a's end", a.result()).await??;
    assert!(a_out.starts_with("late: "), "{a_out}");
    // The relay must still wait for b.
    within(LIMIT, "the relay waiting", run.wait_until_suspended()).await??;
    let status = run.status().await?;
    assert!(
        matches!(status, RunStatus::Suspended { .. }),
        "child a's late end moved the new segment: {status:?}, {:?}",
        run.result().await
    );
    host.shutdown().await?;
    let host = open().await?;
    let run = host.handle::<Relay>("relay");
    host.run("relay/b").signal("hi", "from b", "hi-b").await?;
    assert_eq!(within(LIMIT, "the relay", run.result()).await??, "from b");
    let events = run.events().await?;
    let second = run_starts(&events)[1];
    let ends = events[second..]
        .iter()
        .filter(|e| matches!(e, Event::ChildCompleted { .. }))
        .count();
    assert_eq!(
        ends, 1,
        "the new segment got more than its child's end: {events:?}"
    );
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Forks of a run with a child and with published values (DBOS).
// ---------------------------------------------------------------------------

fn seq_of(records: &[reel::Record], f: impl Fn(&Event) -> bool) -> u64 {
    records
        .iter()
        .find(|r| f(&r.event))
        .map(|r| r.seq)
        .expect("no such record")
}

/// Counts its executions per child id.
struct CountedChild(common::Counter);
impl Workflow for CountedChild {
    const NAME: &'static str = "counted-child";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let n = ctx
            .step("count", |_| async { Ok::<_, String>(self.0.bump()) })
            .await?;
        Ok(format!("{}#{n}", ctx.run_id()))
    }
}

/// Step one, a child named after the run, step three.
struct StepsAndChild {
    one: common::Counter,
    three: common::Counter,
}
impl Workflow for StepsAndChild {
    const NAME: &'static str = "steps-and-child";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("one", |_| async { Ok::<_, String>(self.one.bump()) })
            .await?;
        let kid = ctx
            .child::<CountedChild>(&format!("{}/child", ctx.run_id()), ())
            .await?;
        ctx.step("three", |_| async { Ok::<_, String>(self.three.bump()) })
            .await?;
        Ok(kid)
    }
}

struct Counts {
    one: common::Counter,
    kids: common::Counter,
    three: common::Counter,
}

impl Counts {
    fn get(&self) -> (u32, u32, u32) {
        (self.one.get(), self.kids.get(), self.three.get())
    }
}

/// A host with `StepsAndChild` and `CountedChild`, and one completed run `wf`.
async fn forked_original(
    dir: &std::path::Path,
) -> anyhow::Result<(Host, Counts, Vec<reel::Record>)> {
    let c = Counts {
        one: common::Counter::default(),
        kids: common::Counter::default(),
        three: common::Counter::default(),
    };
    let host = Host::builder()
        .path(dir)
        .register(StepsAndChild {
            one: c.one.clone(),
            three: c.three.clone(),
        })
        .register(CountedChild(c.kids.clone()))
        .build()
        .await?;
    let run = host.start::<StepsAndChild>("wf", ()).await?;
    assert_eq!(within(LIMIT, "the run", run.result()).await??, "wf/child#1");
    assert_eq!(c.get(), (1, 1, 1));
    let records = run.records().await?;
    Ok((host, c, records))
}

/// Ports DBOS `tests/test_workflow_management.py::test_restart_fromsteps_childwf`
/// (its forks at step 2): forking a completed run before its child call re-runs
/// the child (under the fork's own child id, derived from `ctx.run_id()`) and the
/// later step, not the earlier step; a fork of that fork, before its child, works
/// alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_before_a_child_reruns_the_child_and_what_follows() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (host, c, records) = forked_original(dir.path()).await?;
    let before_child = seq_of(&records, |e| matches!(e, Event::ChildStarted { .. }));
    let f1 = host.fork("wf", before_child, "wf-f1").await?;
    let out: String = within(LIMIT, "fork 1", f1.result()).await??;
    assert_eq!(out, "wf-f1/child#2");
    assert_eq!(c.get(), (1, 2, 2));

    let f1_records = f1.records().await?;
    let f1_child = seq_of(&f1_records, |e| matches!(e, Event::ChildStarted { .. }));
    let f3 = host.fork("wf-f1", f1_child, "wf-f3").await?;
    let out: String = within(LIMIT, "fork of the fork", f3.result()).await??;
    assert_eq!(out, "wf-f3/child#3");
    assert_eq!(c.get(), (1, 3, 3));
    host.shutdown().await?;
    Ok(())
}

/// Ports DBOS `tests/test_workflow_management.py::test_restart_fromsteps_childwf`
/// (its fork at step 3): forking a completed run after its child ended should
/// replay the child's recorded output and re-run only the last step. With the
/// child id derived from `ctx.run_id()` (README's own pattern, `format!("{me}/a")`),
/// the fork's replay computes `wf-f2/child` where the log has `wf/child`, and the
/// fork is parked with a `ReplayDivergence` (Temporal's reset keeps the workflow
/// id, so such ids still match there; a fixed id would instead make a fork before
/// the child attach to the original's child rather than run its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "limitation, documented in README (Operating runs): a fork past a child whose id derives from ctx.run_id() replays as a divergence"]
async fn a_fork_after_a_child_replays_its_output_and_reruns_the_rest() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (host, c, records) = forked_original(dir.path()).await?;
    let before_three = seq_of(
        &records,
        |e| matches!(e, Event::StepStarted { id, .. } if id == "three"),
    );
    let f2 = host.fork("wf", before_three, "wf-f2").await?;
    let out: String = within(LIMIT, "fork 2", f2.result()).await??;
    assert_eq!(out, "wf/child#1", "the child's recorded output is replayed");
    assert_eq!(c.get(), (1, 1, 2));
    host.shutdown().await?;
    Ok(())
}

static FORK_GATE: common::Gate = common::Gate::new();

/// Step `a`, publish 0, step `b`, publish 1, step `c`, publish 2, then a wait
/// for `go`. The step bodies of forks (run ids other than `pub`) hold until the
/// test opens `FORK_GATE`, so a fork stops at its first new step, as DBOS's
/// test blocks its forks.
struct Publisher;
impl Workflow for Publisher {
    const NAME: &'static str = "publisher";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        for (name, value) in [("a", 0u32), ("b", 1), ("c", 2)] {
            ctx.step(name, |s| async move {
                if !s.idempotency_key().starts_with("pub/") {
                    FORK_GATE.wait().await;
                }
                Ok::<_, String>(())
            })
            .await?;
            ctx.publish("key", &value).await?;
        }
        let _: () = ctx.wait_for_signal("go").await?;
        Ok(2)
    }
}

/// Ports DBOS `tests/test_workflow_management.py::test_fork_events`: a fork of a
/// run that published values under a key reads, while it is held at its first
/// new step, the value the original had published before the cut (none before
/// the first publish); a fork of a fork too; once they run on, each ends with the
/// last value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_reads_the_values_published_before_its_cut() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Publisher).await?;
    let run = host.start::<Publisher>("pub", ()).await?;
    // Signalled once it waits, so that no cut copies the signal into a fork.
    within(LIMIT, "the wait on go", run.wait_until_suspended()).await??;
    run.signal("go", &(), "go-1").await?;
    assert_eq!(within(LIMIT, "the run", run.result()).await??, 2);
    assert_eq!(run.published::<u32>("key").await?, Some(2));
    let records = run.records().await?;
    let step = |name: &str| {
        seq_of(
            &records,
            |e| matches!(e, Event::StepStarted { id, .. } if id == name),
        )
    };
    let wait = seq_of(&records, |e| matches!(e, Event::SignalAwaited { .. }));
    // (cut, the value the fork reads while held)
    let cuts = [
        (step("a"), None),
        (step("b"), Some(0u32)),
        (step("c"), Some(1)),
        (wait, Some(2)),
    ];
    let mut forks = Vec::new();
    for (i, (cut, expected)) in cuts.into_iter().enumerate() {
        let id = format!("pub-f{i}");
        let fork = host.fork("pub", cut, &id).await?;
        assert_eq!(
            fork.published::<u32>("key").await?,
            expected,
            "fork at {cut} (cut {i}), at once"
        );
        // Once it has reached its held step (or its wait), the same.
        within(LIMIT, "the fork at its first new call", async {
            loop {
                let n = fork.records().await?.len() as u64;
                if n > cut {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await??;
        assert_eq!(
            fork.published::<u32>("key").await?,
            expected,
            "fork at {cut} (cut {i}), held"
        );
        forks.push(fork);
    }
    // A fork of the last fork, at the same cut.
    let f4 = host.fork("pub-f3", wait, "pub-f4").await?;
    assert_eq!(f4.published::<u32>("key").await?, Some(2));
    forks.push(f4);
    FORK_GATE.open();
    for fork in &forks {
        within(LIMIT, "the fork's wait", fork.wait_until_suspended()).await??;
        fork.signal("go", &(), "go-1").await?;
        let out: u32 = within(LIMIT, "a fork", fork.result()).await??;
        assert_eq!(out, 2);
        assert_eq!(
            fork.published::<u32>("key").await?,
            Some(2),
            "{}",
            fork.id()
        );
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A parent that waits for its child's cancellation to complete.
// ---------------------------------------------------------------------------

/// Waits on its child `<me>/kid` (`stubborn`); when asked to cancel, waits
/// again, shielded, on the same child id for the child's own end, and returns it.
struct PatientParent;
impl Workflow for PatientParent {
    const NAME: &'static str = "patient-parent";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let kid = format!("{}/kid", ctx.run_id());
        let wait = ctx.child::<Stubborn>(&kid, ());
        let cancelled = ctx.cancelled();
        match select(pin!(wait), pin!(cancelled)).await {
            Either::Left((v, _)) => Ok(format!("child ended first: {}", v?)),
            Either::Right((reason, _)) => {
                let end = ctx.shielded().child::<Stubborn>(&kid, ()).await;
                Ok(format!("{reason} / child: {end:?}"))
            }
        }
    }
}

/// Ports Temporal sdk-core `child_workflows.rs::cancel_child_workflow` with
/// `ChildWorkflowCancellationType::WaitCancellationCompleted` (and
/// `cancelled_child_gets_reason`): a parent asked to cancel waits, shielded, for
/// its child to finish its own cleanup, and gets the value the child returned
/// after catching "parent cancelled: …"; both complete, also as seen after a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_parent_waits_for_its_childs_cleanup_and_gets_its_value() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let open = || async {
        Host::builder()
            .path(dir.path())
            .register(PatientParent)
            .register(Stubborn)
            .build()
            .await
    };
    let host = open().await?;
    let parent = host.start::<PatientParent>("pp", ()).await?;
    until_status(&host, "pp/kid", "the kid waiting", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await?;
    within(LIMIT, "the cancel", parent.cancel("die")).await??;
    let out = within(LIMIT, "the parent", parent.result()).await??;
    assert_eq!(out, "die / child: Ok(\"caught: parent cancelled: die\")");
    assert_eq!(parent.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    let host = open().await?;
    assert_eq!(host.handle::<PatientParent>("pp").result().await?, out);
    assert_eq!(
        host.handle::<Stubborn>("pp/kid").result().await?,
        "caught: parent cancelled: die"
    );
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Wake-ups that carry no start keep the run on its recorded version.
// ---------------------------------------------------------------------------

/// Version 1: a step that fails its first attempt, then waits on child
/// `<me>/kid` (`echo`).
struct PrunerV1;
impl Workflow for PrunerV1 {
    const NAME: &'static str = "system-pruner";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let pruned = ctx
            .step("system-prune", |s| async move {
                if s.attempt() == 1 {
                    Err("transient".to_string())
                } else {
                    Ok(format!("pruned@{}", s.attempt()))
                }
            })
            .await?;
        let kid = ctx
            .child::<Echo>(&format!("{}/kid", ctx.run_id()), ())
            .await?;
        Ok(format!("v1:{pruned}:{kid}"))
    }
}

/// Version 2: other calls entirely, which a v1 log does not match.
struct PrunerV2;
impl Workflow for PrunerV2 {
    const NAME: &'static str = "system-pruner";
    const VERSION: u32 = 2;
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let pruned = ctx
            .step("system-prune-2", |_| async {
                Ok::<_, String>("v2".to_string())
            })
            .await?;
        Ok(format!("v2:{pruned}"))
    }
}

/// Ports duroxide `tests/scenarios/version_replay_bug.rs::e2e_replay_completion_only_must_use_version_from_history`:
/// a v1 run woken, after a restart onto a host with v1 and v2, by something
/// that is not its start (here its step's retry timer, then its child's end)
/// replays on v1, never on the newest version, and completes on v1's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_after_a_deploy_of_v2_keep_a_v1_run_on_v1() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock =
        reel::testing::TestClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .register(PrunerV1)
        .register(Echo)
        .build()
        .await?;
    let run = host.start::<PrunerV1>("pruner", ()).await?;
    // The first attempt failed; the run waits on its retry timer.
    within(LIMIT, "the retry backoff", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let open_both = || async {
        Host::builder()
            .path(dir.path())
            .clock(clock.clone())
            .register(PrunerV1)
            .register(PrunerV2)
            .register(Echo)
            .build()
            .await
    };
    let host = open_both().await?;
    clock.advance(Duration::from_secs(1));
    until_status(&host, "pruner/kid", "the child waiting", |s| {
        matches!(s, RunStatus::Suspended { .. })
    })
    .await?;
    host.shutdown().await?;

    let host = open_both().await?;
    host.run("pruner/kid").signal("hi", "done", "hi-1").await?;
    let run = host.handle::<PrunerV1>("pruner");
    assert_eq!(
        within(LIMIT, "the result", run.result()).await??,
        "v1:pruned@2:done"
    );
    assert_eq!(run.info().await?.version, 1);
    host.shutdown().await?;
    Ok(())
}
