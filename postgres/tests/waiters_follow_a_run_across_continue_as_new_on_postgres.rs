//! Waiters on one host, a run that continues as new on another (two hosts
//! sharing Postgres): whoever waits for the run's end waits for its LAST
//! segment.
//!
//! - `result()` callers on the non-owner (and on the owner) that began in
//!   segment 0 get the last segment's end: completed, failed, cancelled.
//! - A parent (`ctx.child`) on host-0 waiting on its own child or on a run it
//!   did not start (attached), owned by host-1, that continues as new twice,
//!   gets that run's last end.
//! - A waiter on host-0 that continues as new while attached to a run of
//!   host-1 does not cancel it; a child on host-1 that continues as new while
//!   its parent on host-0 is cancelled ends cancelled.
//! - Signals sent through the non-owner right around the switch arrive once; a
//!   signal id sent again while carried over is dropped.
//! - `wait_until_suspended` on the non-owner, called while segment 0 runs,
//!   returns with segment 1's wait.

#[path = "../../tests/common/cas_workflows.rs"]
mod cas_workflows;
mod support;

use std::time::Duration;

use cas_workflows::*;
use reel::{Error, Event, Host, RunStatus};
use support::hosts::{owned_by, shutdown_all, spread};

/// How often a wait for a run's segment looks again.
const NAP: Duration = Duration::from_millis(10);

async fn host(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Hopper)
        .register(Waiter)
        .register(Held)
        .register(Collector)
        .build()
        .await?)
}

type Waits = Vec<(String, tokio::task::JoinHandle<reel::Result<String>>)>;

/// Spawns a `result()` caller on the run through each of `hosts`.
fn callers(hosts: &[&Host], id: &str, waits: &mut Waits) {
    for (i, h) in hosts.iter().enumerate() {
        let run = h.handle::<Hopper>(id);
        waits.push((
            format!("{id} via host #{i}"),
            tokio::spawn(async move { run.result().await }),
        ));
    }
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(LIMIT, fut)
        .await
        .map_err(|_| anyhow::anyhow!("timed out after {LIMIT:?} waiting for {what}"))
}

/// Probe 1: `result()` callers on the non-owner (and the owner) that began in
/// segment 0 get the last segment's end; status and events read through the
/// non-owner follow the segments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_callers_on_another_host_get_the_last_segments_end() -> anyhow::Result<()> {
    let url = support::database("cas_result").await;
    let (hosts, owners) = spread::<2>(&url, 100, host).await?;
    let [h0, h1] = &hosts;
    let ids = owned_by(&owners, 1, "hop", 6);
    let mut cases = Vec::new();
    for hops in [1u32, 3] {
        for end in [End::Complete, End::Fail, End::Cancel] {
            cases.push((hops, end));
        }
    }
    let mut bad = Vec::new();
    for ((hops, end), id) in cases.into_iter().zip(ids) {
        let run = h0.start::<Hopper>(&id, (hops, Vec::new(), end)).await?;
        until_segment(h0, &id, 0, NAP).await?;
        let mut waits = Vec::new();
        callers(&[h0, h0, h1], &id, &mut waits);
        for k in 0..=hops {
            let status = until_segment(h0, &id, k, NAP).await?;
            assert_eq!(
                status,
                RunStatus::Suspended {
                    waiting_on: "signal `go`".into()
                },
                "{id}: segment {k}"
            );
            let events = run.events().await?;
            assert_eq!(
                count(&events, "ContinuedAsNew"),
                k as usize,
                "{id}: {events:?}"
            );
            run.signal("go", &format!("g{k}"), &format!("go-{k}"))
                .await?;
        }
        if end == End::Cancel {
            until_segment(h0, &id, hops, NAP).await?;
            run.cancel("enough").await?;
        }
        let want: Vec<String> = (0..=hops).map(|k| format!("g{k}")).collect();
        for (who, w) in waits {
            let got = match tokio::time::timeout(LIMIT, w).await {
                Ok(got) => got?,
                Err(_) => {
                    bad.push(format!(
                        "{who} ({hops} hops, {end:?}): no answer after {LIMIT:?}; the run is {:?}",
                        h0.run(&id).info().await
                    ));
                    continue;
                }
            };
            let ok = match (end, &got) {
                (End::Complete, Ok(out)) => *out == want.join(","),
                (End::Fail, Err(Error::Failed(m))) => {
                    *m == format!("failed after {}", want.join(","))
                }
                (End::Cancel, Err(Error::Cancelled(r))) => r.contains("enough"),
                _ => false,
            };
            if !ok {
                bad.push(format!("{who} ({hops} hops, {end:?}): got {got:?}"));
            }
        }
    }
    shutdown_all(hosts).await?;
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(())
}

/// Probe 2: a waiter on host-0 gets the last end of a run of host-1 that
/// continues as new twice: its own child, and a run the service started
/// (attached), for each kind of end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_on_a_hopping_run_of_another_host_get_its_last_end() -> anyhow::Result<()> {
    let url = support::database("cas_child").await;
    let (hosts, owners) = spread::<2>(&url, 100, host).await?;
    let [h0, h1] = &hosts;
    let parents = owned_by(&owners, 0, "w", 6);
    let kids = owned_by(&owners, 1, "k", 6);
    let mut cases = Vec::new();
    for own in [true, false] {
        for end in [End::Complete, End::Fail, End::Cancel] {
            cases.push((own, end));
        }
    }
    let mut bad = Vec::new();
    for (((own, end), p), k) in cases.into_iter().zip(&parents).zip(&kids) {
        if !own {
            h1.start::<Hopper>(k, (2, Vec::new(), end)).await?;
        }
        let waiter = h1.start::<Waiter>(p, (k.clone(), 2, end, 0)).await?;
        until_segment(h0, p, 0, NAP).await?;
        let kid = h0.handle::<Hopper>(k);
        for s in 0..3 {
            until_segment(h0, k, s, NAP).await?;
            kid.signal("go", &format!("g{s}"), &format!("go-{s}"))
                .await?;
        }
        if end == End::Cancel {
            until_segment(h0, k, 2, NAP).await?;
            kid.cancel("from outside").await?;
        }
        let out = match tokio::time::timeout(LIMIT, waiter.result()).await {
            Ok(out) => out?,
            Err(_) => {
                bad.push(format!(
                    "{p} (own {own}, {end:?}): no end after {LIMIT:?}; it is {:?}, its kid {:?}",
                    h0.run(p).info().await,
                    h0.run(k).info().await
                ));
                continue;
            }
        };
        let ok = match end {
            End::Complete => out == "Ok(\"g0,g1,g2\")",
            End::Fail => out.starts_with("Err(Failed") && out.contains("failed after g0,g1,g2"),
            End::Cancel => out.starts_with("Err(Cancelled") && out.contains("from outside"),
        };
        if !ok {
            bad.push(format!("{p} (own {own}, {end:?}): got {out}"));
        }
        let parent = h0.run(k).info().await?.parent;
        let want = own.then(|| p.clone());
        if parent != want {
            bad.push(format!("{k}: parent {parent:?}, not {want:?}"));
        }
    }
    shutdown_all(hosts).await?;
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(())
}

/// Probe 3: a waiter on host-0 that continues as new (twice) while attached to
/// a run of host-1 does not cancel that run, and its last segment gets the
/// run's end; its own child on host-1 is cancelled by its hop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hopping_waiter_spares_the_run_it_attached_to_on_another_host() -> anyhow::Result<()> {
    let url = support::database("cas_spare").await;
    let (hosts, owners) = spread::<2>(&url, 100, host).await?;
    let [h0, h1] = &hosts;
    let [p_att, p_own] = <[String; 2]>::try_from(owned_by(&owners, 0, "w", 2)).expect("two ids");
    let [k_att, k_own] = <[String; 2]>::try_from(owned_by(&owners, 1, "k", 2)).expect("two ids");
    let run = h1
        .start::<Hopper>(&k_att, (1, Vec::new(), End::Complete))
        .await?;
    let waiter = h1
        .start::<Waiter>(&p_att, (k_att.clone(), 9, End::Complete, 2))
        .await?;
    for s in 0..3 {
        until_segment(h0, &p_att, s, NAP).await?;
        if s < 2 {
            waiter.signal("hop", &(), &format!("hop-{s}")).await?;
        }
    }
    // Give a stray cancel letter every chance to land: the run still takes its
    // signal in segment 0.
    run.signal("go", "a", "go-a").await?;
    until_segment(h0, &k_att, 1, NAP).await?;
    run.signal("go", "b", "go-b").await?;
    assert_eq!(
        within("the hopping waiter", waiter.result()).await??,
        "Ok(\"a,b\")"
    );
    // Control: its own child is cancelled by its hop.
    let waiter = h1
        .start::<Waiter>(&p_own, (k_own.clone(), 9, End::Complete, 1))
        .await?;
    until_segment(h0, &p_own, 0, NAP).await?;
    until_segment(h0, &k_own, 0, NAP).await?;
    waiter.signal("hop", &(), "hop-0").await?;
    let got = within("the own child", h0.handle::<Hopper>(&k_own).result()).await?;
    assert!(
        matches!(&got, Err(Error::Cancelled(r)) if r.contains("continued as new")),
        "{got:?}"
    );
    let out = within("the waiter", waiter.result()).await??;
    assert!(out.starts_with("Err(Cancelled"), "{out}");
    shutdown_all(hosts).await
}

/// Probe 3: a child on host-1 that continues as new while its parent on
/// host-0 is cancelled ends cancelled: the cancel after the switch, and racing
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hopping_child_of_a_cancelled_parent_on_another_host_is_cancelled() -> anyhow::Result<()>
{
    const N: usize = 8;
    let url = support::database("cas_cancel").await;
    let (hosts, owners) = spread::<2>(&url, 100, host).await?;
    let [h0, _h1] = &hosts;
    let parents = owned_by(&owners, 0, "p", N);
    let kids = owned_by(&owners, 1, "c", N);
    let mut bad = Vec::new();
    for (i, (p, c)) in parents.iter().zip(&kids).enumerate() {
        let parent = h0
            .start::<Waiter>(p, (c.clone(), 3, End::Complete, 0))
            .await?;
        let kid = h0.handle::<Hopper>(c);
        until_segment(h0, c, 0, NAP).await?;
        kid.signal("go", "a", "go-a").await?;
        until_segment(h0, c, 1, NAP).await?;
        if i % 2 == 0 {
            parent.cancel("parent cancelled").await?;
        } else {
            let k = kid.clone();
            let send = tokio::spawn(async move { k.signal("go", "b", "go-b").await });
            parent.cancel("parent cancelled").await?;
            let _ = within("the go", send).await??;
        }
        // The parent's cancel asks the kid to cancel ("parent cancelled: ..."); the
        // parent's handler then returns what its call answered, so the parent
        // completes and asks its unfinished kid again, in the same words: whichever
        // of the two requests lands first, the kid ends with the parent's cancel.
        let got = within("the kid's end", kid.result()).await;
        if !matches!(&got, Ok(Err(Error::Cancelled(r)))
            if r == "parent cancelled: parent cancelled")
        {
            bad.push(format!(
                "{c} (parent {p}, racing {}): {got:?}; it is {:?}",
                i % 2 == 1,
                kid.info().await
            ));
        }
    }
    shutdown_all(hosts).await?;
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(())
}

/// Probe 4: signals sent through the non-owner right around the switch all
/// reach the new segment once, in order; a signal id sent again while its first
/// delivery is carried over unconsumed is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_through_another_host_around_the_switch_arrive_once() -> anyhow::Result<()> {
    const N: usize = 8;
    let url = support::database("cas_signals").await;
    let (hosts, owners) = spread::<2>(&url, 100, host).await?;
    let [h0, h1] = &hosts;
    let mut bad = Vec::new();
    for id in owned_by(&owners, 1, "col", N) {
        let run = h0.start::<Collector>(&id, 0).await?;
        until_segment(h0, &id, 0, NAP).await?;
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
        within("the racing sender", racer).await???;
        until_segment(h0, &id, 1, NAP).await?;
        // Again through both hosts.
        for n in [1u32, 3, 5] {
            run.signal("x", &n, &format!("x-{n}")).await?;
            h1.handle::<Collector>(&id)
                .signal("x", &n, &format!("x-{n}"))
                .await?;
        }
        run.signal("x", &6u32, "x-6").await?;
        run.signal("end", &(), "end").await?;
        let got = within("the collector", run.result()).await??;
        if got != vec![1, 2, 3, 4, 5, 6] {
            bad.push(format!("{id}: got {got:?}"));
        }
    }
    shutdown_all(hosts).await?;
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(())
}

/// Probe 5: `wait_until_suspended` through the non-owner, called while
/// segment 0 runs a held step, returns once segment 1 waits, with its wait;
/// `status()` and `events()` there follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_until_suspended_on_another_host_across_the_switch() -> anyhow::Result<()> {
    let url = support::database("cas_suspended").await;
    let (hosts, owners) = spread::<2>(&url, 100, host).await?;
    let [h0, _h1] = &hosts;
    let mut bad = Vec::new();
    for id in owned_by(&owners, 1, "held", 4) {
        let run = h0.start::<Held>(&id, (id.clone(), 0)).await?;
        within("the held step", async {
            loop {
                let events = run.events().await?;
                if events
                    .iter()
                    .any(|e| matches!(e, Event::StepStarted { .. }))
                {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await??;
        let suspended = {
            let run = run.clone();
            tokio::spawn(async move { run.wait_until_suspended().await })
        };
        // Let the caller register before the step is let go (it must answer
        // the segment 1 wait either way).
        tokio::task::yield_now().await;
        gate(&id).add_permits(1);
        match tokio::time::timeout(LIMIT, suspended).await {
            Ok(got) => {
                let got = got?;
                let want = RunStatus::Suspended {
                    waiting_on: "signal `go`".into(),
                };
                if got.as_ref().ok() != Some(&want) {
                    bad.push(format!("{id}: wait_until_suspended gave {got:?}"));
                }
            }
            Err(_) => bad.push(format!(
                "{id}: wait_until_suspended on the non-owner did not return in {LIMIT:?}; \
                 the run is {:?}",
                run.info().await
            )),
        }
        let info = until_segment(h0, &id, 1, NAP).await;
        if info.is_err() {
            bad.push(format!("{id}: {info:?}"));
        }
        let events = run.events().await?;
        if count(&events, "ContinuedAsNew") != 1 || count(&events, "RunStarted") != 2 {
            bad.push(format!("{id}: events {events:?}"));
        }
        run.signal("go", "x", "go-x").await?;
        let out = within("held", run.result()).await?;
        if out.as_deref().ok() != Some(format!("{id}:x").as_str()) {
            bad.push(format!("{id}: result {out:?}"));
        }
    }
    shutdown_all(hosts).await?;
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(())
}
