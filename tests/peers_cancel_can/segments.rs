//! Continue-as-new in a loop and with a child mid-step, a cancel racing a
//! supervisor restart, a run parked at its switch.

use crate::*;

// Continue-as-new in a loop with concurrent signals.

const SENDERS: u32 = 4;
const EACH: u32 = 12;
const PER_SEGMENT: usize = 3;

/// Takes three `n` signals a segment through timed waits, records a step, and
/// continues as new with what it took, until it holds every signal.
#[derive(Clone)]
struct Taker {
    applied: Counter,
}

impl Workflow for Taker {
    const NAME: &'static str = "taker";
    type Input = Vec<(u32, u32)>;
    type Output = Vec<(u32, u32)>;
    async fn run(&self, ctx: Ctx, mut taken: Vec<(u32, u32)>) -> reel::Result<Vec<(u32, u32)>> {
        if taken.len() == (SENDERS * EACH) as usize {
            return Ok(taken);
        }
        for _ in 0..PER_SEGMENT {
            match ctx.wait_for_signal_timeout::<(u32, u32)>("n", HOUR).await? {
                Some(v) => taken.push(v),
                None => panic!("a timed wait timed out on a clock that stands still"),
            }
        }
        let n = taken.len() as u32;
        ctx.step("apply", |_| async {
            self.applied.bump();
            Ok::<u32, String>(n)
        })
        .await?;
        ctx.continue_as_new::<Taker>(taken).await
    }
}

async fn open_taker(dir: &Path, clock: &TestClock, wf: &Taker) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .passivate_after(Duration::from_millis(1))
        .register(wf.clone())
        .build()
        .await
}

/// Every sender sends its signals `from..to`, in order, all senders at once.
async fn send_all(host: &Host, from: u32, to: u32) -> anyhow::Result<()> {
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let run = host.handle::<Taker>("taker");
        senders.push(tokio::spawn(async move {
            for k in from..to {
                run.signal("n", &(s, k), &format!("s{s}-{k}")).await?;
            }
            reel::Result::<()>::Ok(())
        }));
    }
    for s in senders {
        within(LIMIT, "a sender", s).await???;
    }
    Ok(())
}

/// Ports Temporal sdk-core `tests/integ_tests/workflow_tests/continue_as_new.rs`
/// `continue_as_new_happy_path` (a run continuing as new after a timer, over
/// and over) and the Go SDK's `Test_ContinueAsNewWorkflow`, with signals
/// arriving concurrently: four senders signal a run that takes three signals a
/// segment through timed waits, passivates between them and continues as new,
/// with a host restart half way. Every signal is taken exactly once, each
/// sender's in the order sent, across 16 switches; each segment's step body
/// ran once; no timed wait's timer fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_in_a_loop_takes_concurrent_signals_once_and_in_order() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let wf = Taker {
        applied: Counter::default(),
    };
    let host = open_taker(dir.path(), &clock, &wf).await?;
    let run = host.start::<Taker>("taker", Vec::new()).await?;
    send_all(&host, 0, EACH / 2).await?;
    // Shut down once the half taken so far is applied: a step body a shutdown
    // interrupts runs again (at least once), which is not what is counted here.
    let half = (SENDERS * EACH / 2) as usize / PER_SEGMENT;
    common::until_log(&run, LIMIT, "the first half applied", |e| hops(e) == half).await?;
    host.shutdown().await?;

    let host = open_taker(dir.path(), &clock, &wf).await?;
    send_all(&host, EACH / 2, EACH).await?;
    let run = host.handle::<Taker>("taker");
    let taken = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(taken.len(), (SENDERS * EACH) as usize, "{taken:?}");
    let unique: BTreeSet<_> = taken.iter().collect();
    assert_eq!(unique.len(), taken.len(), "a signal taken twice: {taken:?}");
    for s in 0..SENDERS {
        let order: Vec<u32> = taken
            .iter()
            .filter(|(f, _)| *f == s)
            .map(|(_, k)| *k)
            .collect();
        assert_eq!(
            order,
            (0..EACH).collect::<Vec<_>>(),
            "sender {s}: {taken:?}"
        );
    }
    let segments = (SENDERS * EACH) as usize / PER_SEGMENT;
    let events = run.events().await?;
    assert_eq!(hops(&events), segments, "{events:?}");
    assert_eq!(run.info().await?.segment as usize, segments);
    assert_eq!(completed(&events, "apply"), segments);
    assert_eq!(wf.applied.get() as usize, segments, "a step body ran twice");
    assert_eq!(
        count(&events, |e| matches!(e, Event::TimerFired { .. })),
        0,
        "{events:?}"
    );
    assert!(matches!(events.last(), Some(Event::RunCompleted { .. })));
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Continue-as-new while a child is mid-step.

/// Segment 0 starts a detached child and a child mid-step, and continues as
/// new on `hop`; segment 1 waits on a child that completes at once.
struct Mover;

impl Workflow for Mover {
    const NAME: &'static str = "mover";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<u32> {
        let id = ctx.run_id().to_string();
        if segment == 0 {
            ctx.start_child::<Kid>(&format!("{id}/detached"), Mode::Wait)
                .await?;
            let kid = ctx.child::<Kid>(&format!("{id}/k0"), Mode::Busy);
            let hop = ctx.wait_for_signal::<()>("hop");
            return tokio::select! {
                biased;
                r = hop => {
                    r?;
                    ctx.continue_as_new::<Mover>(1).await
                }
                r = kid => r,
            };
        }
        Ok(ctx.child::<Kid>(&format!("{id}/k1"), Mode::Done).await? + 100)
    }
}

/// Ports Temporal's parent-close policy on continue-as-new (sdk-core
/// `continue_as_new.rs` with `child_workflows.rs`: a child the old run waited on
/// is cancelled when the run continues as new) and duroxide's sub-orchestration
/// cancellation. The child is mid-step when its parent continues as new: it
/// ends `Cancelled` in the parent's words, its body dropped and never recorded
/// (also after the gate opens and a host reopens the store); the detached
/// child goes on; the new segment's own child completes the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_while_a_child_runs_a_step_cancels_it_and_spares_the_detached()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let kid = Kid::new();
    let open = || common::hosts::open_two(dir.path(), Mover, kid.clone());
    let host = open().await?;
    let mover = host.start::<Mover>("mover", 0).await?;
    until("the child's body", || kid.busy.started.get() == 1).await?;
    mover.signal("hop", &(), "hop-1").await?;
    assert_eq!(within(LIMIT, "the parent", mover.result()).await??, 101);

    let k0 = host.handle::<Kid>("mover/k0");
    let out = within(LIMIT, "the old child's end", k0.result()).await?;
    assert!(
        matches!(&out, Err(Error::Cancelled(why)) if why.contains("parent continued as new")),
        "{out:?}"
    );
    assert_eq!(k0.status().await?, RunStatus::Cancelled);
    until("the child's body to be dropped", || {
        kid.busy.ended.get() == 1
    })
    .await?;
    assert_eq!(kid.busy.finished.get(), 0);
    let k0_events = k0.events().await?;
    assert_eq!(completed(&k0_events, "busy"), 0, "{k0_events:?}");
    assert!(matches!(k0_events.last(), Some(Event::RunCancelled { .. })));

    let events = mover.events().await?;
    assert_eq!(hops(&events), 1, "{events:?}");
    assert_eq!(mover.info().await?.segment, 1);
    let children: BTreeSet<String> = mover
        .children()
        .await?
        .into_iter()
        .map(|c| c.run_id)
        .collect();
    for c in ["mover/detached", "mover/k0", "mover/k1"] {
        assert!(children.contains(c), "{c} missing from {children:?}");
    }
    let detached = host.handle::<Kid>("mover/detached");
    assert!(matches!(
        detached.status().await?,
        RunStatus::Suspended { .. }
    ));
    assert_eq!(cancel_requests(&detached.events().await?), 0);

    kid.busy.release.open();
    host.shutdown().await?;
    let host = open().await?;
    let k0 = host.handle::<Kid>("mover/k0");
    assert_eq!(k0.events().await?, k0_events, "the old child's log changed");
    assert_eq!(kid.busy.finished.get(), 0);
    let detached = host.handle::<Kid>("mover/detached");
    detached.signal("go", &7u32, "go-1").await?;
    assert_eq!(
        within(LIMIT, "the detached child", detached.result()).await??,
        7
    );
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A cancel racing a supervisor restart.

/// A step, then a panic outside any step on the first execution that gets past
/// it (the supervisor restarts the actor from disk), then a wait for `go`.
#[derive(Clone)]
struct Crashy {
    probes: Arc<Vec<Probe>>,
    passes: Arc<Vec<Counter>>,
}

impl Workflow for Crashy {
    const NAME: &'static str = "crashy";
    type Input = usize;
    type Output = u32;
    async fn run(&self, ctx: Ctx, i: usize) -> reel::Result<u32> {
        let v = ctx.step("a", |_| self.probes[i].body(1)).await?;
        if self.passes[i].bump() == 1 {
            panic!("crash right after the step's result");
        }
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(v + go)
    }
}

/// A step joined with a wait for `boom`; the first time the wait ends after
/// the step's body has finished (its result may still be on its way to disk),
/// the handler panics outside any step. Then a wait for `go`.
#[derive(Clone)]
struct Boomy {
    probes: Arc<Vec<Probe>>,
    crashes: Arc<Vec<Counter>>,
}

impl Workflow for Boomy {
    const NAME: &'static str = "boomy";
    type Input = usize;
    type Output = u32;
    async fn run(&self, ctx: Ctx, i: usize) -> reel::Result<u32> {
        let p = &self.probes[i];
        let a = ctx.step("a", |_| p.body(1));
        let boom = ctx.wait_for_signal::<u32>("boom");
        let (a, boom) = futures::join!(a, async {
            let b = boom.await;
            if p.finished.get() == 1 && self.crashes[i].bump() == 1 {
                panic!("crash while the step's result is written");
            }
            b
        });
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(a? + boom? + go)
    }
}

/// Adapts sdk-core `cancel_wf.rs` `cancel_during_timer` (an external cancel)
/// to a run whose handler panics (Temporal retries a panicking workflow task
/// from history, as reel's supervisor restarts the actor from disk), as a
/// race: the cancel arrives as the step's result lands and the
/// handler crashes, while the supervisor restarts the run's actor. The run
/// ends `Cancelled("stop")` with one request, the step body ran once and its
/// result, if recorded, once. In a second round the crash comes from a
/// branch woken by a signal in the very poll in which the step's body
/// finished, so its result may still wait in the store's writer when the
/// actor restarts: the body must not run again for that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_a_supervisor_restart_ends_the_run_once() -> anyhow::Result<()> {
    const N: usize = 12;
    let dir = tempfile::tempdir()?;
    let wf = Crashy {
        probes: Arc::new((0..N).map(|_| Probe::new()).collect()),
        passes: Arc::new((0..N).map(|_| Counter::default()).collect()),
    };
    let boomy = Boomy {
        probes: Arc::new((0..N).map(|_| Probe::new()).collect()),
        crashes: Arc::new((0..N).map(|_| Counter::default()).collect()),
    };
    let host = common::hosts::open_two(dir.path(), wf.clone(), boomy.clone()).await?;
    for i in 0..N {
        let id = format!("crashy-{i}");
        let run = host.start::<Crashy>(&id, i).await?;
        let p = &wf.probes[i];
        until("the body", || p.started.get() == 1).await?;
        let cancel =
            |run: reel::RunHandle<Crashy>| tokio::spawn(async move { run.cancel("stop").await });
        let canceller = match i % 3 {
            // The cancel first, the body's end right after it.
            0 => {
                let c = cancel(run.clone());
                p.release.open();
                c
            }
            // The body's end first, the cancel right after it.
            1 => {
                p.release.open();
                cancel(run.clone())
            }
            // The cancel once the handler is past the step: it crashes now,
            // and the supervisor restarts the actor under the cancel.
            _ => {
                p.release.open();
                until("the crash", || wf.passes[i].get() >= 1).await?;
                cancel(run.clone())
            }
        };
        within(LIMIT, "the cancel", canceller).await???;
        let out = within(LIMIT, "the result", run.result()).await?;
        assert!(is_cancelled(&out, "stop"), "{id}: {out:?}");
        assert_eq!(run.status().await?, RunStatus::Cancelled, "{id}");
        let events = run.events().await?;
        ends_cancelled(&events, "stop");
        assert_eq!(cancel_requests(&events), 1, "{id}: {events:?}");
        assert!(completed(&events, "a") <= 1, "{id}: {events:?}");
        if completed(&events, "a") == 1 {
            assert_eq!(p.finished.get(), 1, "{id}");
        }
        assert_eq!(p.started.get(), 1, "{id}: the body ran again");
    }
    for i in 0..N {
        let id = format!("boomy-{i}");
        let run = host.start::<Boomy>(&id, i).await?;
        let p = &boomy.probes[i];
        until("the body", || p.started.get() == 1).await?;
        // The body's end and the signal at once, so that one wake-up hands the
        // handler both; the cancel before, with or after them.
        let early = (i % 3 == 0).then(|| {
            let r = run.clone();
            tokio::spawn(async move { r.cancel("stop").await })
        });
        p.release.open();
        let signalled = run.signal("boom", &1u32, "boom-1").await;
        let canceller = match early {
            Some(c) => c,
            None if i % 3 == 1 => {
                let r = run.clone();
                tokio::spawn(async move { r.cancel("stop").await })
            }
            None => {
                until("the crash or the wait", || {
                    boomy.crashes[i].get() >= 1 || p.ended.get() == 1
                })
                .await?;
                let r = run.clone();
                tokio::spawn(async move { r.cancel("stop").await })
            }
        };
        within(LIMIT, "the cancel", canceller).await???;
        let out = within(LIMIT, "the result", run.result()).await?;
        assert!(is_cancelled(&out, "stop"), "{id}: {out:?}");
        let events = run.events().await?;
        ends_cancelled(&events, "stop");
        assert_eq!(cancel_requests(&events), 1, "{id}: {events:?}");
        assert!(completed(&events, "a") <= 1, "{id}: {events:?}");
        if let Ok(()) = signalled {
            assert!(
                events
                    .iter()
                    .any(|e| matches!(e, Event::SignalReceived { name, .. } if name == "boom")),
                "{id}: an acknowledged signal is lost: {events:?}"
            );
        }
        assert_eq!(
            p.started.get(),
            1,
            "{id}: the body ran again after the crash (crashes: {}): {events:?}",
            boomy.crashes[i].get()
        );
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A run parked at its segment switch, cancelled.

/// Version 1 of `upgrade`: a step, then continues as new onto version 2.
#[derive(Clone)]
struct UpgradeV1 {
    bodies: Counter,
}

impl Workflow for UpgradeV1 {
    const NAME: &'static str = "upgrade";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let v = ctx
            .step("v1", |_| async {
                self.bodies.bump();
                Ok::<u32, String>(n + 1)
            })
            .await?;
        ctx.continue_as_new::<UpgradeV2>(v).await
    }
}

/// Version 2 of `upgrade`: a step returning its input.
#[derive(Clone)]
struct UpgradeV2 {
    bodies: Counter,
}

impl Workflow for UpgradeV2 {
    const NAME: &'static str = "upgrade";
    const VERSION: u32 = 2;
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("v2", |_| async {
            self.bodies.bump();
            Ok::<u32, String>(n)
        })
        .await
    }
}

/// Adapts duroxide `cancel_continue_as_new_second_exec` (a cancel reaching a
/// run around its continue-as-new) to a run parked at its switch: it
/// continues as new onto a version the host does not register, so it parks
/// with its switch unwritten (Temporal's nearest case is a workflow whose task
/// keeps failing, which a cancel or terminate still ends). A signal sent to
/// it is kept; the cancel ends it at once, `Cancelled("stop")`, with no
/// switch in its log; and a host that registers version 2 afterwards does not
/// resume it: it stays cancelled, `retry` is `InvalidState`, and no body of
/// either version runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_parked_at_its_switch_is_cancelled_at_once_and_stays_cancelled() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let v1 = UpgradeV1 {
        bodies: Counter::default(),
    };
    let v2 = UpgradeV2 {
        bodies: Counter::default(),
    };
    let host = common::hosts::open(dir.path(), v1.clone()).await?;
    let run = host.start::<UpgradeV1>("up", 1).await?;
    until_status(&host, "up", "the park", |s| s.kind() == StatusKind::Parked).await?;
    run.signal("later", &5u32, "later-1").await?;
    within(LIMIT, "the cancel of the parked run", run.cancel("stop")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let out = within(LIMIT, "the result", run.result()).await?;
    assert!(is_cancelled(&out, "stop"), "{out:?}");
    let events = run.events().await?;
    ends_cancelled(&events, "stop");
    assert_eq!(hops(&events), 0, "{events:?}");
    assert_eq!(completed(&events, "v1"), 1, "{events:?}");
    assert_eq!(v1.bodies.get(), 1);
    host.shutdown().await?;

    let host = common::hosts::open_two(dir.path(), v1.clone(), v2.clone()).await?;
    let run = host.handle::<UpgradeV1>("up");
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    let retried = run.retry().await;
    assert!(
        matches!(retried, Err(Error::InvalidState { .. })),
        "{retried:?}"
    );
    let out = within(LIMIT, "the result after the reopen", run.result()).await?;
    assert!(is_cancelled(&out, "stop"), "{out:?}");
    assert_eq!(run.events().await?, events, "the cancelled run moved on");
    assert_eq!((v1.bodies.get(), v2.bodies.get()), (1, 0));
    assert_eq!(run.info().await?.segment, 0);
    host.shutdown().await?;
    Ok(())
}
