//! Whoever waits for a run's end waits for its LAST segment: a run that
//! continues as new (once, several times) while others wait on it.
//!
//! - `result()` callers that began waiting in segment 0 get the output (or the
//!   error, or the cancel) of the last segment, also when the callers begin
//!   right as the run switches segments.
//! - A parent waiting (`ctx.child`) on its own child that hops gets the child's
//!   last end: completed, failed, or cancelled from outside in a later segment.
//! - A run waiting on a run it did not start (an attached wait) gets that run's
//!   last end; a waiter that itself continues as new while attached does not
//!   cancel the run it waits on, and its new segment still gets that run's end.
//! - A child that continues as new while its parent is cancelled ends
//!   cancelled (also when the cancel races the child's switch).
//! - Signals sent right around the switch all arrive once; a signal id sent
//!   twice across the switch (while the first is carried over unconsumed) is
//!   delivered once.
//! - `wait_until_suspended`, `status()`, `info()` and `events()` across the
//!   switch.
//!
//! Timing is driven by signals and a step gate; every wait has a deadline.

#[path = "common/cas_workflows.rs"]
mod cas_workflows;
mod common;

use std::time::Duration;

use cas_workflows::*;
use common::within;
use reel::{Error, Event, Host, RunStatus};

/// How often a wait for a run's segment looks again.
const NAP: Duration = Duration::from_millis(5);

async fn open(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Hopper)
        .register(Waiter)
        .register(Held)
        .register(Collector)
        .build()
        .await
}

fn callers(host: &Host, id: &str, n: usize) -> Vec<tokio::task::JoinHandle<reel::Result<String>>> {
    (0..n)
        .map(|_| {
            let h = host.handle::<Hopper>(id);
            tokio::spawn(async move { h.result().await })
        })
        .collect()
}

async fn answers(
    waits: Vec<tokio::task::JoinHandle<reel::Result<String>>>,
) -> anyhow::Result<Vec<reel::Result<String>>> {
    let mut out = Vec::new();
    for w in waits {
        out.push(within(LIMIT, "a result() caller", w).await??);
    }
    Ok(out)
}

/// Probe 1 (and 5): `result()` callers that began in segment 0 get the last
/// segment's end, for one and for several hops, for each kind of end; status,
/// info and events follow the segments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_callers_of_segment_zero_get_the_last_segments_end() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    for hops in [1u32, 3] {
        for end in [End::Complete, End::Fail, End::Cancel] {
            let id = format!("hop-{hops}-{end:?}");
            let run = host.start::<Hopper>(&id, (hops, Vec::new(), end)).await?;
            until_segment(&host, &id, 0, NAP).await?;
            let waits = callers(&host, &id, 3);
            for k in 0..=hops {
                let status = until_segment(&host, &id, k, NAP).await?;
                assert_eq!(
                    status,
                    RunStatus::Suspended {
                        waiting_on: "signal `go`".into()
                    },
                    "{id}: status in segment {k}"
                );
                assert_eq!(run.status().await?, status, "{id}: status() in segment {k}");
                let events = run.events().await?;
                assert_eq!(
                    count(&events, "ContinuedAsNew"),
                    k as usize,
                    "{id}: {events:?}"
                );
                assert_eq!(count(&events, "RunStarted"), k as usize + 1, "{id}");
                run.signal("go", &format!("g{k}"), &format!("go-{k}"))
                    .await?;
            }
            let want: Vec<String> = (0..=hops).map(|k| format!("g{k}")).collect();
            if end == End::Cancel {
                until_segment(&host, &id, hops, NAP).await?;
                run.cancel("enough").await?;
            }
            for (i, got) in answers(waits).await?.into_iter().enumerate() {
                match (end, got) {
                    (End::Complete, Ok(out)) => assert_eq!(out, want.join(","), "{id} #{i}"),
                    (End::Fail, Err(Error::Failed(m))) => {
                        assert_eq!(m, format!("failed after {}", want.join(",")), "{id} #{i}")
                    }
                    (End::Cancel, Err(Error::Cancelled(r))) => {
                        assert!(r.contains("enough"), "{id} #{i}: {r}")
                    }
                    (end, got) => panic!("{id} #{i}: ended {end:?}, caller got {got:?}"),
                }
            }
            let info = run.info().await?;
            assert_eq!(info.segment, hops, "{id}");
            assert!(ended(&info.status), "{id}: {info:?}");
        }
    }
    host.shutdown().await?;
    Ok(())
}

/// Probe 1: a cancel in a middle segment ends every caller's wait with the
/// cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_callers_get_a_cancel_of_a_middle_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let run = host
        .start::<Hopper>("mid", (3, Vec::new(), End::Complete))
        .await?;
    until_segment(&host, "mid", 0, NAP).await?;
    let waits = callers(&host, "mid", 3);
    run.signal("go", "a", "go-a").await?;
    until_segment(&host, "mid", 1, NAP).await?;
    run.cancel("mid-way").await?;
    for got in answers(waits).await? {
        assert!(
            matches!(&got, Err(Error::Cancelled(r)) if r.contains("mid-way")),
            "{got:?}"
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// Probe 1: callers that begin right as the run switches segments (the `go`
/// that makes it continue is sent while they are being spawned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_callers_racing_the_switch_get_the_last_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    for i in 0..15 {
        let id = format!("race-{i}");
        let run = host
            .start::<Hopper>(&id, (1, Vec::new(), End::Complete))
            .await?;
        until_segment(&host, &id, 0, NAP).await?;
        let send = {
            let run = run.clone();
            tokio::spawn(async move { run.signal("go", "a", "go-a").await })
        };
        let mut waits = Vec::new();
        for _ in 0..6 {
            waits.extend(callers(&host, &id, 1));
            tokio::task::yield_now().await;
        }
        within(LIMIT, "the go", send).await???;
        until_segment(&host, &id, 1, NAP).await?;
        waits.extend(callers(&host, &id, 2));
        run.signal("go", "b", "go-b").await?;
        for got in answers(waits).await? {
            assert_eq!(got?, "a,b", "{id}");
        }
    }
    host.shutdown().await?;
    Ok(())
}

/// Probe 2: a parent waiting on its own child that continues as new twice gets
/// the child's last end: completed, failed, or cancelled from outside in the
/// last segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_gets_the_last_end_of_its_hopping_child() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    for end in [End::Complete, End::Fail, End::Cancel] {
        let (p, c) = (format!("mom-{end:?}"), format!("kid-{end:?}"));
        let parent = host.start::<Waiter>(&p, (c.clone(), 2, end, 0)).await?;
        let kid = host.handle::<Hopper>(&c);
        for k in 0..3 {
            until_segment(&host, &c, k, NAP).await?;
            kid.signal("go", &format!("g{k}"), &format!("go-{k}"))
                .await?;
        }
        if end == End::Cancel {
            until_segment(&host, &c, 2, NAP).await?;
            kid.cancel("from outside").await?;
        }
        let out = within(LIMIT, "the parent", parent.result()).await??;
        let ok = match end {
            End::Complete => out == "Ok(\"g0,g1,g2\")",
            End::Fail => out.starts_with("Err(Failed") && out.contains("failed after g0,g1,g2"),
            End::Cancel => out.starts_with("Err(Cancelled") && out.contains("from outside"),
        };
        assert!(ok, "{end:?}: the parent got {out}");
        assert_eq!(
            host.run(&c).info().await?.parent.as_deref(),
            Some(p.as_str())
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// Probe 2: an attached wait (the waiter did not start the run) on a run that
/// continues as new twice and then completes, fails, or is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_wait_gets_the_last_end_of_a_hopping_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    for end in [End::Complete, End::Fail, End::Cancel] {
        let theirs = format!("theirs-{end:?}");
        let run = host.start::<Hopper>(&theirs, (2, Vec::new(), end)).await?;
        let waiter = host
            .start::<Waiter>(
                &format!("att-{end:?}"),
                (theirs.clone(), 9, End::Complete, 0),
            )
            .await?;
        waiter.wait_until_suspended().await?;
        for k in 0..3 {
            until_segment(&host, &theirs, k, NAP).await?;
            run.signal("go", &format!("g{k}"), &format!("go-{k}"))
                .await?;
        }
        if end == End::Cancel {
            until_segment(&host, &theirs, 2, NAP).await?;
            run.cancel("theirs cancelled").await?;
        }
        let out = within(LIMIT, "the attached waiter", waiter.result()).await??;
        let ok = match end {
            End::Complete => out == "Ok(\"g0,g1,g2\")",
            End::Fail => out.starts_with("Err(Failed") && out.contains("failed after g0,g1,g2"),
            End::Cancel => out.starts_with("Err(Cancelled") && out.contains("theirs cancelled"),
        };
        assert!(ok, "{end:?}: the attached waiter got {out}");
        // The run the waiter attached to is not its child.
        assert_eq!(host.run(&theirs).info().await?.parent, None);
    }
    host.shutdown().await?;
    Ok(())
}

/// Probe 3: a waiter that continues as new (twice) while attached to a run it
/// did not start does not cancel that run, and its last segment gets the run's
/// end. Its own child, in the same position, is cancelled by the first hop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hopping_waiter_spares_the_run_it_attached_to() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let run = host
        .start::<Hopper>("spared", (1, Vec::new(), End::Complete))
        .await?;
    let waiter = host
        .start::<Waiter>("hopping-att", ("spared".into(), 9, End::Complete, 2))
        .await?;
    for k in 0..3 {
        until_segment(&host, "hopping-att", k, NAP).await?;
        if k < 2 {
            waiter.signal("hop", &(), &format!("hop-{k}")).await?;
        }
    }
    let status = run.status().await?;
    assert!(
        matches!(status, RunStatus::Suspended { .. }),
        "the attached run goes on after the waiter's hops: {status:?}"
    );
    run.signal("go", "a", "go-a").await?;
    until_segment(&host, "spared", 1, NAP).await?;
    run.signal("go", "b", "go-b").await?;
    assert_eq!(
        within(LIMIT, "the hopping waiter", waiter.result()).await??,
        "Ok(\"a,b\")"
    );
    // The control: the waiter's own child is cancelled by its first hop.
    let waiter = host
        .start::<Waiter>("hopping-own", ("own-kid".into(), 9, End::Complete, 1))
        .await?;
    until_segment(&host, "hopping-own", 0, NAP).await?;
    waiter.signal("hop", &(), "hop-0").await?;
    let kid = host.handle::<Hopper>("own-kid");
    let err = within(LIMIT, "the own child", kid.result())
        .await?
        .expect_err("the own child is cancelled");
    assert!(err.to_string().contains("continued as new"), "{err}");
    let out = within(LIMIT, "the waiter", waiter.result()).await??;
    assert!(out.starts_with("Err(Cancelled"), "{out}");
    host.shutdown().await?;
    Ok(())
}

/// Probe 3: a child that continues as new while its parent is cancelled ends
/// cancelled: with the cancel after the switch, and racing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hopping_child_of_a_cancelled_parent_is_cancelled() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    for i in 0..12 {
        let (p, c) = (format!("cp-{i}"), format!("cc-{i}"));
        let parent = host
            .start::<Waiter>(&p, (c.clone(), 3, End::Complete, 0))
            .await?;
        let kid = host.handle::<Hopper>(&c);
        until_segment(&host, &c, 0, NAP).await?;
        kid.signal("go", "a", "go-a").await?;
        until_segment(&host, &c, 1, NAP).await?;
        if i % 2 == 0 {
            // After the switch.
            parent.cancel("parent cancelled").await?;
        } else {
            // Racing the switch to segment 2.
            let k = kid.clone();
            let send = tokio::spawn(async move { k.signal("go", "b", "go-b").await });
            parent.cancel("parent cancelled").await?;
            // The go may find the kid cancelled already.
            let _ = within(LIMIT, "the go", send).await??;
        }
        // The parent's cancel asks the kid to cancel ("parent cancelled: ..."); the
        // parent's handler then returns what its call answered, so the parent
        // completes and asks its unfinished kid again, in the same words: whichever
        // of the two requests lands first, the kid ends with the parent's cancel.
        let got = within(LIMIT, "the kid's end", kid.result()).await?;
        assert!(
            matches!(&got, Err(Error::Cancelled(r))
                if r == "parent cancelled: parent cancelled"),
            "{c}: {got:?}; its info {:?}",
            kid.info().await
        );
        assert_eq!(kid.status().await?, RunStatus::Cancelled);
        let out = within(LIMIT, "the parent's end", parent.result()).await?;
        // The waiter returns what its call answered: the cancel.
        assert!(
            matches!(&out, Ok(s) if s.starts_with("Err(Cancelled")),
            "{p}: {out:?}"
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// Probe 4: signals sent right around the switch all reach the new segment
/// once, in order per sender; a signal id sent again while its first delivery
/// is carried over unconsumed (before the switch, racing it, after it) is
/// dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_around_the_switch_arrive_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    for i in 0..12 {
        let id = format!("col-{i}");
        let run = host.start::<Collector>(&id, 0).await?;
        until_segment(&host, &id, 0, NAP).await?;
        // Before the switch; its id sent again racing the switch and after it.
        run.signal("x", &1u32, "x-1").await?;
        let racer = {
            let run = run.clone();
            tokio::spawn(async move {
                for n in 2..6u32 {
                    run.signal("x", &n, &format!("x-{n}")).await?;
                    run.signal("x", &1u32, "x-1").await?;
                }
                reel::Result::<()>::Ok(())
            })
        };
        run.signal("switch", &(), "switch").await?;
        within(LIMIT, "the racing sender", racer).await???;
        until_segment(&host, &id, 1, NAP).await?;
        for n in [1u32, 3, 5] {
            run.signal("x", &n, &format!("x-{n}")).await?;
        }
        run.signal("x", &6u32, "x-6").await?;
        run.signal("end", &(), "end").await?;
        let got = within(LIMIT, "the collector", run.result()).await??;
        assert_eq!(
            got,
            vec![1, 2, 3, 4, 5, 6],
            "{id}: {:?}",
            run.events().await?
        );
    }
    host.shutdown().await?;
    Ok(())
}

/// Probe 5: `wait_until_suspended` called while segment 0 runs (a held step)
/// returns once segment 1 waits, with segment 1's wait; `events()` holds both
/// segments; `info()` tells segment 1 and its size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_until_suspended_status_and_events_across_the_switch() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = open(dir.path()).await?;
    let run = host.start::<Held>("held", ("held".into(), 0)).await?;
    // The held step is under way.
    within(LIMIT, "the held step", async {
        loop {
            let events = run.events().await?;
            if events
                .iter()
                .any(|e| matches!(e, Event::StepStarted { .. }))
            {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await??;
    assert_eq!(run.status().await?, RunStatus::Running);
    let suspended = {
        let run = run.clone();
        tokio::spawn(async move { run.wait_until_suspended().await })
    };
    gate("held").add_permits(1);
    let status = within(LIMIT, "wait_until_suspended", suspended).await???;
    assert_eq!(
        status,
        RunStatus::Suspended {
            waiting_on: "signal `go`".into()
        }
    );
    let info = run.info().await?;
    assert_eq!(info.segment, 1, "{info:?}");
    let events = run.events().await?;
    assert_eq!(count(&events, "ContinuedAsNew"), 1, "{events:?}");
    assert_eq!(count(&events, "RunStarted"), 2, "{events:?}");
    assert_eq!(count(&events, "StepCompleted"), 1, "{events:?}");
    let log = info.log.expect("info() tells the segment's size");
    assert!(
        (log.events as usize) < events.len(),
        "the current segment is smaller than the whole log: {log:?} vs {}",
        events.len()
    );
    run.signal("go", "x", "go-x").await?;
    assert_eq!(within(LIMIT, "held", run.result()).await??, "held:x");
    host.shutdown().await?;
    Ok(())
}
