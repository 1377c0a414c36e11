//! Misuse gets a clear typed error, never a panic, and never harms another run:
//! operations on finished runs, invalid run ids at every entry point, handles used
//! after shutdown, forks with bad cuts or ids, deleting around parents and children.

mod common;

use std::time::Duration;

use common::{Counter, within};
use reel::{
    Ctx, Error, Event, Host, QueueOptions, RunFilter, RunStatus, StartOptions, StatusKind,
    StepError, Workflow,
};

const LIMIT: Duration = Duration::from_secs(20);

/// Fails for good in its first step when the input says so, else waits for `go`.
struct Flaky;
impl Workflow for Flaky {
    const NAME: &'static str = "flaky";
    type Input = bool;
    type Output = u32;
    async fn run(&self, ctx: Ctx, fail: bool) -> reel::Result<u32> {
        ctx.step("first", |_| async move {
            if fail {
                Err(StepError::non_retryable("boom"))
            } else {
                Ok(1u32)
            }
        })
        .await?;
        ctx.wait_for_signal("go").await
    }
}

fn invalid_state(r: reel::Result<()>, run: &str, state: StatusKind, action: &str) {
    match r {
        Err(Error::InvalidState {
            run_id,
            state: s,
            action: a,
        }) => assert_eq!((run_id.as_str(), s, a.as_str()), (run, state, action)),
        other => panic!("{action} of {run}: expected InvalidState({state}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_cancelled_runs_refuse_operations_and_stay_as_they_are() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Flaky).await?;
    let failed = host.start::<Flaky>("failed", true).await?;
    assert!(matches!(
        within(LIMIT, "the failure", failed.result()).await?,
        Err(Error::Step { ref step, .. }) if step == "first"
    ));
    let cancelled = host.start::<Flaky>("cancelled", false).await?;
    within(LIMIT, "the wait", cancelled.wait_until_suspended()).await??;
    within(LIMIT, "the cancel", cancelled.cancel("no")).await??;

    let failed_log = failed.events().await?;
    let cancelled_log = cancelled.events().await?;
    for (run, kind) in [
        (&failed, StatusKind::Failed),
        (&cancelled, StatusKind::Cancelled),
    ] {
        let id = run.id().to_owned();
        assert_eq!(
            run.signal("go", &1u32, "late").await,
            Err(Error::RunFinished(id.clone()))
        );
        assert_eq!(
            run.approve("x", true, None).await,
            Err(Error::RunFinished(id.clone()))
        );
        invalid_state(run.pause().await, &id, kind, "pause");
        invalid_state(run.resume().await, &id, kind, "resume");
        invalid_state(run.retry().await, &id, kind, "retry");
        assert_eq!(
            run.wait_until_suspended().await,
            Err(Error::RunFinished(id.clone()))
        );
        assert!(matches!(
            host.signal_with_start::<Flaky, _>(&id, false, "go", &1u32, "sws").await,
            Err(Error::RunFinished(ref r)) if *r == id
        ));
        assert!(matches!(
            host.fork(&id, u64::MAX, "never").await,
            Err(Error::InvalidCut { .. })
        ));
    }
    assert_eq!(
        failed.cancel("late").await,
        Err(Error::RunFinished("failed".into()))
    );
    assert_eq!(
        failed.terminate("late").await,
        Err(Error::RunFinished("failed".into()))
    );
    // Cancelling a cancelled run does nothing more.
    cancelled.cancel("again").await?;
    cancelled.terminate("again").await?;
    assert_eq!(cancelled.result().await, Err(Error::Cancelled("no".into())));
    assert_eq!(failed.events().await?, failed_log);
    assert_eq!(cancelled.events().await?, cancelled_log);
    assert!(matches!(failed.status().await?, RunStatus::Failed { .. }));
    assert_eq!(cancelled.status().await?, RunStatus::Cancelled);
    assert!(matches!(
        host.run("never").status().await,
        Err(Error::UnknownRun(_))
    ));
    host.shutdown().await?;
    Ok(())
}

/// Starts a child whose id is its input, and returns what the call gave.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, child: String) -> reel::Result<String> {
        match ctx.child::<Flaky>(&child, true).await {
            Ok(n) => Ok(format!("ok {n}")),
            Err(e) => Ok(format!("err {e}")),
        }
    }
}

/// Starts a detached child whose id is its input.
struct DetachParent;
impl Workflow for DetachParent {
    const NAME: &'static str = "detach-parent";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, child: String) -> reel::Result<String> {
        match ctx.start_child::<Flaky>(&child, false).await {
            Ok(h) => Ok(format!("ok {}", h.id())),
            Err(e) => Ok(format!("err {e}")),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_run_ids_are_refused_at_every_entry_point() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Flaky)
        .register(Parent)
        .register(DetachParent)
        .queue("q", QueueOptions::default())
        .build()
        .await?;
    let good = host.start::<Flaky>("good", false).await?;
    within(LIMIT, "the wait", good.wait_until_suspended()).await??;

    let long = "x".repeat(513);
    for bad in ["", long.as_str(), "a\0b"] {
        let refused = |r: reel::Result<()>, what: &str| match r {
            Err(Error::Storage(_) | Error::InvalidArgument(_) | Error::UnknownRun(_)) => {}
            other => panic!("{what} with id {bad:?}: {other:?}"),
        };
        refused(host.start::<Flaky>(bad, false).await.map(|_| ()), "start");
        refused(
            host.start_on::<Flaky>("q", bad, false).await.map(|_| ()),
            "start_on",
        );
        refused(
            host.start_with::<Flaky>(
                bad,
                false,
                StartOptions::default().timeout(Duration::from_secs(1)),
            )
            .await
            .map(|_| ()),
            "start_with",
        );
        refused(
            host.signal_with_start::<Flaky, _>(bad, false, "go", &1u32, "s")
                .await
                .map(|_| ()),
            "signal_with_start",
        );
        refused(host.fork("good", 1, bad).await.map(|_| ()), "fork");
        let h = host.run(bad);
        refused(h.status().await.map(|_| ()), "status");
        refused(h.signal("go", &1u32, "s").await, "signal");
        refused(h.cancel("x").await, "cancel");
        refused(h.pause().await, "pause");
        refused(h.delete().await, "delete");
        refused(h.events().await.map(|_| ()), "events");
        refused(h.result::<u32>().await.map(|_| ()), "result");

        // A handler asking for a child with a bad id gets an error it can handle.
        let p = host
            .start::<Parent>(&format!("p-{}", bad.len()), bad.to_owned())
            .await?;
        let said = within(LIMIT, "the parent", p.result()).await??;
        assert!(said.starts_with("err "), "{said}");
        let d = host
            .start::<DetachParent>(&format!("d-{}", bad.len()), bad.to_owned())
            .await?;
        let said = within(LIMIT, "the parent", d.result()).await??;
        assert!(said.starts_with("err "), "{said}");
    }
    // Nothing with a bad id was stored; the good run is untouched.
    let ids: Vec<String> = host.runs().await?.into_iter().map(|r| r.run_id).collect();
    assert!(
        ids.iter()
            .all(|id| !id.is_empty() && id.len() <= 512 && !id.contains('\0')),
        "{ids:?}"
    );
    assert!(matches!(good.status().await?, RunStatus::Suspended { .. }));
    good.signal("go", &9u32, "g").await?;
    assert_eq!(within(LIMIT, "good", good.result()).await??, 9);

    // The longest valid id works end to end, across a restart.
    let max = "m".repeat(512);
    let run = host.start::<Flaky>(&max, false).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    host.shutdown().await?;
    let host = Host::builder()
        .path(dir.path())
        .register(Flaky)
        .register(Parent)
        .register(DetachParent)
        .queue("q", QueueOptions::default())
        .build()
        .await?;
    let run = host.handle::<Flaky>(&max);
    run.signal("go", &4u32, "g").await?;
    assert_eq!(within(LIMIT, "the long id", run.result()).await??, 4);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_after_shutdown_answer_shutdown() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Flaky).await?;
    let waiting = host.start::<Flaky>("w", false).await?;
    within(LIMIT, "the wait", waiting.wait_until_suspended()).await??;
    let pending = tokio::spawn({
        let w = waiting.clone();
        async move { w.result().await }
    });
    let clone = host.clone();
    host.shutdown().await?;
    // A result() waiting when the host shut down ends.
    assert_eq!(
        within(LIMIT, "the pending result", pending).await??,
        Err(Error::Shutdown)
    );
    assert_eq!(waiting.status().await, Err(Error::Shutdown));
    assert_eq!(waiting.signal("go", &1u32, "s").await, Err(Error::Shutdown));
    assert_eq!(waiting.result().await, Err(Error::Shutdown));
    assert_eq!(waiting.cancel("x").await, Err(Error::Shutdown));
    assert!(matches!(
        clone.start::<Flaky>("new", false).await,
        Err(Error::Shutdown)
    ));
    assert!(matches!(
        clone.list(RunFilter::default()).await,
        Err(Error::Shutdown)
    ));
    assert!(matches!(
        clone.fork("w", 1, "f").await,
        Err(Error::Shutdown)
    ));
    clone.shutdown().await?;

    // Nothing was lost or changed by the refused calls.
    let host = common::hosts::open(dir.path(), Flaky).await?;
    assert!(matches!(
        host.run("new").status().await,
        Err(Error::UnknownRun(_))
    ));
    let waiting = host.handle::<Flaky>("w");
    waiting.signal("go", &5u32, "s").await?;
    assert_eq!(within(LIMIT, "w", waiting.result()).await??, 5);
    host.shutdown().await?;
    Ok(())
}

/// Three steps counted, a signal between the second and third.
#[derive(Clone)]
struct Three {
    a: Counter,
    b: Counter,
    c: Counter,
}
impl Workflow for Three {
    const NAME: &'static str = "three";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let a = ctx
            .step("a", |_| async {
                self.a.bump();
                Ok::<_, String>(n)
            })
            .await?;
        let b = ctx
            .step("b", |_| async {
                self.b.bump();
                Ok::<_, String>(a + 1)
            })
            .await?;
        let extra: u32 = ctx.wait_for_signal("more").await?;
        ctx.step("c", |_| async {
            self.c.bump();
            Ok::<_, String>(b + extra)
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_from_each_step_of_a_finished_run_reruns_only_what_follows() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let three = Three {
        a: Counter::default(),
        b: Counter::default(),
        c: Counter::default(),
    };
    let host = common::hosts::open(dir.path(), three.clone()).await?;
    let run = host.start::<Three>("orig", 10).await?;
    run.signal("more", &100u32, "m1").await?;
    assert_eq!(within(LIMIT, "orig", run.result()).await??, 111);
    let records = run.records().await?;
    let seq = |f: &dyn Fn(&Event) -> bool| {
        records
            .iter()
            .find(|r| f(&r.event))
            .map(|r| r.seq)
            .expect("event present")
    };
    let at_b = seq(&|e| matches!(e, Event::StepStarted { id, .. } if id == "b"));
    let end = seq(&|e| matches!(e, Event::RunCompleted { .. }));

    // From step b: a is not run again, b and c are. A signal received before the
    // cut is carried; one received after it (the signal raced step b) is not, and
    // the fork waits for one of its own.
    let signal_seq = seq(&|e| matches!(e, Event::SignalReceived { .. }));
    let fork_b = host.fork("orig", at_b, "fork-b").await?;
    if signal_seq > at_b {
        fork_b.signal("more", &100u32, "m1").await?;
    }
    let got: u32 = within(LIMIT, "fork-b", fork_b.result()).await??;
    assert_eq!(got, 111);
    assert_eq!(three.a.get(), 1);
    assert_eq!(three.b.get(), 2);
    if signal_seq < at_b {
        assert_eq!(three.c.get(), 2);
    }

    // At the end: nothing runs again, same result.
    let fork_end = host.fork("orig", end, "fork-end").await?;
    let got: u32 = within(LIMIT, "fork-end", fork_end.result()).await??;
    assert_eq!(got, 111);
    assert_eq!((three.a.get(), three.b.get()), (1, 2));

    // Past the end, onto itself, onto a taken id: refused, nothing written.
    assert!(matches!(
        host.fork("orig", end + 1, "f2").await,
        Err(Error::InvalidCut { .. })
    ));
    assert!(matches!(
        host.fork("orig", u64::MAX, "f2").await,
        Err(Error::InvalidCut { .. })
    ));
    assert!(matches!(
        host.fork("orig", at_b, "orig").await,
        Err(Error::RunExists { .. })
    ));
    assert!(matches!(
        host.run("f2").status().await,
        Err(Error::UnknownRun(_))
    ));
    assert_eq!(run.records().await?, records);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_of_a_waiting_run_leaves_the_original_waiting() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let three = Three {
        a: Counter::default(),
        b: Counter::default(),
        c: Counter::default(),
    };
    let host = common::hosts::open(dir.path(), three.clone()).await?;
    let run = host.start::<Three>("w", 1).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    let records = run.records().await?;
    let wait = records
        .iter()
        .find(|r| matches!(r.event, Event::SignalAwaited { .. }))
        .map(|r| r.seq)
        .expect("a wait");
    let fork = host.fork("w", wait, "w-fork").await?;
    within(LIMIT, "the fork to wait", fork.wait_until_suspended()).await??;
    fork.signal("more", &10u32, "f").await?;
    assert_eq!(within(LIMIT, "fork", fork.result::<u32>()).await??, 12);
    assert!(matches!(run.status().await?, RunStatus::Suspended { .. }));
    run.signal("more", &20u32, "o").await?;
    assert_eq!(within(LIMIT, "orig", run.result()).await??, 22);
    assert_eq!((three.a.get(), three.b.get(), three.c.get()), (1, 1, 2));
    host.shutdown().await?;
    Ok(())
}

/// Starts a detached child and ends.
struct Spawner;
impl Workflow for Spawner {
    const NAME: &'static str = "spawner";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.start_child::<Flaky>("kid", false).await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_parent_harms_no_running_child() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Flaky, Spawner).await?;
    let parent = host.start::<Spawner>("dad", ()).await?;
    within(LIMIT, "the parent", parent.result()).await??;
    let kid = host.handle::<Flaky>("kid");
    within(LIMIT, "the kid to wait", kid.wait_until_suspended()).await??;
    invalid_state(kid.delete().await, "kid", StatusKind::Suspended, "delete");
    parent.delete().await?;
    assert!(matches!(parent.children().await, Err(Error::UnknownRun(_))));
    kid.signal("go", &6u32, "g").await?;
    assert_eq!(within(LIMIT, "the kid", kid.result()).await??, 6);
    let listed = host.list(RunFilter::default().parent("dad")).await?;
    assert!(
        listed.items.iter().all(|r| r.run_id == "kid"),
        "{:?}",
        listed.items
    );
    // The parent's id can be used again; it does not adopt the old child.
    let again = host.start::<Spawner>("dad", ()).await?;
    within(LIMIT, "the new parent", again.result()).await??;
    kid.delete().await?;
    host.shutdown().await?;
    Ok(())
}
