//! Duplicate starts, deletes and new starts under one id: plain, around a
//! supervisor restart, and in a tight loop on a passivating host.

use reel_storage::testing::{Fault, Op};

use crate::*;

/// A start while the run goes on returns that run (its input is not used); both
/// handles get its output. Deleted, the id is unknown to every operation; a
/// third start makes a new run from nothing: its own input, its step run again,
/// no signal of the old run. Ports Temporal sdk-go
/// `test/integration_test.go::TestWorkflowIDReuseIgnoreDuplicateWhileRunning`
/// (run 3 is a new run) and DBOS `test_workflow_management.py::test_delete_workflow`
/// (a deleted workflow has no status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_start_joins_the_run_and_a_start_after_its_delete_makes_a_new_one()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let job = Job::default();
    let host = Host::builder()
        .path(dir.path())
        .register(job.clone())
        .build()
        .await?;
    let first = host.start::<Job>("t", 1).await?;
    let second = host.start::<Job>("t", 2).await?;
    suspended(&first, "the run's wait").await?;
    first.signal("go", &5u32, "a").await?;
    // Sent as the run may be ending: taken (and left unused) or refused.
    let late = second.signal("go", &6u32, "b").await;
    assert!(
        matches!(late, Ok(()) | Err(Error::RunFinished(_))),
        "{late:?}"
    );
    assert_eq!(within(LIMIT, "first", first.result()).await??, 105);
    assert_eq!(within(LIMIT, "second", second.result()).await??, 105);
    let events = first.events().await?;
    assert_eq!(count(&events, |e| matches!(e, Event::RunStarted { .. })), 1);
    assert_eq!(job.steps.get(), 1);

    first.delete().await?;
    assert!(is_unknown(&first.status().await), "status after the delete");
    assert!(is_unknown(&first.result().await), "result after the delete");
    assert!(is_unknown(&first.events().await), "events after the delete");
    assert!(is_unknown(&first.signal("go", &1u32, "c").await));
    assert!(is_unknown(&first.delete().await), "a second delete");

    let third = host.start::<Job>("t", 3).await?;
    suspended(&third, "the new run's wait").await?;
    let events = third.events().await?;
    assert_eq!(
        count(&events, |e| matches!(e, Event::SignalReceived { .. })),
        0,
        "the new run inherited signals: {events:?}"
    );
    third.signal("go", &7u32, "a").await?;
    assert_eq!(within(LIMIT, "third", third.result()).await??, 307);
    assert_eq!(job.steps.get(), 2, "the new run ran its step once");
    host.shutdown().await?;
    Ok(())
}

/// Ends with `go` after its step; its first execution panics right after the
/// step, so the supervisor restarts it.
#[derive(Clone, Default)]
struct Crashy {
    steps: Counter,
    executions: Counter,
}

impl Workflow for Crashy {
    const NAME: &'static str = "crashy";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        ctx.step("work", |_| async {
            self.steps.bump();
            Ok::<_, String>(())
        })
        .await?;
        if self.executions.bump() == 1 {
            panic!("crash after the step");
        }
        ctx.wait_for_signal("go").await
    }
}

/// A delete while the supervisor restarts a crashed run (its restarted actor's
/// log read held) is refused as `InvalidState` and deletes nothing: the run
/// goes on without running its step again and ends. Then the delete goes
/// through, and a new run under the id starts from nothing. Ports duroxide
/// `deletion_integration_tests.rs::test_delete_error_cases` (a running instance
/// is `InstanceStillRunning`) and `test_concurrent_delete_operations` (delete
/// against a run on its way).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_during_a_supervisor_restart_is_refused_and_loses_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = faults_on(dir.path())?;
    let crashy = Crashy::default();
    let host = Host::builder()
        .store(faults.clone())
        .register(crashy.clone())
        .build()
        .await?;
    // The run's first actor works from its start's state: the first log read of
    // the run is its restarted actor's.
    let releasing = Releasing::default();
    let (hold, read) = Fault::hold(Op::ReadLog);
    let read = releasing.keep(read);
    faults.inject(hold.for_run("c"));
    let run = host.start::<Crashy>("c", ()).await?;
    within(LIMIT, "the restarted actor's read", read.wait_arrived()).await?;
    assert_eq!(crashy.executions.get(), 1);

    let refused = host.run("c").delete().await;
    assert!(
        matches!(refused, Err(Error::InvalidState { .. })),
        "a delete of a restarting run gave {refused:?}"
    );
    read.release();
    suspended(&run, "the restarted run's wait").await?;
    run.signal("go", &4u32, "g").await?;
    assert_eq!(within(LIMIT, "the run", run.result()).await??, 4);
    assert_eq!(crashy.steps.get(), 1, "the recorded step ran again");

    run.delete().await?;
    let again = host.start::<Crashy>("c", ()).await?;
    suspended(&again, "the new run's wait").await?;
    again.signal("go", &5u32, "g").await?;
    assert_eq!(within(LIMIT, "the new run", again.result()).await??, 5);
    assert_eq!(crashy.steps.get(), 2, "the new run ran its own step");
    host.shutdown().await?;
    Ok(())
}

/// One id, over and over on a host that passivates waiting runs at once: a run
/// ends (at once, or on a signal racing its passivation), is deleted right away
/// (its actor may still be winding down), and the id is started again. Every
/// run gives its own output, is unknown once deleted, and runs its step once.
/// Ports duroxide `deletion_integration_tests.rs::test_identity_reuse_after_delete`
/// as a loop, and DBOS `test_workflow_management.py::test_bulk_delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ends_deletes_and_new_starts_of_one_id_in_a_loop_keep_each_run_apart() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let job = Job::default();
    let host = Host::builder()
        .path(dir.path())
        .register(job.clone())
        .passivate_after(Duration::from_millis(1))
        .build()
        .await?;
    const ROUNDS: u32 = 30;
    for i in 0..ROUNDS {
        let (input, want) = if i % 2 == 0 {
            (1000 + i, 1000 + i)
        } else {
            (i, i * 100 + 1)
        };
        let run = within(LIMIT, "a start", host.start::<Job>("loop", input)).await??;
        if i % 2 == 1 {
            suspended(&run, "the run's wait").await?;
            run.signal("go", &1u32, &format!("go-{i}")).await?;
        }
        assert_eq!(
            within(LIMIT, "the run", run.result()).await??,
            want,
            "round {i}"
        );
        within(LIMIT, "the delete", run.delete()).await??;
        assert!(
            is_unknown(&run.status().await),
            "round {i}: status after the delete"
        );
    }
    assert_eq!(job.steps.get(), ROUNDS);
    live_at_most(&host, 0, "every actor to stop").await?;
    host.shutdown().await?;
    Ok(())
}
