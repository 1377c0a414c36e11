//! A queued run whose admission fails for a passing reason (the write that records
//! it admitted fails) is admitted again later, on the same host, instead of staying
//! enqueued until the next restart; meanwhile its slot goes to the runs behind it,
//! so one failing admission does not stall the queue. The retry waits on the
//! host's clock: a `TestClock` in auto mode skips the wait.
//!
//! Why it fails without the fix: the failed run left the queue's waiting set and
//! its slot, but its stored state stayed `Enqueued`, so nothing on this host would
//! ever admit it again: its result never comes.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, FjallStore, Host, QueueOptions, Record, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};

const LIMIT: Duration = Duration::from_secs(20);

/// Completes at once with its run id.
struct Job;

impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let id = ctx.run_id().to_owned();
        ctx.step("work", |_| async { Ok::<_, String>(id.clone()) })
            .await
    }
}

fn step_started(records: &[Record]) -> SystemTime {
    records
        .iter()
        .find(|r| r.event.kind() == "StepStarted")
        .map(|r| r.at)
        .unwrap_or_else(|| panic!("no StepStarted in {records:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_admission_is_retried_and_the_queue_goes_on() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    // `a`'s first write creates it; its next ones (recording the admission) fail
    // twice.
    faults.inject(Fault::fail(Op::Submit).for_run("a").after(1).times(2));
    let host = Host::builder()
        .store(faults.clone())
        .clock(TestClock::auto(t0))
        .register(Job)
        .queue("q", QueueOptions::default().concurrency(1))
        .build()
        .await?;
    host.start_on::<Job>("q", "a", ()).await?;
    host.start_on::<Job>("q", "b", ()).await?;
    let a = host.handle::<Job>("a");
    let b = host.handle::<Job>("b");
    assert_eq!(within(LIMIT, "b's result", b.result()).await??, "b");
    assert_eq!(within(LIMIT, "a's result", a.result()).await??, "a");
    assert_eq!(faults.injected(), 2, "both faults were hit");
    assert_eq!(a.status().await?, RunStatus::Completed);
    // `b` took the slot at once; `a` came back after its backoffs (100 ms, then
    // 200 ms, on the test clock).
    assert_eq!(step_started(&b.records().await?), t0);
    assert_eq!(
        step_started(&a.records().await?),
        t0 + Duration::from_millis(300)
    );
    host.shutdown().await?;
    Ok(())
}
