//! `signal_with_start`, retention passes and a parent's late child end racing
//! deletes and new runs under the same ids.

use reel::Retention;
use reel::testing::TestClock;
use reel_storage::testing::{Fault, Op};

use crate::*;

/// `signal_with_start` racing a delete of the finished run under its id, both
/// ways round, forced by gates: one that read the finished run before the
/// delete is refused (`RunFinished`, or `UnknownRun` for a run deleted during
/// the call) and creates nothing; a delete that read the run before such a call
/// deletes it. Afterwards a call creates a new run carrying only its own
/// signal. Then, unforced, a delete and a call race twelve times: either the
/// call is refused and the id stays free, or it made a new run with its signal.
/// Ports Temporal sdk-go `test/integration_test.go::TestWorkflowIDReuseAllowDuplicate`
/// (a new run after the first closed) with DBOS `test_workflow_management.py::test_delete_workflow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn signal_with_start_racing_a_delete_is_refused_or_makes_a_new_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = faults_on(dir.path())?;
    let job = Job::default();
    let host = fault_host(&faults, &Arc::new(Gate::new()), &job).await?;
    let releasing = Releasing::default();
    let first = host
        .signal_with_start::<Job, _>("s", 1, "go", &5u32, "a")
        .await?;
    assert_eq!(within(LIMIT, "the first run", first.result()).await??, 105);

    // The call reads the finished run; its answer is held while the run is deleted.
    let (hold, read) = Fault::hold(Op::GetRun);
    let read = releasing.keep(read);
    faults.inject(hold.for_run("s"));
    let late = tokio::spawn({
        let host = host.clone();
        async move {
            host.signal_with_start::<Job, _>("s", 2, "go", &6u32, "b")
                .await
                .map(|_| ())
        }
    });
    within(LIMIT, "the call's read", read.wait_arrived()).await?;
    within(LIMIT, "the delete", host.run("s").delete()).await??;
    read.release();
    let got = within(LIMIT, "the late call", late).await??;
    assert!(
        matches!(got, Err(Error::RunFinished(_) | Error::UnknownRun(_))),
        "a signal_with_start that saw the finished run gave {got:?}"
    );
    assert!(
        is_unknown(&host.run("s").status().await),
        "the call made a run"
    );

    let second = host
        .signal_with_start::<Job, _>("s", 3, "go", &7u32, "c")
        .await?;
    assert_eq!(
        within(LIMIT, "the second run", second.result()).await??,
        307
    );
    let events = second.events().await?;
    let signals: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::SignalReceived { signal_id, .. } => Some(signal_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(signals, ["c"], "{events:?}");

    // The delete reads the run's end; its answer is held while a call comes.
    let (hold, read) = Fault::hold(Op::NextSeq);
    let read = releasing.keep(read);
    faults.inject(hold.for_run("s"));
    let delete = tokio::spawn({
        let host = host.clone();
        async move { host.run("s").delete().await }
    });
    within(LIMIT, "the delete's read", read.wait_arrived()).await?;
    let refused = host
        .signal_with_start::<Job, _>("s", 4, "go", &8u32, "d")
        .await
        .map(|_| ());
    assert!(
        matches!(refused, Err(Error::RunFinished(_))),
        "a call to the finished run gave {refused:?}"
    );
    read.release();
    within(LIMIT, "the held delete", delete).await???;
    assert!(is_unknown(&host.run("s").status().await));

    // Unforced: a finished run, then a delete and a call at once.
    for i in 0..12u32 {
        let id = format!("race-{i}");
        let done = host.start::<Job>(&id, 1000 + i).await?;
        assert_eq!(within(LIMIT, "a run", done.result()).await??, 1000 + i);
        let run = host.run(&id);
        let (deleted, called) = tokio::join!(
            run.delete(),
            host.signal_with_start::<Job, _>(&id, 10 + i, "go", &1u32, "x")
        );
        assert!(deleted.is_ok(), "{id}: the delete gave {deleted:?}");
        match called {
            Ok(new) => {
                assert_eq!(
                    within(LIMIT, "the new run", new.result()).await??,
                    (10 + i) * 100 + 1
                );
            }
            Err(Error::RunFinished(_) | Error::UnknownRun(_)) => {
                assert!(
                    is_unknown(&run.status().await),
                    "{id}: a refused call made a run"
                );
            }
            Err(e) => panic!("{id}: signal_with_start gave {e:?}"),
        }
    }
    host.shutdown().await?;
    Ok(())
}

/// Ten runs end and come due for retention while one waits (DBOS's blocked
/// workflow). A retention pass and an operator who deletes each id and starts
/// it again race: every old run is deleted once (by one or the other), every
/// new run under a freed id survives the pass (it is not due), and the waiting
/// run is never touched. Once the new runs are due, a pass deletes exactly
/// them. Ports DBOS `test_workflow_management.py::test_garbage_collection`
/// (collection spares the pending workflow) and duroxide
/// `bulk_deletion_integration_tests.rs::test_delete_instance_bulk_retention_policies`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_racing_new_runs_under_freed_ids_deletes_only_due_runs() -> anyhow::Result<()> {
    const HOUR: Duration = Duration::from_secs(3600);
    const RUNS: u32 = 10;
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let job = Job::default();
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .register(job.clone())
        .retention(Retention::keep_all().completed_after(HOUR).every(24 * HOUR))
        .build()
        .await?;
    let pending = host.start::<Job>("pending", 1).await?;
    suspended(&pending, "the pending run").await?;
    for i in 0..RUNS {
        let run = host.start::<Job>(&format!("g-{i}"), 1000 + i).await?;
        assert_eq!(within(LIMIT, "an old run", run.result()).await??, 1000 + i);
    }
    clock.advance(2 * HOUR);

    let pass = tokio::spawn({
        let host = host.clone();
        async move {
            let mut deleted = 0;
            loop {
                match host.enforce_retention().await? {
                    0 => return anyhow::Ok(deleted),
                    n => deleted += n,
                }
            }
        }
    });
    let operator = tokio::spawn({
        let host = host.clone();
        async move {
            let mut deleted = 0;
            for i in 0..RUNS {
                let id = format!("g-{i}");
                match host.run(&id).delete().await {
                    Ok(()) => deleted += 1,
                    Err(Error::UnknownRun(_)) => {}
                    Err(e) => anyhow::bail!("{id}: the delete gave {e:?}"),
                }
                host.start::<Job>(&id, 2000 + i).await?;
            }
            anyhow::Ok(deleted)
        }
    });
    let by_pass = within(LIMIT, "the retention pass", pass).await???;
    let by_operator = within(LIMIT, "the operator", operator).await???;
    assert_eq!(
        by_pass + by_operator,
        RUNS as usize,
        "pass {by_pass}, operator {by_operator}"
    );

    assert_eq!(host.enforce_retention().await?, 0, "a new run was due");
    for i in 0..RUNS {
        let run = host.handle::<Job>(&format!("g-{i}"));
        assert_eq!(within(LIMIT, "a new run", run.result()).await??, 2000 + i);
        let events = run.events().await?;
        assert_eq!(count(&events, |e| matches!(e, Event::RunStarted { .. })), 1);
    }
    assert!(matches!(
        pending.status().await?,
        RunStatus::Suspended { .. }
    ));
    assert_eq!(job.steps.get(), 1 + 2 * RUNS);

    clock.advance(2 * HOUR);
    let mut deleted = 0;
    loop {
        match host.enforce_retention().await? {
            0 => break,
            n => deleted += n,
        }
    }
    assert_eq!(deleted, RUNS as usize, "the second pass");
    for i in 0..RUNS {
        assert!(is_unknown(&host.run(&format!("g-{i}")).status().await));
    }
    pending.signal("go", &2u32, "g").await?;
    assert_eq!(
        within(LIMIT, "the pending run", pending.result()).await??,
        102
    );
    host.shutdown().await?;
    Ok(())
}

/// Waits for `go` and ends with it.
struct Kid;

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

/// Waits on its child `<id>-kid` and ends with its output.
struct Dad;

impl Workflow for Dad {
    const NAME: &'static str = "dad";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        let kid = format!("{}-kid", ctx.run_id());
        ctx.child::<Kid>(&kid, ()).await
    }
}

/// A passivated parent's child ends with 1; the parent's activation for that
/// end is held at its log read while the child is deleted and its id taken by
/// a new run that ends with 2. The parent gets the end of the child it called
/// (1), once, never the new run's. Ports DBOS
/// `test_workflow_management.py::test_delete_workflow` (deleting a child
/// spares its parent) and duroxide
/// `deletion_integration_tests.rs::test_identity_reuse_after_delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_parents_late_child_end_is_its_own_child_after_the_child_id_is_reused()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = faults_on(dir.path())?;
    let host = Host::builder()
        .store(faults.clone())
        .register(Dad)
        .register(Kid)
        .passivate_after(Duration::from_millis(1))
        .build()
        .await?;
    let dad = host.start::<Dad>("p", ()).await?;
    let kid = host.handle::<Kid>("p-kid");
    suspended(&kid, "the kid's wait").await?;
    suspended(&dad, "the parent's wait").await?;
    live_at_most(&host, 0, "both runs to passivate").await?;

    let releasing = Releasing::default();
    let (hold, read) = Fault::hold(Op::ReadLog);
    let read = releasing.keep(read);
    faults.inject(hold.for_run("p"));
    kid.signal("go", &1u32, "one").await?;
    assert_eq!(within(LIMIT, "the kid", kid.result()).await??, 1);
    within(LIMIT, "the parent's activation", read.wait_arrived()).await?;

    kid.delete().await?;
    let other = host.start::<Kid>("p-kid", ()).await?;
    suspended(&other, "the new kid's wait").await?;
    other.signal("go", &2u32, "two").await?;
    assert_eq!(within(LIMIT, "the new kid", other.result()).await??, 2);
    read.release();

    assert_eq!(within(LIMIT, "the parent", dad.result()).await??, 1);
    let events = dad.events().await?;
    assert_eq!(
        count(&events, |e| matches!(e, Event::ChildCompleted { .. })),
        1,
        "{events:?}"
    );
    host.shutdown().await?;
    Ok(())
}
