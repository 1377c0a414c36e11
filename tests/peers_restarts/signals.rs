//! Handlers failing around a timer, a step and signals, signals racing a
//! failing end, and passivation racing supervisor restarts.

use crate::*;

/// A step, a one-hour sleep, a crash (once per run) right after the timer
/// fired, then a second step.
#[derive(Clone, Default)]
struct TimerThenOops {
    tally: Tally,
    crashed: FirstTime,
}

impl Workflow for TimerThenOops {
    const NAME: &'static str = "timer-then-oops";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, x: u32) -> reel::Result<u32> {
        let me = ctx.run_id().to_owned();
        self.tally.bump(format!("{me}/exec"));
        let a = ctx
            .step("before", |_| async {
                self.tally.bump(format!("{me}/before"));
                Ok::<_, String>(x)
            })
            .await?;
        ctx.sleep(Duration::from_secs(3600)).await?;
        if self.crashed.first(me.clone()) {
            panic!("I did an oopsie");
        }
        let b = ctx
            .step("after", |_| async {
                self.tally.bump(format!("{me}/after"));
                Ok::<_, String>(100)
            })
            .await?;
        Ok(a + b)
    }
}

/// Ports Temporal sdk-core `integ_tests/workflow_tests.rs::fail_wf_task` (and
/// `workflow_tests/stickyness.rs::timer_workflow_timeout_on_sticky`): the
/// workflow task that follows a fired timer fails, the task is retried and the
/// workflow completes without a second timer. Here five runs at once panic on
/// the wake-up their timer brought: each is restarted from its log, replays the
/// fired timer (one `TimerScheduled`, one `TimerFired`), runs no step twice, and
/// its handler ran exactly twice (the wake-up resumed the live future, the
/// restart replayed once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failing_after_its_timer_fired_reruns_but_not_the_timer() -> anyhow::Result<()> {
    const RUNS: u32 = 5;
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let wf = TimerThenOops::default();
    let host = Host::builder()
        .store(slow_reads(dir.path())?)
        .clock(clock.clone())
        .register(wf.clone())
        .restart_limit(3, Duration::from_secs(60))
        .build()
        .await?;
    let mut runs = Vec::new();
    for r in 0..RUNS {
        runs.push(host.start::<TimerThenOops>(&format!("t{r}"), r).await?);
    }
    for run in &runs {
        within(LIMIT, "the sleep", run.wait_until_suspended()).await??;
    }
    clock.advance(Duration::from_secs(7200));
    for (r, run) in runs.iter().enumerate() {
        let me = run.id().to_owned();
        let out = within(LIMIT, "the result", run.result()).await?;
        if out.is_err() {
            dump(run).await;
        }
        assert_eq!(out?, r as u32 + 100, "{me}");
        let events = run.events().await?;
        assert_eq!(
            count(&events, |e| matches!(e, Event::TimerScheduled { .. })),
            1,
            "{me}: {events:?}"
        );
        assert_eq!(
            count(&events, |e| matches!(e, Event::TimerFired { .. })),
            1,
            "{me}: {events:?}"
        );
        assert_eq!(
            completions(&events),
            BTreeMap::from([("after".to_owned(), 1), ("before".to_owned(), 1)]),
            "{me}"
        );
        assert_eq!(
            count(&events, |e| matches!(e, Event::StepStarted { .. })),
            2,
            "{me}: {events:?}"
        );
        ends_once(&events, &me);
        assert_eq!(wf.tally.get(&format!("{me}/before")), 1, "{me}");
        assert_eq!(wf.tally.get(&format!("{me}/after")), 1, "{me}");
        assert_eq!(wf.tally.get(&format!("{me}/exec")), 2, "{me}");
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// A step behind a per-run gate, a crash (once per run) right after it, then
/// two signal waits.
#[derive(Clone, Default)]
struct AroundAStep {
    tally: Tally,
    crashed: FirstTime,
    gates: Gates,
}

impl Workflow for AroundAStep {
    const NAME: &'static str = "around-a-step";
    type Input = ();
    type Output = (u32, String, String);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u32, String, String)> {
        let me = ctx.run_id().to_owned();
        let gate = self.gates.of(&me);
        let v = ctx
            .step("act", |_| async {
                self.tally.bump(format!("{me}/act"));
                gate.wait().await;
                Ok::<_, String>(7)
            })
            .await?;
        if self.crashed.first(me.clone()) {
            panic!("workflow task failed after the activity");
        }
        let at_start: String = ctx.wait_for_signal("at-start").await?;
        let at_complete: String = ctx.wait_for_signal("at-complete").await?;
        Ok((v, at_start, at_complete))
    }
}

/// Ports Temporal sdk-core
/// `integ_tests/workflow_tests.rs::wft_timeout_doesnt_create_unsolvable_autocomplete`:
/// a signal arrives while an activity runs, the activity completes, a second
/// signal arrives, and the workflow task that should have seen them fails; the
/// retried task must see signal, result, signal, and complete. Here the handler
/// panics right after its step's result is recorded while the second signal is
/// on its way, in three lanes of runs at once: after the restart the step's
/// result is replayed (its body ran once), both signals are taken in order, and
/// each wait is recorded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_and_a_step_result_around_a_failed_execution_are_taken_once() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let wf = AroundAStep::default();
    let host = Host::builder()
        .store(slow_reads(dir.path())?)
        .register(wf.clone())
        .restart_limit(3, Duration::from_secs(60))
        .build()
        .await?;
    let lanes: Vec<_> = (0..3)
        .map(|lane| {
            let (host, wf) = (host.clone(), wf.clone());
            tokio::spawn(async move {
                for iter in 0..8 {
                    let id = format!("a{lane}-{iter}");
                    let run = host.start::<AroundAStep>(&id, ()).await?;
                    until("the step body", || wf.tally.get(&format!("{id}/act")) > 0).await?;
                    run.signal("at-start", "start", "s1").await?;
                    wf.gates.of(&id).open();
                    // Races the panic and the restart.
                    run.signal("at-complete", "complete", "s2").await?;
                    let out = within(LIMIT, "the result", run.result()).await?;
                    if out.is_err() {
                        dump(&run).await;
                    }
                    assert_eq!(out?, (7, "start".to_owned(), "complete".to_owned()), "{id}");
                    let events = run.events().await?;
                    assert_eq!(wf.tally.get(&format!("{id}/act")), 1, "{id}: body reran");
                    assert_eq!(
                        completions(&events),
                        BTreeMap::from([("act".to_owned(), 1)]),
                        "{id}"
                    );
                    assert_eq!(waits_on(&events, "at-start"), 1, "{id}: {events:?}");
                    assert_eq!(waits_on(&events, "at-complete"), 1, "{id}: {events:?}");
                    assert_eq!(received(&events), ["s1", "s2"], "{id}");
                    ends_once(&events, &id);
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for lane in lanes {
        within(LIMIT * 2, "a lane", lane).await???;
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// Takes signals `s`; panics once (per run) after the second, and fails the run
/// with an error after the third.
#[derive(Clone, Default)]
struct GivesUp {
    crashed: FirstTime,
}

impl Workflow for GivesUp {
    const NAME: &'static str = "gives-up";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let me = ctx.run_id().to_owned();
        let mut got = Vec::new();
        loop {
            got.push(ctx.wait_for_signal::<u32>("s").await?);
            if got.len() == 2 && self.crashed.first(me.clone()) {
                panic!("crash between signals");
            }
            if got.len() == 3 {
                return Err(Error::Failed(format!("enough after {got:?}")));
            }
        }
    }
}

/// Ports Temporal sdk-core
/// `integ_tests/workflow_tests.rs::signal_workflow_signal_not_handled_on_workflow_completion`:
/// a signal that arrives while the workflow completes must not be dropped with
/// the completion. Here a sender keeps signalling a run whose handler crashes
/// once and then ends with an error: every signal is either acknowledged and in
/// the log before the run's one terminal event, or refused with `RunFinished`,
/// never acknowledged and lost; refusals only follow acknowledgements; the run's
/// error is the one its handler returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_racing_a_failing_end_are_taken_or_refused_never_lost() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .store(slow_reads(dir.path())?)
        .register(GivesUp::default())
        .restart_limit(3, Duration::from_secs(60))
        .build()
        .await?;
    let lanes: Vec<_> = (0..3)
        .map(|lane| {
            let host = host.clone();
            tokio::spawn(async move {
                for iter in 0..8 {
                    let id = format!("g{lane}-{iter}");
                    let run = host.start::<GivesUp>(&id, ()).await?;
                    let mut acked = Vec::new();
                    let mut refused = 0;
                    for k in 0..10u32 {
                        match run.signal("s", &k, &format!("s{k}")).await {
                            Ok(()) => {
                                assert_eq!(refused, 0, "{id}: s{k} taken after a refusal");
                                acked.push(format!("s{k}"));
                            }
                            Err(Error::RunFinished(_)) => refused += 1,
                            Err(e) => panic!("{id}: s{k}: {e:?}"),
                        }
                    }
                    assert!(acked.len() >= 3, "{id}: {acked:?}");
                    match within(LIMIT, "the failure", run.result()).await? {
                        Err(Error::Failed(m)) => assert_eq!(m, "enough after [0, 1, 2]", "{id}"),
                        other => {
                            dump(&run).await;
                            panic!("{id}: expected the handler's error, got {other:?}")
                        }
                    }
                    let events = run.events().await?;
                    assert_eq!(received(&events), acked, "{id}");
                    assert_eq!(waits_on(&events, "s"), 3, "{id}: {events:?}");
                    ends_once(&events, &id);
                    assert!(
                        matches!(events.last(), Some(Event::RunFailed { .. })),
                        "{id}: {events:?}"
                    );
                    assert_eq!(run.status().await?.kind(), StatusKind::Failed);
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for lane in lanes {
        within(LIMIT * 2, "a lane", lane).await???;
    }
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// Loops `n` times: a signal, a step, and on every third signal a crash (once
/// per run and position).
#[derive(Clone, Default)]
struct Evicted {
    tally: Tally,
    crashed: FirstTime,
}

impl Workflow for Evicted {
    const NAME: &'static str = "evicted";
    type Input = u32;
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<u32>> {
        let me = ctx.run_id().to_owned();
        self.tally.bump(format!("{me}/exec"));
        let mut out = Vec::new();
        for k in 0..n {
            let v: u32 = ctx.wait_for_signal("tick").await?;
            let w = ctx
                .step("apply", |_| async {
                    self.tally.bump(format!("{me}/apply{k}"));
                    Ok::<_, String>(v * 2)
                })
                .await?;
            if k % 3 == 1 && self.crashed.first(format!("{me}/{k}")) {
                panic!("crash at {k}");
            }
            out.push(w);
        }
        Ok(out)
    }
}

/// Ports Temporal sdk-core `integ_tests/workflow_tests.rs::workflow_lru_cache_evictions`
/// (and `workflow_tests/stickyness.rs::cache_miss_ok`): workflows evicted from
/// the cache between activations must replay to the same place, so they run
/// more often than there are workflows. Here six runs passivate as soon as
/// they wait, and their handlers crash now and then: every other signal finds
/// them all passivated (and activates them again), the others race their
/// suspension, passivation, crash and restart. Every signal is taken once and
/// in order, every step body runs once, each wait is recorded once, and the
/// handlers replayed at least once per passivation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passivation_racing_supervisor_restarts_takes_every_signal_once() -> anyhow::Result<()> {
    const RUNS: u32 = 6;
    const N: u32 = 9;
    let dir = tempfile::tempdir()?;
    let wf = Evicted::default();
    let host = Host::builder()
        .store(slow_reads(dir.path())?)
        .register(wf.clone())
        .passivate_after(Duration::ZERO)
        .restart_limit(10, Duration::from_secs(60))
        .build()
        .await?;
    let mut runs = Vec::new();
    for r in 0..RUNS {
        runs.push(host.start::<Evicted>(&format!("e{r}"), N).await?);
    }
    let mut passivated_rounds = 0;
    for k in 0..N {
        if k % 2 == 0 {
            // Every run waits and has been passivated: the signals activate them.
            for run in &runs {
                within(LIMIT, "the wait", run.wait_until_suspended()).await??;
            }
            within(LIMIT, "the passivations", async {
                while host.live_runs().await > 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
            .await?;
            passivated_rounds += 1;
        }
        // Otherwise the signals race the runs' suspension, passivation, crash
        // and restart.
        let sends: Vec<_> = runs
            .iter()
            .map(|run| {
                let run = run.clone();
                tokio::spawn(async move { run.signal("tick", &k, &format!("t{k}")).await })
            })
            .collect();
        for s in sends {
            within(LIMIT, "a signal", s).await???;
        }
    }
    assert_eq!(passivated_rounds, N.div_ceil(2));
    for run in runs {
        let me = run.id().to_owned();
        let out = within(LIMIT, "the result", run.result()).await?;
        if out.is_err() {
            dump(&run).await;
        }
        assert_eq!(out?, (0..N).map(|k| k * 2).collect::<Vec<_>>(), "{me}");
        let events = run.events().await?;
        assert_eq!(waits_on(&events, "tick"), N as usize, "{me}: {events:?}");
        assert_eq!(
            received(&events),
            (0..N).map(|k| format!("t{k}")).collect::<Vec<_>>(),
            "{me}"
        );
        assert!(completions(&events).values().all(|&n| n == 1), "{me}");
        assert_eq!(completions(&events).len(), N as usize, "{me}");
        for k in 0..N {
            assert_eq!(wf.tally.get(&format!("{me}/apply{k}")), 1, "{me}: step {k}");
        }
        ends_once(&events, &me);
        // One execution to begin with, one per crash (three), and one per
        // activation of the passivated run (five rounds).
        let execs = wf.tally.get(&format!("{me}/exec"));
        assert!(execs >= 1 + 3 + 5, "{me}: {execs} executions");
    }
    host.shutdown().await?;
    Ok(())
}
