//! Cancels racing a `select!`, a segment switch being written, a pause, and a
//! parent's children in every state.

use crate::*;

// A signal and a cancel racing a select!.

/// Waits for `go` against a one-hour sleep; says which ended the wait: the
/// signal, the timer, or the cancel (then it completes all the same).
struct Racer;

impl Workflow for Racer {
    const NAME: &'static str = "racer";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let go = ctx.wait_for_signal::<u32>("go");
        let nap = ctx.sleep(HOUR);
        let said = tokio::select! {
            biased;
            r = go => r.map(|v| format!("signal {v}")),
            r = nap => r.map(|()| "timer".to_string()),
        };
        match said {
            Err(Error::Cancelled(why)) => Ok(format!("cancelled {why}")),
            other => other,
        }
    }
}

/// Ports Temporal sdk-core `tests/integ_tests/workflow_tests/cancel_wf.rs`
/// `cancel_during_timer` (a `select!` between a long timer and the cancel),
/// with a signal sent at the same moment as the cancel. Whichever of the two
/// the log holds first decides the `select!`, once: the signal first completes
/// the run with it; the cancel first ends the wait with `Cancelled` (and the
/// handler completes saying so). A signal acknowledged `Ok` is in the log; one
/// refused is refused because the run had ended. The timer never fires, a
/// replay of the saved log (`reel::testing::replay`) and a host reopening the
/// store give the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_and_a_cancel_racing_a_select_are_decided_in_log_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, Racer).await?;
    let mut seen = BTreeMap::new();
    for i in 0..16u32 {
        let id = format!("racer-{i}");
        let run = host.start::<Racer>(&id, ()).await?;
        within(LIMIT, "the wait", run.wait_until_suspended()).await??;
        let sig_id = format!("go-{i}");
        let (signalled, cancelled) = if i % 2 == 0 {
            tokio::join!(run.signal("go", &i, &sig_id), run.request_cancel("stop"))
        } else {
            let (c, s) = tokio::join!(run.request_cancel("stop"), run.signal("go", &i, &sig_id));
            (s, c)
        };
        let out = within(LIMIT, "the result", run.result()).await??;
        let events = run.events().await?;
        let signal_at = position(
            &events,
            |e| matches!(e, Event::SignalReceived { signal_id, .. } if *signal_id == sig_id),
        );
        let cancel_at = position(&events, |e| matches!(e, Event::CancelRequested { .. }));
        match &signalled {
            Ok(()) => assert!(
                signal_at.is_some(),
                "{id}: an acknowledged signal is lost: {events:?}"
            ),
            Err(Error::RunFinished(_)) => assert!(cancel_at.is_some(), "{id}: {events:?}"),
            Err(e) => panic!("{id}: signal: {e:?}"),
        }
        match &cancelled {
            Ok(()) => assert!(
                cancel_at.is_some(),
                "{id}: an acknowledged cancel is lost: {events:?}"
            ),
            Err(Error::RunFinished(_)) => assert!(signal_at.is_some(), "{id}: {events:?}"),
            Err(e) => panic!("{id}: cancel: {e:?}"),
        }
        let signal_first = match (signal_at, cancel_at) {
            (Some(s), Some(c)) => s < c,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => panic!("{id}: neither landed: {events:?}"),
        };
        let expected = match signal_first {
            true => format!("signal {i}"),
            false => "cancelled stop".to_string(),
        };
        assert_eq!(out, expected, "{id}: {events:?}");
        assert_eq!(run.status().await?, RunStatus::Completed);
        assert!(
            matches!(events.last(), Some(Event::RunCompleted { .. })),
            "{id}: {events:?}"
        );
        assert_eq!(count(&events, Event::is_terminal), 1, "{id}: {events:?}");
        assert_eq!(
            count(&events, |e| matches!(e, Event::TimerFired { .. })),
            0,
            "{id}: {events:?}"
        );
        let replayed = reel::testing::replay(Racer, &events).await?;
        assert_eq!(replayed, Replayed::Completed(expected.clone()), "{id}");
        seen.insert(id, (expected, events));
    }
    host.shutdown().await?;

    let host = common::hosts::open_on(dir.path(), &clock, Racer).await?;
    for (id, (expected, events)) in &seen {
        let run = host.handle::<Racer>(id);
        assert_eq!(&within(LIMIT, "the result", run.result()).await??, expected);
        assert_eq!(&run.events().await?, events, "{id}");
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A cancel landing while the segment switch is written.

/// Segment 0 runs step `work` and continues as new; segment 1 runs step `work`
/// (whose gate the tests never open) and returns its value.
#[derive(Clone)]
struct Hopper {
    first: Probe,
    second: Probe,
}

impl Workflow for Hopper {
    const NAME: &'static str = "hopper";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        if segment == 0 {
            ctx.step("work", |_| self.first.body(10)).await?;
            return ctx.continue_as_new::<Hopper>(1).await;
        }
        ctx.step("work", |_| self.second.body(20)).await
    }
}

/// One round of [`a_cancel_landing_while_the_segment_switch_is_written_ends_the_last_segment`]:
/// the answer of the `skip`-th write after segment 0's body started is held
/// (0: the step's result; 1: the switch to segment 1), and the cancel (a
/// terminate if `hard`) and three `result()` callers arrive while it is held.
async fn cancel_at_held_write(skip: u64, hard: bool) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let wf = Hopper {
        first: Probe::new(),
        second: Probe::new(),
    };
    let host = Host::builder()
        .store(faults.clone())
        .register(wf.clone())
        .build()
        .await?;
    let run = host.start::<Hopper>("hop", 0).await?;
    until("segment 0's body", || wf.first.started.get() == 1).await?;
    let (hold, gate) = Fault::hold(Op::Submit);
    faults.inject(hold.for_run("hop").after(skip));
    wf.first.release.open();
    within(LIMIT, "the held write", gate.wait_arrived()).await?;

    // The held write has landed; only its answer waits.
    let landed = run.events().await?;
    match skip {
        0 => assert_eq!(
            (completed(&landed, "work"), hops(&landed)),
            (1, 0),
            "{landed:?}"
        ),
        _ => assert_eq!(
            (completed(&landed, "work"), hops(&landed)),
            (1, 1),
            "{landed:?}"
        ),
    }
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let r = run.clone();
            tokio::spawn(async move { r.result().await })
        })
        .collect();
    let canceller = {
        let r = run.clone();
        tokio::spawn(async move {
            match hard {
                true => r.terminate("stop").await,
                false => r.cancel("stop").await,
            }
        })
    };
    // Let the cancel and the callers reach the host while the answer is held
    // (which of them the run takes before the answer is the race under test).
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(gate.arrived(), 1, "skip {skip}: another write was held");
    gate.release();

    within(LIMIT, "the cancel", canceller).await???;
    for w in waiters {
        let out = within(LIMIT, "a result() caller", w).await??;
        assert!(is_cancelled(&out, "stop"), "skip {skip}: {out:?}");
    }
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let events = run.events().await?;
    ends_cancelled(&events, "stop");
    // The request is after the write that was held: it did not overtake it.
    let cancel_at = position(&events, |e| matches!(e, Event::CancelRequested { .. }));
    let held_at = match skip {
        0 => position(&events, |e| matches!(e, Event::StepCompleted { .. })),
        _ => position(&events, |e| matches!(e, Event::ContinuedAsNew { .. })),
    };
    assert!(
        cancel_at.is_some() && held_at.is_some() && cancel_at > held_at,
        "skip {skip}: {events:?}"
    );
    assert!(hops(&events) <= 1, "{events:?}");
    if skip == 1 {
        assert_eq!(hops(&events), 1, "{events:?}");
        assert_eq!(run.info().await?.segment, 1);
    }
    // Segment 0's step ran and was recorded once; segment 1's never completed.
    assert_eq!(completed(&events, "work"), 1, "{events:?}");
    assert_eq!(wf.first.started.get(), 1);
    assert!(wf.second.started.get() <= 1);
    assert_eq!(wf.second.finished.get(), 0);
    host.shutdown().await?;
    Ok(())
}

/// Ports duroxide `tests/cancellation_tests.rs` `cancel_continue_as_new_second_exec`
/// (a cancel reaching a run that continued as new ends the new execution, and
/// the client's wait, begun before, reports the cancel). Here the cancel lands
/// exactly while a write's answer is held by the store: the write of segment
/// 0's step result (before the switch) and the write of the switch itself
/// (after the new segment is written). Either way the request is recorded after
/// the held write, the run ends `Cancelled` in its last segment, the
/// `result()` callers that began before get the cancel, and no step body runs
/// twice or completes in the segment the cancel ended. The same holds for a
/// terminate (Temporal's terminate of a run that is continuing as new).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_landing_while_the_segment_switch_is_written_ends_the_last_segment()
-> anyhow::Result<()> {
    for hard in [false, true] {
        cancel_at_held_write(0, hard).await?;
        cancel_at_held_write(1, hard).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// A run paused at its segment switch, cancelled.

/// Segment 0: a step whose body waits for the test's gate, then continues as
/// new. Segment 1: a wait for `go`.
#[derive(Clone)]
struct Slow {
    probe: Probe,
}

impl Workflow for Slow {
    const NAME: &'static str = "slow";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        if segment == 0 {
            let v = ctx.step("slow", |_| self.probe.body(5)).await?;
            return ctx.continue_as_new::<Slow>(v).await;
        }
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(segment + go)
    }
}

/// Ports DBOS `tests/test_workflow_management.py` `test_cancel_resume` (a
/// workflow blocked in a step is cancelled; the step that ran is not run
/// again; DBOS's `resume` then restarts it) onto a run paused at its segment
/// switch: paused while its step body runs, the body finishes and its result
/// is recorded, and the handler stops short of continuing as new; a signal for
/// the next segment arrives and is kept. The cancel ends the paused run at
/// once, `Cancelled("stop")`, with no switch in its log; nothing runs again
/// after a restart; and (unlike DBOS) `resume` and `retry` of the cancelled run
/// are `InvalidState`, a signal to it is `RunFinished`, another cancel changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_at_its_switch_ends_cancelled_and_nothing_runs_again() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let wf = Slow {
        probe: Probe::new(),
    };
    let host = common::hosts::open(dir.path(), wf.clone()).await?;
    let run = host.start::<Slow>("slow", 0).await?;
    until("the body to start", || wf.probe.started.get() == 1).await?;
    run.pause().await?;
    assert_eq!(run.status().await?, RunStatus::Paused);
    wf.probe.release.open();
    common::until_log(&run, LIMIT, "the step's result", |e| {
        completed(e, "slow") == 1
    })
    .await?;
    run.signal("go", &1u32, "go-1").await?;
    assert_eq!(run.status().await?, RunStatus::Paused);

    within(LIMIT, "the cancel of the paused run", run.cancel("stop")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let out = within(LIMIT, "the result", run.result()).await?;
    assert!(is_cancelled(&out, "stop"), "{out:?}");
    let events = run.events().await?;
    ends_cancelled(&events, "stop");
    assert_eq!(
        hops(&events),
        0,
        "the paused run continued as new: {events:?}"
    );
    assert_eq!(completed(&events, "slow"), 1, "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::SignalReceived { .. })),
        "{events:?}"
    );
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), wf.clone()).await?;
    let run = host.handle::<Slow>("slow");
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert_eq!(run.events().await?, events, "the log changed after the end");
    for (what, refused) in [("resume", run.resume().await), ("retry", run.retry().await)] {
        assert!(
            matches!(refused, Err(Error::InvalidState { .. })),
            "{what} of a cancelled run: {refused:?}"
        );
    }
    let signalled = run.signal("go", &2u32, "go-2").await;
    assert!(
        matches!(signalled, Err(Error::RunFinished(_))),
        "{signalled:?}"
    );
    within(LIMIT, "a second cancel", run.cancel("again")).await??;
    assert_eq!(run.events().await?, events);
    assert_eq!((wf.probe.started.get(), wf.probe.finished.get()), (1, 1));
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A parent cancelled with children in every state.

/// Waits on a completed child and a failed one, starts a detached child, then
/// joins children that wait, are paused, run a step, back off between
/// attempts and sleep; completes with what each joined wait gave.
struct Boss;

fn said(r: reel::Result<u32>) -> String {
    match r {
        Ok(v) => format!("ok {v}"),
        Err(Error::Cancelled(why)) => format!("cancelled {why}"),
        Err(e) => format!("error {e}"),
    }
}

impl Workflow for Boss {
    const NAME: &'static str = "boss";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let id = ctx.run_id().to_string();
        let kid = |name: &str| format!("{id}/{name}");
        let done = ctx.child::<Kid>(&kid("done"), Mode::Done).await?;
        let failed = ctx.child::<Kid>(&kid("fail"), Mode::Fail).await;
        ctx.start_child::<Kid>(&kid("detached"), Mode::Wait).await?;
        let (w, p, b, r, n) = futures::join!(
            ctx.child::<Kid>(&kid("wait"), Mode::Wait),
            ctx.child::<Kid>(&kid("paused"), Mode::Wait),
            ctx.child::<Kid>(&kid("busy"), Mode::Busy),
            ctx.child::<Kid>(&kid("backoff"), Mode::Backoff),
            ctx.child::<Kid>(&kid("nap"), Mode::Nap),
        );
        Ok(vec![
            format!("done {done}, fail {}", said(failed)),
            said(w),
            said(p),
            said(b),
            said(r),
            said(n),
        ])
    }
}

/// Ports duroxide `tests/cancellation_tests.rs` `cancel_parent_down_propagates_to_child`
/// and the child cancellation of Temporal (sdk-core `child_workflows`: a
/// cancelled parent's pending child waits end with a cancellation and the
/// children are asked to cancel). The parent has children in every state when
/// it is cancelled: completed, failed, detached and waiting, waiting (and
/// passivated), paused, mid-step, between retry attempts, sleeping. Its joined
/// waits end with `Cancelled("stop")` and it completes with that; every child
/// it waits on ends `Cancelled("parent cancelled: stop")`, its running body
/// dropped, its backoff never retried; the ended children keep their ends and
/// the detached child goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_cancelled_with_children_in_every_state() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let kid = Kid::new();
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .passivate_after(Duration::from_millis(20))
        .register(Boss)
        .register(kid.clone())
        .build()
        .await?;
    let boss = host.start::<Boss>("boss", ()).await?;
    let suspended = |s: &RunStatus| matches!(s, RunStatus::Suspended { .. });
    for name in ["wait", "paused", "nap", "detached"] {
        until_status(&host, &format!("boss/{name}"), name, suspended).await?;
    }
    until("the busy child's body", || kid.busy.started.get() == 1).await?;
    until_status(&host, "boss/backoff", "the backoff", suspended).await?;
    assert_eq!(kid.attempts.get(), 1);
    host.run("boss/paused").pause().await?;
    assert_eq!(host.run("boss/paused").status().await?, RunStatus::Paused);
    until_status(&host, "boss", "the parent's join", suspended).await?;

    within(LIMIT, "the parent's cancel", boss.cancel("stop")).await??;
    let out = within(LIMIT, "the parent's result", boss.result()).await??;
    let cancelled = "cancelled stop".to_string();
    assert_eq!(
        out,
        vec![
            "done 1, fail error step `fail` failed: no".to_string(),
            cancelled.clone(),
            cancelled.clone(),
            cancelled.clone(),
            cancelled.clone(),
            cancelled,
        ],
    );
    assert_eq!(boss.status().await?, RunStatus::Completed);
    let events = boss.events().await?;
    assert_eq!(cancel_requests(&events), 1, "{events:?}");
    assert!(matches!(events.last(), Some(Event::RunCompleted { .. })));

    for name in ["wait", "paused", "busy", "backoff", "nap"] {
        let child = host.handle::<Kid>(&format!("boss/{name}"));
        let out = within(LIMIT, "a child's end", child.result()).await?;
        assert!(
            is_cancelled(&out, "parent cancelled: stop"),
            "{name}: {out:?}"
        );
        assert_eq!(child.status().await?, RunStatus::Cancelled, "{name}");
        ends_cancelled(&child.events().await?, "parent cancelled: stop");
    }
    until("the busy body to be dropped", || kid.busy.ended.get() == 1).await?;
    assert_eq!(kid.busy.finished.get(), 0);
    assert_eq!(kid.attempts.get(), 1, "the backoff ran another attempt");

    let done = host.handle::<Kid>("boss/done");
    assert_eq!(done.status().await?, RunStatus::Completed);
    assert_eq!(cancel_requests(&done.events().await?), 0);
    let fail = host.handle::<Kid>("boss/fail");
    assert_eq!(fail.status().await?.kind(), StatusKind::Failed);
    assert_eq!(cancel_requests(&fail.events().await?), 0);
    let detached = host.handle::<Kid>("boss/detached");
    assert!(suspended(&detached.status().await?));
    assert_eq!(cancel_requests(&detached.events().await?), 0);
    detached.signal("go", &7u32, "go-1").await?;
    assert_eq!(
        within(LIMIT, "the detached child", detached.result()).await??,
        7
    );
    host.shutdown().await?;
    Ok(())
}
