//! Schedules on two hosts joined to one database, on one shared test clock: a
//! schedule created on one host fires once per fire time (each firing's run
//! executes once, whichever host's scheduler or owner handles it); a pause made on
//! the host that does not lead the schedule holds on the one that does (missed
//! firings follow the catch-up policy after the resume, made on the other host);
//! an update made on the host that does not lead is what later firings start.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reel::testing::TestClock;
use reel::{CatchUp, Ctx, Host, RunStatus, ScheduleSpec, Workflow};
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
        assert!(Instant::now() < deadline, "{run_id} never completed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn next_fire(h: &Host) -> SystemTime {
    let info = h.schedules().await.expect("schedules");
    info[0].next_fire.expect("a next fire time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_fire_once_and_obey_changes_from_either_host() -> anyhow::Result<()> {
    let url = support::database("schedules_hosts").await;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let fired: Fired = Arc::default();
    let hosts = [
        host(&url, "host-0", &clock, &fired).await?,
        host(&url, "host-1", &clock, &fired).await?,
    ];
    let owners = support::spread_leases(&url, "host-", 2, 100).await;
    let leader = owners[partition_of("tick") as usize];
    let other = 1 - leader;

    // Created on the host that does not lead it.
    hosts[other]
        .schedule::<Tick>(
            "tick",
            ScheduleSpec::every(MINUTE).catch_up(CatchUp::Last),
            1,
        )
        .await?;
    let mut expected = Vec::new();
    let mut at = UNIX_EPOCH;
    for _ in 0..3 {
        at = next_fire(&hosts[leader]).await;
        clock.set(at);
        let run = format!("tick/{}", ms(at));
        completed(&hosts[other], &run).await;
        expected.push((run, 1));
    }

    // Paused on the host that does not lead it, while five fire times pass;
    // resumed on the leader: only the latest of them starts (`CatchUp::Last`).
    hosts[other].pause_schedule("tick").await?;
    clock.set(at + 5 * MINUTE);
    hosts[leader].resume_schedule("tick").await?;
    let run = format!("tick/{}", ms(at + 5 * MINUTE));
    completed(&hosts[other], &run).await;
    expected.push((run, 1));

    // Updated on the host that does not lead it: the next firing starts the new
    // input.
    hosts[other]
        .update_schedule::<Tick>(
            "tick",
            ScheduleSpec::every(MINUTE).catch_up(CatchUp::Last),
            2,
        )
        .await?;
    let at = next_fire(&hosts[leader]).await;
    clock.set(at);
    let run = format!("tick/{}", ms(at));
    completed(&hosts[leader], &run).await;
    expected.push((run, 2));

    let mut seen = fired.lock().expect("fired").clone();
    seen.sort();
    expected.sort();
    assert_eq!(
        seen, expected,
        "each firing ran once, none while paused, the update's input after it"
    );
    for h in hosts {
        h.shutdown().await?;
    }
    Ok(())
}
