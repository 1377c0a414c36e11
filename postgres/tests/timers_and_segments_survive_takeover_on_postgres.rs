//! Runs whose host goes away: timers (on a shared test clock) fire on the host
//! that takes over; continue-as-new goes on when the owner leaves or loses its
//! lease mid-way; a host rejoining under its old name takes its share back.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use reel::testing::TestClock;
use reel::{Ctx, Host, Workflow};
use support::hosts::{
    free_lease, lease_elsewhere, owned_by, result_of, shutdown_all, spread, suspended, until_status,
};

type Execs = Arc<Mutex<BTreeMap<u32, u32>>>;

/// Sleeps an hour, then a step naming its host; with a timed signal wait too.
#[derive(Clone)]
struct Nap {
    host: String,
}
impl Workflow for Nap {
    const NAME: &'static str = "nap";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, mode: u32) -> reel::Result<String> {
        let got = if mode == 0 {
            ctx.sleep(Duration::from_secs(3600)).await?;
            "slept".to_owned()
        } else {
            let s: Option<String> = ctx
                .wait_for_signal_timeout("x", Duration::from_secs(3600))
                .await?;
            s.unwrap_or_else(|| "timeout".to_owned())
        };
        let h = self.host.clone();
        let by = ctx
            .step("after", move |_| {
                let h = h.clone();
                async move { Ok::<_, String>(h) }
            })
            .await?;
        Ok(format!("{got}@{by}"))
    }
}

/// Counts to 25 by continuing as new; each segment runs one slow step.
#[derive(Clone)]
struct Loop {
    execs: Execs,
}
impl Workflow for Loop {
    const NAME: &'static str = "loop";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let execs = self.execs.clone();
        ctx.step("work", move |_| {
            let execs = execs.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(40)).await;
                *execs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(n)
                    .or_insert(0) += 1;
                Ok::<_, String>(())
            }
        })
        .await?;
        if n >= 25 {
            return Ok(n);
        }
        ctx.continue_as_new::<Loop>(n + 1).await
    }
}

async fn host(url: &str, name: &str, clock: &TestClock, execs: &Execs) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .clock(clock.clone())
        .register(Nap {
            host: name.to_owned(),
        })
        .register(Loop {
            execs: execs.clone(),
        })
        .build()
        .await?)
}

fn clock() -> TestClock {
    TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))
}

/// A shared clock and step count, and host-0 and host-1 on `url` with them,
/// each holding half the partitions.
async fn two(url: &str) -> anyhow::Result<(TestClock, Execs, [Host; 2], Vec<usize>)> {
    let clock = clock();
    let execs = Execs::default();
    let (hosts, owners) = spread::<2>(url, 128, async |url, name| {
        host(url, name, &clock, &execs).await
    })
    .await?;
    Ok((clock, execs, hosts, owners))
}

/// Starts a `Loop` through host-0 on a partition of host-1's, and waits (10 s at
/// most) until `segments` of its steps ran; returns its id.
async fn start_loop(
    hosts: &[Host; 2],
    owners: &[usize],
    execs: &Execs,
    segments: usize,
) -> anyhow::Result<String> {
    let id = owned_by(owners, 1, "loop", 1).remove(0);
    hosts[0].start::<Loop>(&id, 0).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while execs.lock().unwrap_or_else(|p| p.into_inner()).len() < segments {
        assert!(Instant::now() < deadline, "the loop did not get going");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(id)
}

/// host-1 owns sleeping runs and shuts down; the clock passes their timers
/// (before or after host-0 took over): host-0 fires them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_of_a_host_that_shut_down_fire_on_the_taker() -> anyhow::Result<()> {
    let url = support::database("hunt_e_timers").await;
    let (clock, _, hosts, owners) = two(&url).await?;
    let ids = owned_by(&owners, 1, "nap", 4);
    for (i, id) in ids.iter().enumerate() {
        hosts[0].start::<Nap>(id, (i % 2) as u32).await?;
    }
    for id in &ids {
        until_status(&hosts[0], id, "waited", suspended).await;
    }
    let [h0, h1] = hosts;
    h1.shutdown().await?;
    // Due at once, perhaps before host-0 holds the partitions.
    clock.advance(Duration::from_secs(2 * 3600));
    for (i, id) in ids.iter().enumerate() {
        let out = result_of::<Nap>(&h0, id).await??;
        let want = if i % 2 == 0 { "slept" } else { "timeout" };
        assert_eq!(out, format!("{want}@host-0"), "{id}");
    }
    h0.shutdown().await?;
    Ok(())
}

/// host-1 rejoins under its old name right after shutting down; the runs it
/// left (waiting on a timer) are finished by whichever host holds them, once
/// each, and the two hosts share the partitions again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_rejoins_under_the_same_name() -> anyhow::Result<()> {
    let url = support::database("hunt_e_rejoin").await;
    let (clock, execs, hosts, owners) = two(&url).await?;
    let ids = owned_by(&owners, 1, "rj", 6);
    for id in &ids {
        hosts[0].start::<Nap>(id, 1).await?;
    }
    for id in &ids {
        until_status(&hosts[0], id, "waited", suspended).await;
    }
    let [h0, h1] = hosts;
    h1.shutdown().await?;
    let h1 = host(&url, "host-1", &clock, &execs).await?;
    support::spread_leases(&url, "host-", 2, 100).await;
    // Half get a signal through the rejoined host, half time out.
    for id in &ids[..3] {
        h1.handle::<Nap>(id)
            .signal("x", "sig", &format!("s-{id}"))
            .await?;
    }
    clock.advance(Duration::from_secs(2 * 3600));
    for (i, id) in ids.iter().enumerate() {
        let out = result_of::<Nap>(&h0, id).await??;
        let want = if i < 3 { "sig" } else { "timeout" };
        assert!(out.starts_with(&format!("{want}@host-")), "{id}: {out}");
        let steps = h1
            .run(id)
            .events()
            .await?
            .into_iter()
            .filter(|e| matches!(e, reel::Event::StepCompleted { .. }))
            .count();
        assert_eq!(steps, 1, "{id}");
    }
    // Both still work: a new run on each half.
    let owners = support::spread_leases(&url, "host-", 2, 100).await;
    for owner in 0..2 {
        let id = &owned_by(&owners, owner, "after", 1)[0];
        h0.start::<Nap>(id, 1).await?;
        until_status(&h1, id, "waited", suspended).await;
        h0.handle::<Nap>(id).signal("x", "y", "y").await?;
        let out = result_of::<Nap>(&h1, id).await??;
        assert_eq!(out, format!("y@host-{owner}"), "{id}");
    }
    h0.shutdown().await?;
    h1.shutdown().await?;
    Ok(())
}

/// A run continuing as new, segment after segment, on host-1 which shuts down
/// mid-way: host-0 goes on; every segment's step ran once and the count is
/// right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_goes_on_after_its_owner_shuts_down() -> anyhow::Result<()> {
    let url = support::database("hunt_e_can_shut").await;
    let (_, execs, hosts, owners) = two(&url).await?;
    let id = &start_loop(&hosts, &owners, &execs, 8).await?;
    let [h0, h1] = hosts;
    h1.shutdown().await?;
    let out = result_of::<Loop>(&h0, id).await??;
    assert_eq!(out, 25);
    let execs = execs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(execs.len(), 26, "{execs:?}");
    assert!(
        execs.values().all(|n| *n == 1),
        "a step ran twice: {execs:?}"
    );
    h0.shutdown().await?;
    Ok(())
}

/// The same, but the owner loses its lease mid-way (moved to a host with no
/// heartbeat, then freed): the run still ends with the right count, every
/// segment present once (steps may run again: at least once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_survives_a_lost_lease() -> anyhow::Result<()> {
    let url = support::database("hunt_e_can_lease").await;
    let (_, execs, hosts, owners) = two(&url).await?;
    let id = &start_loop(&hosts, &owners, &execs, 6).await?;
    lease_elsewhere(&url, id).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    free_lease(&url, id).await;
    let out = result_of::<Loop>(&hosts[0], id).await??;
    assert_eq!(out, 25);
    let execs = execs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(execs.len(), 26, "{execs:?}");
    // Each segment's step recorded once in the log.
    let completed = hosts[1]
        .run(id)
        .events()
        .await?
        .into_iter()
        .filter(|e| matches!(e, reel::Event::StepCompleted { .. }))
        .count();
    assert_eq!(completed, 26, "one recorded step per segment");
    println!("executions per segment: {execs:?}");
    shutdown_all(hosts).await
}
