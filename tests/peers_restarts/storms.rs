//! Lost write answers, and storms of runs crashing at once over stale log
//! reads.

use crate::*;

/// A one-hour sleep, a signal `evt`, a step.
#[derive(Clone, Default)]
struct LostAnswers {
    tally: Tally,
}

impl Workflow for LostAnswers {
    const NAME: &'static str = "lost-answers";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let me = ctx.run_id().to_owned();
        ctx.sleep(Duration::from_secs(3600)).await?;
        let v: String = ctx.wait_for_signal("evt").await?;
        ctx.step("echo", |_| async {
            self.tally.bump(format!("{me}/echo"));
            Ok::<_, String>(format!("{v}!"))
        })
        .await
    }
}

/// Ports duroxide `tests/reliability_tests.rs::crash_after_append_before_ack_timer`
/// and `::external_duplicate_workitems_dedup`: the store records a timer's
/// firing but its writer is told the write failed (the crash between append
/// and acknowledgement), and a signal's write lands while its sender hears an
/// error and sends it again with the same id. The run records one
/// `TimerFired` and one `SignalReceived`, takes the signal once, runs its step
/// once, and every acknowledged write is in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_write_answers_record_a_timer_and_a_signal_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let wf = LostAnswers::default();
    let host = Host::builder()
        .store(faults.clone())
        .clock(clock.clone())
        .register(wf.clone())
        .restart_limit(5, Duration::from_secs(60))
        .build()
        .await?;
    let run = host.start::<LostAnswers>("lost", ()).await?;
    within(LIMIT, "the sleep", run.wait_until_suspended()).await??;
    // The next write of the run (the timer's firing) lands, its answer is lost.
    faults.inject(Fault::lose_answer().for_run("lost"));
    clock.advance(Duration::from_secs(7200));
    until_log(&run, LIMIT, "the signal wait", |e| waits_on(e, "evt") > 0).await?;
    assert_eq!(faults.injected(), 1, "the timer's write kept its answer");
    faults.inject(Fault::lose_answer().for_run("lost"));
    let first = within(LIMIT, "the signal", run.signal("evt", "ok", "evt-1")).await?;
    assert!(
        matches!(first, Ok(()) | Err(Error::Storage(_))),
        "a lost answer reads as a storage error (or is retried): {first:?}"
    );
    // Sent again with the same id: taken once, whatever the first did.
    match within(LIMIT, "the signal again", run.signal("evt", "ok", "evt-1")).await? {
        Ok(()) | Err(Error::RunFinished(_)) => {}
        Err(e) => panic!("the resend: {e:?}"),
    }
    let out = within(LIMIT, "the result", run.result()).await?;
    if out.is_err() {
        dump(&run).await;
    }
    assert_eq!(out?, "ok!");
    let events = run.events().await?;
    assert_eq!(
        count(&events, |e| matches!(e, Event::TimerFired { .. })),
        1,
        "{events:?}"
    );
    assert_eq!(received(&events), ["evt-1"], "{events:?}");
    assert_eq!(waits_on(&events, "evt"), 1, "{events:?}");
    assert_eq!(
        completions(&events),
        BTreeMap::from([("echo".to_owned(), 1)])
    );
    assert_eq!(wf.tally.get("lost/echo"), 1);
    ends_once(&events, "lost");
    assert_eq!(faults.injected(), 2);
    faults
        .check_acknowledged()
        .map_err(|e| anyhow::anyhow!(e))?;
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------

/// Takes `n` signals, each through a step; the third crashes the handler (once
/// per run).
#[derive(Clone, Default)]
struct Storm {
    tally: Tally,
    crashed: FirstTime,
}

impl Workflow for Storm {
    const NAME: &'static str = "storm";
    type Input = u32;
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<u32>> {
        let me = ctx.run_id().to_owned();
        let mut out = Vec::new();
        for k in 0..n {
            let v: u32 = ctx.wait_for_signal("s").await?;
            if k == 2 && self.crashed.first(me.clone()) {
                panic!("storm");
            }
            let w = ctx
                .step("take", |_| async {
                    self.tally.bump(format!("{me}/take{k}"));
                    Ok::<_, String>(v + 1)
                })
                .await?;
            out.push(w);
        }
        Ok(out)
    }
}

/// Sixteen `Storm` runs over a store whose log reads answer late (a stale
/// snapshot, as a busy store gives), each sent the same six signals at once,
/// the third of which crashes all of them. Checks each run's result and log
/// (every signal taken once and in order, each wait and each step recorded
/// once, one end, every acknowledged write kept) and returns the step body
/// counts (`run/take<k>`).
async fn crash_storm(wf: &Storm) -> anyhow::Result<Vec<(String, u32)>> {
    const RUNS: u32 = 16;
    const N: u32 = 6;
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let host = Host::builder()
        .store(faults.clone())
        .register(wf.clone())
        .restart_limit(3, Duration::from_secs(60))
        .build()
        .await?;
    let mut runs = Vec::new();
    for r in 0..RUNS {
        runs.push(host.start::<Storm>(&format!("s{r}"), N).await?);
    }
    faults.inject(Fault::delay(Op::ReadLog, Duration::from_millis(3)).until_healed());
    for k in 0..N {
        let sends: Vec<_> = runs
            .iter()
            .map(|run| {
                let run = run.clone();
                tokio::spawn(async move { run.signal("s", &k, &format!("s{k}")).await })
            })
            .collect();
        for s in sends {
            within(LIMIT, "a signal", s).await???;
        }
    }
    let mut bodies = Vec::new();
    for run in &runs {
        let me = run.id().to_owned();
        let out = within(LIMIT, "the result", run.result()).await?;
        if out.is_err() {
            dump(run).await;
        }
        assert_eq!(out?, (1..=N).collect::<Vec<_>>(), "{me}");
        let events = run.events().await?;
        assert_eq!(waits_on(&events, "s"), N as usize, "{me}: {events:?}");
        assert_eq!(
            received(&events),
            (0..N).map(|k| format!("s{k}")).collect::<Vec<_>>(),
            "{me}"
        );
        assert_eq!(completions(&events).len(), N as usize, "{me}");
        assert!(completions(&events).values().all(|&n| n == 1), "{me}");
        ends_once(&events, &me);
        for k in 0..N {
            let key = format!("{me}/take{k}");
            let n = wf.tally.get(&key);
            if n != 1 {
                dump(run).await;
            }
            bodies.push((key, n));
        }
    }
    faults.heal();
    faults
        .check_acknowledged()
        .map_err(|e| anyhow::anyhow!(e))?;
    host.shutdown().await?;
    Ok(bodies)
}

/// Ports Temporal sdk-core `integ_tests/workflow_tests.rs::parallel_workflows_same_queue`
/// (25 workflows driven at once) with `fail_wf_task`'s failure in every one of
/// them at the same moment: sixteen runs take the same signal and all crash on
/// it, while every read of a log answers late and the test keeps signalling.
/// Every run is restarted from its own log and takes each signal once, in
/// order; each wait and each step is recorded once, every step body ran; every
/// acknowledged write is in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_runs_crashing_at_once_over_stale_reads_each_take_every_signal_once()
-> anyhow::Result<()> {
    let wf = Storm::default();
    for (key, n) in crash_storm(&wf).await? {
        assert!(n >= 1, "{key}: recorded without its body having run");
    }
    Ok(())
}

/// Ports DBOS `tests/test_dbos.py::test_recovery_workflow_step` (recovery
/// reruns the workflow, `step_counter == 1`) onto the crash storm above: the
/// handlers crash *before* calling the third step, so no step body is under
/// way at the crash and, as reel documents ("a step that was running when the
/// process died runs again"), none may run twice. It did, now and then: the
/// restarted actor read the log while the crashed execution's last write
/// (its `SignalAwaited`) was still on its way, the new execution walked past
/// the end of that stale log and ran the step body at once (a `StepStarted` is
/// not waited for), its append was then refused by the sequence check and its
/// writer fenced, the actor restarted again and the body ran a second time. A
/// restarted actor now reads the log only after an empty append, queued behind
/// the crashed execution's writes, has landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_not_under_way_at_a_crash_runs_once_after_the_restart() -> anyhow::Result<()> {
    for round in 0..4 {
        let wf = Storm::default();
        for (key, n) in crash_storm(&wf).await? {
            assert_eq!(n, 1, "round {round}: {key}: step body runs");
        }
    }
    Ok(())
}
