//! Pause, cancel, a child's end and continue-as-new racing a handler's
//! restart.

use crate::*;

/// A step, a `go` signal, a crash (once per run) held behind a per-run gate,
/// then a `more` signal and a second step.
#[derive(Clone, Default)]
struct PausedMidCrash {
    tally: Tally,
    crashed: FirstTime,
    gates: Gates,
}

impl Workflow for PausedMidCrash {
    const NAME: &'static str = "paused-mid-crash";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let me = ctx.run_id().to_owned();
        let a = ctx
            .step("a", |_| async {
                self.tally.bump(format!("{me}/a"));
                Ok::<_, String>(1)
            })
            .await?;
        let go: u32 = ctx.wait_for_signal("go").await?;
        if self.crashed.first(me.clone()) {
            self.tally.bump(format!("{me}/at-crash"));
            self.gates.of(&me).wait().await;
            panic!("crash while being paused");
        }
        let more: u32 = ctx.wait_for_signal("more").await?;
        let b = ctx
            .step("b", |_| async {
                self.tally.bump(format!("{me}/b"));
                Ok::<_, String>(1000)
            })
            .await?;
        Ok(a + go + more + b)
    }
}

/// Ports DBOS `tests/test_workflow_management.py::test_cancel_resume`: a
/// workflow stopped mid-way runs nothing more until it is resumed, and then
/// finishes, with the steps done before the stop not run again. Here the pause
/// arrives while the handler is crashing: the supervisor's restart must honour
/// it (the restarted run executes no step), a signal sent while paused is kept,
/// and the resumed run takes both signals once and runs each step once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_while_its_handler_restarts_runs_nothing_until_resumed() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let wf = PausedMidCrash::default();
    let host = Host::builder()
        .store(slow_reads(dir.path())?)
        .register(wf.clone())
        .restart_limit(3, Duration::from_secs(60))
        .build()
        .await?;
    for iter in 0..6 {
        let id = format!("p{iter}");
        let run = host.start::<PausedMidCrash>(&id, ()).await?;
        within(LIMIT, "the wait for go", run.wait_until_suspended()).await??;
        run.signal("go", &10u32, "go").await?;
        until("the crash point", || {
            wf.tally.get(&format!("{id}/at-crash")) > 0
        })
        .await?;
        let pause = {
            let run = run.clone();
            tokio::spawn(async move { run.pause().await })
        };
        if iter % 2 == 0 {
            // The panic races the pause.
            wf.gates.of(&id).open();
            within(LIMIT, "the pause", pause).await???;
        } else {
            // The pause is recorded first; the panic comes after it.
            within(LIMIT, "the pause", pause).await???;
            wf.gates.of(&id).open();
        }
        common::status::until_status(&run.untyped(), "paused", |s| *s == RunStatus::Paused).await?;
        run.signal("more", &100u32, "more").await?;
        assert_eq!(run.status().await?, RunStatus::Paused, "{id}");
        assert_eq!(
            wf.tally.get(&format!("{id}/b")),
            0,
            "{id}: ran while paused"
        );
        let events = run.events().await?;
        assert_eq!(
            count(
                &events,
                |e| matches!(e, Event::StepStarted { id, .. } if id == "b")
            ),
            0,
            "{id}: {events:?}"
        );
        run.resume().await?;
        let out = within(LIMIT, "the result", run.result()).await?;
        if out.is_err() {
            dump(&run).await;
        }
        assert_eq!(out?, 1111, "{id}");
        let events = run.events().await?;
        assert_eq!(wf.tally.get(&format!("{id}/a")), 1, "{id}");
        assert_eq!(wf.tally.get(&format!("{id}/b")), 1, "{id}");
        assert_eq!(received(&events), ["go", "more"], "{id}");
        assert_eq!(waits_on(&events, "go"), 1, "{id}: {events:?}");
        assert_eq!(waits_on(&events, "more"), 1, "{id}: {events:?}");
        ends_once(&events, &id);
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// A step, a crash (once per run) held behind a per-run gate, a one-hour sleep,
/// then a step that a cancel must keep from running.
#[derive(Clone, Default)]
struct CancelledMidCrash {
    tally: Tally,
    crashed: FirstTime,
    gates: Gates,
}

impl Workflow for CancelledMidCrash {
    const NAME: &'static str = "cancelled-mid-crash";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let me = ctx.run_id().to_owned();
        let a = ctx
            .step("a", |_| async {
                self.tally.bump(format!("{me}/a"));
                Ok::<_, String>(1)
            })
            .await?;
        if self.crashed.first(me.clone()) {
            self.tally.bump(format!("{me}/at-crash"));
            self.gates.of(&me).wait().await;
            panic!("crash while being cancelled");
        }
        ctx.sleep(Duration::from_secs(3600)).await?;
        let b = ctx
            .step("never", |_| async {
                self.tally.bump(format!("{me}/never"));
                Ok::<_, String>(1)
            })
            .await?;
        Ok(a + b)
    }
}

/// Ports Temporal sdk-core `integ_tests/workflow_tests/cancel_wf.rs::cancel_during_timer`
/// (with `workflow_tests/activities.rs::activity_cancellation_wait_cancellation_completed`'s
/// "nothing runs after the cancel"): a cancel request that arrives while the
/// handler is crashing, three runs at once, is carried through the supervisor's
/// restart: each run ends cancelled with the one recorded request and the one
/// `RunCancelled` last, its first step ran once, and the step after the sleep
/// never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_arriving_while_the_handler_restarts_ends_the_run_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let wf = CancelledMidCrash::default();
    let host = Host::builder()
        .store(slow_reads(dir.path())?)
        .register(wf.clone())
        .restart_limit(3, Duration::from_secs(60))
        .build()
        .await?;
    for round in 0..4 {
        let ids: Vec<String> = (0..3).map(|r| format!("c{round}-{r}")).collect();
        let mut runs = Vec::new();
        for id in &ids {
            runs.push(host.start::<CancelledMidCrash>(id, ()).await?);
        }
        for id in &ids {
            until("the crash point", || {
                wf.tally.get(&format!("{id}/at-crash")) > 0
            })
            .await?;
        }
        let cancels: Vec<_> = runs
            .iter()
            .map(|run| {
                let run = run.clone();
                tokio::spawn(async move { run.request_cancel("stop now").await })
            })
            .collect();
        for (i, id) in ids.iter().enumerate() {
            if i % 2 == round % 2 {
                tokio::task::yield_now().await;
            }
            wf.gates.of(id).open();
        }
        for c in cancels {
            within(LIMIT, "the cancel request", c).await???;
        }
        for (id, run) in ids.iter().zip(&runs) {
            match within(LIMIT, "the end", run.result()).await? {
                Err(Error::Cancelled(reason)) => assert_eq!(reason, "stop now", "{id}"),
                other => {
                    dump(run).await;
                    panic!("{id}: expected Cancelled, got {other:?}")
                }
            }
            let events = run.events().await?;
            assert_eq!(
                count(&events, |e| matches!(e, Event::CancelRequested { .. })),
                1,
                "{id}: {events:?}"
            );
            assert!(
                matches!(events.last(), Some(Event::RunCancelled { .. })),
                "{id}: {events:?}"
            );
            ends_once(&events, id);
            assert_eq!(completions(&events), BTreeMap::from([("a".to_owned(), 1)]));
            assert_eq!(wf.tally.get(&format!("{id}/a")), 1, "{id}");
            assert_eq!(wf.tally.get(&format!("{id}/never")), 0, "{id}");
            assert_eq!(run.status().await?, RunStatus::Cancelled, "{id}");
        }
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// Waits for `go`, doubles it in a step.
#[derive(Clone, Default)]
struct Kid {
    tally: Tally,
}

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let me = ctx.run_id().to_owned();
        let v: u32 = ctx.wait_for_signal("go").await?;
        ctx.step("double", |_| async {
            self.tally.bump(format!("{me}/double"));
            Ok::<_, String>(v * 2)
        })
        .await
    }
}

/// Waits for its child and a signal `p` at once, crashes (once per run) when it
/// has both, then sums them in a step.
#[derive(Clone, Default)]
struct Parent {
    tally: Tally,
    crashed: FirstTime,
}

impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let me = ctx.run_id().to_owned();
        let (c, p) = futures::join!(
            ctx.child::<Kid>(&format!("{me}-kid"), ()),
            ctx.wait_for_signal::<u32>("p")
        );
        let (c, p) = (c?, p?);
        if self.crashed.first(me.clone()) {
            panic!("parent crashed on its child's end");
        }
        ctx.step("sum", |_| async {
            self.tally.bump(format!("{me}/sum"));
            Ok::<_, String>(c + p)
        })
        .await
    }
}

/// Ports Temporal sdk-core `integ_tests/workflow_tests/child_workflows.rs::child_workflow_happy_path`
/// under `workflow_tests.rs::fail_wf_task`'s failed task: four parents at once
/// each wait on a child and a signal; the child's end and the signal arrive
/// together, and the activation they bring crashes the parent. After the
/// restart each parent replays the child's recorded end (one `ChildStarted`,
/// one `ChildCompleted`) and the signal, and every step body ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_end_and_a_signal_racing_the_parents_restart_are_taken_once() -> anyhow::Result<()>
{
    const PARENTS: u32 = 4;
    let dir = tempfile::tempdir()?;
    let (kid, parent) = (Kid::default(), Parent::default());
    let host = Host::builder()
        .store(slow_reads(dir.path())?)
        .register(kid.clone())
        .register(parent.clone())
        .restart_limit(3, Duration::from_secs(60))
        .build()
        .await?;
    let mut parents = Vec::new();
    for i in 0..PARENTS {
        let run = host.start::<Parent>(&format!("par{i}"), ()).await?;
        until_log(&run, LIMIT, "the child's start", |e| {
            e.iter().any(|e| matches!(e, Event::ChildStarted { .. }))
        })
        .await?;
        let child = host.handle::<Kid>(&format!("par{i}-kid"));
        // `ChildStarted` is written before the child run is created.
        within(LIMIT, "the child waits", async {
            loop {
                match child.wait_until_suspended().await {
                    Err(Error::UnknownRun(_)) => tokio::time::sleep(Duration::from_millis(2)).await,
                    other => return other,
                }
            }
        })
        .await??;
        parents.push((i, run, child));
    }
    let sends: Vec<_> = parents
        .iter()
        .map(|(i, run, child)| {
            let (i, run, child) = (*i, run.clone(), child.clone());
            tokio::spawn(async move {
                let (go, p) = (i + 1, i * 1000);
                let (a, b) = tokio::join!(child.signal("go", &go, "go"), run.signal("p", &p, "p"));
                a.and(b)
            })
        })
        .collect();
    for s in sends {
        within(LIMIT, "the signals", s).await???;
    }
    for (i, run, child) in &parents {
        let me = run.id().to_owned();
        let out = within(LIMIT, "the parent's result", run.result()).await?;
        if out.is_err() {
            dump(run).await;
        }
        assert_eq!(out?, (i + 1) * 2 + i * 1000, "{me}");
        assert_eq!(child.result().await?, (i + 1) * 2);
        let events = run.events().await?;
        assert_eq!(
            count(&events, |e| matches!(e, Event::ChildStarted { .. })),
            1,
            "{me}: {events:?}"
        );
        assert_eq!(
            count(&events, |e| matches!(e, Event::ChildCompleted { .. })),
            1,
            "{me}: {events:?}"
        );
        assert_eq!(received(&events), ["p"], "{me}");
        assert_eq!(waits_on(&events, "p"), 1, "{me}: {events:?}");
        ends_once(&events, &me);
        assert_eq!(parent.tally.get(&format!("{me}/sum")), 1, "{me}");
        assert_eq!(kid.tally.get(&format!("{me}-kid/double")), 1, "{me}");
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// Takes two `add` signals per segment (each through a step), crashes (once
/// per run and segment) and then continues as new with what it has, until it
/// has `TOTAL`.
#[derive(Clone, Default)]
struct Rolling {
    tally: Tally,
    crashed: FirstTime,
}

const TOTAL: usize = 8;

impl Workflow for Rolling {
    const NAME: &'static str = "rolling";
    type Input = Vec<u32>;
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, mut got: Vec<u32>) -> reel::Result<Vec<u32>> {
        let me = ctx.run_id().to_owned();
        if got.len() >= TOTAL {
            return Ok(got);
        }
        for _ in 0..2 {
            let v: u32 = ctx.wait_for_signal("add").await?;
            let n = got.len();
            let v = ctx
                .step("apply", |_| async {
                    self.tally.bump(format!("{me}/apply{n}"));
                    Ok::<_, String>(v)
                })
                .await?;
            got.push(v);
        }
        if self.crashed.first(format!("{me}/{}", got.len())) {
            panic!("crash before continuing as new");
        }
        ctx.continue_as_new::<Rolling>(got).await
    }
}

/// Ports Temporal sdk-core `integ_tests/workflow_tests/continue_as_new.rs::continue_as_new_multiple_concurrent`
/// (and duroxide `tests/continue_as_new_tests.rs::continue_as_new_event_routes_to_latest`):
/// many runs continue as new at once while events keep arriving for them. Here
/// each of eight runs crashes right before every continue-as-new, so the
/// restarted execution continues as new first thing, while its sender goes on
/// signalling: every signal is taken once and in order across the segments,
/// every step body ran once, and each run has one `ContinuedAsNew` per segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_right_after_a_restart_takes_every_signal_once() -> anyhow::Result<()> {
    const RUNS: u32 = 8;
    let dir = tempfile::tempdir()?;
    let wf = Rolling::default();
    let host = Host::builder()
        .store(slow_reads(dir.path())?)
        .register(wf.clone())
        .restart_limit(10, Duration::from_secs(60))
        .build()
        .await?;
    let mut senders = Vec::new();
    for r in 0..RUNS {
        let run = host.start::<Rolling>(&format!("r{r}"), Vec::new()).await?;
        senders.push(tokio::spawn(async move {
            for k in 0..TOTAL as u32 {
                run.signal("add", &(k + 10 * r), &format!("add{k}")).await?;
            }
            anyhow::Ok(run)
        }));
    }
    for (r, sender) in (0..RUNS).zip(senders) {
        let run = within(LIMIT, "a sender", sender).await???;
        let me = run.id().to_owned();
        let out = within(LIMIT, "the result", run.result()).await?;
        if out.is_err() {
            dump(&run).await;
        }
        assert_eq!(
            out?,
            (0..TOTAL as u32).map(|k| k + 10 * r).collect::<Vec<_>>(),
            "{me}"
        );
        for n in 0..TOTAL {
            assert_eq!(wf.tally.get(&format!("{me}/apply{n}")), 1, "{me}: step {n}");
        }
        let events = run.events().await?;
        assert_eq!(
            count(&events, |e| matches!(e, Event::ContinuedAsNew { .. })),
            TOTAL / 2,
            "{me}: {events:?}"
        );
        assert_eq!(
            count(&events, |e| matches!(e, Event::StepCompleted { .. })),
            TOTAL,
            "{me}: {events:?}"
        );
        ends_once(&events, &me);
    }
    host.shutdown().await?;
    Ok(())
}
