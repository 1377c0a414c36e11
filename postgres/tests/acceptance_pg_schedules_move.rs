//! Acceptance: schedules on hosts joined to one PostgreSQL database, on one
//! shared test clock. README: "Each schedule fires on one host, the one leasing
//! its id's partition (the others look again as leases move), and every change of
//! a schedule is a compare-and-swap in the database: a pause, update or delete
//! made on one host is never undone by another host's scheduler".
//!
//! - schedules fire once per fire time while a second host joins (partitions
//!   move) and while the first one leaves;
//! - a delete made on the host that does not lead the schedule holds: the
//!   leader fires it no more.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reel::testing::TestClock;
use reel::{CatchUp, Ctx, Error, Host, Overlap, RunFilter, RunStatus, ScheduleSpec, Workflow};
use reel_postgres::partition_of;

const LIMIT: Duration = Duration::from_secs(60);
const MINUTE: Duration = Duration::from_secs(60);

/// Every execution of a firing's step: (run id, input).
type Fired = Arc<Mutex<Vec<(String, u32)>>>;

#[derive(Clone)]
struct Tick {
    fired: Fired,
}

impl Workflow for Tick {
    const NAME: &'static str = "tick";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, input: u32) -> reel::Result<u32> {
        let (fired, run) = (self.fired.clone(), ctx.run_id().to_owned());
        ctx.step("fire", move |_| {
            let (fired, run) = (fired.clone(), run.clone());
            async move {
                fired.lock().expect("fired").push((run, input));
                Ok::<_, String>(input)
            }
        })
        .await
    }
}

async fn host(url: &str, name: &str, clock: &TestClock, fired: &Fired) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .clock(clock.clone())
        .register(Tick {
            fired: fired.clone(),
        })
        .build()
        .await?)
}

fn ms(t: SystemTime) -> u64 {
    u64::try_from(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()).unwrap_or(0)
}

/// Waits until the firing's run has completed.
async fn completed(h: &Host, run_id: &str) {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Ok(RunStatus::Completed) = h.run(run_id).status().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{run_id} never completed; it is {:?}",
            h.run(run_id).status().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn next_fire(h: &Host, id: &str) -> SystemTime {
    let info = h.schedules().await.expect("schedules");
    info.iter()
        .find(|s| s.id == id)
        .and_then(|s| s.next_fire)
        .expect("a next fire time")
}

/// Every run of the `tick` workflow, as `h` lists them.
async fn listed(h: &Host) -> BTreeSet<String> {
    h.list(RunFilter::default().workflow("tick").limit(1000))
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|r| r.run_id)
        .collect()
}

fn spec() -> ScheduleSpec {
    ScheduleSpec::every(MINUTE)
        .overlap(Overlap::AllowAll)
        .catch_up(CatchUp::All {
            within: Duration::from_secs(3600),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_fire_once_while_hosts_join_and_leave() -> anyhow::Result<()> {
    let url = support::database("acc_sched_move").await;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let fired: Fired = Arc::default();
    let first = host(&url, "host-0", &clock, &fired).await?;
    support::spread_leases(&url, "host-", 1, 256).await;
    const N: u32 = 8;
    let ids: Vec<String> = (0..N).map(|i| format!("sched-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        first.schedule::<Tick>(id, spec(), i as u32).await?;
    }
    let mut expected: Vec<(String, u32)> = Vec::new();
    let mut base = Vec::new();
    for id in &ids {
        base.push(next_fire(&first, id).await);
    }
    let latest = *base.iter().max().expect("fire times");
    clock.set(latest);
    for (i, id) in ids.iter().enumerate() {
        let run = format!("{id}/{}", ms(base[i]));
        completed(&first, &run).await;
        expected.push((run, i as u32));
    }

    // A second host joins; three minutes pass while the partitions move.
    let second = host(&url, "host-1", &clock, &fired).await?;
    clock.set(latest + 3 * MINUTE);
    support::spread_leases(&url, "host-", 2, 100).await;
    for (i, id) in ids.iter().enumerate() {
        for k in 1..=3u32 {
            let run = format!("{id}/{}", ms(base[i] + k * MINUTE));
            completed(&second, &run).await;
            expected.push((run, i as u32));
        }
    }

    // The first host leaves; one more minute passes.
    first.shutdown().await?;
    clock.set(latest + 4 * MINUTE);
    for (i, id) in ids.iter().enumerate() {
        let run = format!("{id}/{}", ms(base[i] + 4 * MINUTE));
        completed(&second, &run).await;
        expected.push((run, i as u32));
    }

    let mut seen = fired.lock().expect("fired").clone();
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected, "each firing ran once");
    let want: BTreeSet<String> = expected.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(listed(&second).await, want, "no firing started twice");
    second.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_on_the_non_leader_holds() -> anyhow::Result<()> {
    let url = support::database("acc_sched_delete").await;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let fired: Fired = Arc::default();
    let hosts = [
        host(&url, "host-0", &clock, &fired).await?,
        host(&url, "host-1", &clock, &fired).await?,
    ];
    let owners = support::spread_leases(&url, "host-", 2, 100).await;
    // Two schedules led by host-1: one deleted through host-0, one a probe that
    // shows the leader's scheduler did pass over the fire time.
    let led: Vec<String> = (0..)
        .map(|i| format!("sch-{i}"))
        .filter(|id| owners[partition_of(id) as usize] == 1)
        .take(2)
        .collect();
    let (doomed, probe) = (&led[0], &led[1]);
    hosts[0].schedule::<Tick>(doomed, spec(), 1).await?;
    hosts[0].schedule::<Tick>(probe, spec(), 2).await?;
    let at_doomed = next_fire(&hosts[1], doomed).await;
    let at_probe = next_fire(&hosts[1], probe).await;
    let latest = at_doomed.max(at_probe);
    clock.set(latest);
    completed(&hosts[0], &format!("{doomed}/{}", ms(at_doomed))).await;
    completed(&hosts[0], &format!("{probe}/{}", ms(at_probe))).await;

    hosts[0].delete_schedule(doomed).await?;
    for k in 1..=3u32 {
        clock.set(latest + k * MINUTE);
        completed(&hosts[0], &format!("{probe}/{}", ms(at_probe + k * MINUTE))).await;
        for h in &hosts {
            let ids: Vec<String> = h.schedules().await?.into_iter().map(|s| s.id).collect();
            assert_eq!(ids, vec![probe.clone()], "the delete holds");
        }
    }
    for k in 1..=3u32 {
        let run = format!("{doomed}/{}", ms(at_doomed + k * MINUTE));
        let status = hosts[1].run(&run).status().await;
        assert!(
            matches!(status, Err(Error::UnknownRun(_))),
            "the deleted schedule fired {run}: {status:?}"
        );
    }
    assert!(matches!(
        hosts[1].delete_schedule(doomed).await,
        Err(Error::UnknownSchedule(_))
    ));
    let doomed_runs = listed(&hosts[1])
        .await
        .into_iter()
        .filter(|r| r.starts_with(&format!("{doomed}/")))
        .count();
    assert_eq!(doomed_runs, 1, "only the firing before the delete");
    for h in hosts {
        h.shutdown().await?;
    }
    Ok(())
}
