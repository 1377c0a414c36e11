//! Invariant 8, full disk at two kinds of write `injected_faults_end_correctly`
//! does not reach: a cancel request and the segment switch of a continue-as-new.
//! Over a `FaultStore` whose appends for one run fail with "No space left on
//! device": the cancel is a typed error that records nothing (the run still waits,
//! no `CancelRequested` half-written) and succeeds once space is back; a failed
//! segment switch writes no half segment, and once space is back the run goes on
//! (retried if it was parked) with every signal applied once; no acknowledged
//! append is lost. Another run is served throughout.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Event, FjallStore, Host, RunStatus, Workflow};
use reel_storage::testing::{Fault, FaultStore, Op};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(20);
const FULL: &str = "injected fault: No space left on device";

#[derive(Serialize, Deserialize)]
struct Seg {
    left: u32,
    total: u64,
}

/// Adds one signal per segment, continuing as new until `left` is 0.
struct Adder;
impl Workflow for Adder {
    const NAME: &'static str = "adder";
    type Input = Seg;
    type Output = u64;
    async fn run(&self, ctx: Ctx, s: Seg) -> reel::Result<u64> {
        let add: u64 = ctx.wait_for_signal("add").await?;
        let total = s.total + add;
        if s.left == 0 {
            return Ok(total);
        }
        ctx.continue_as_new::<Adder>(Seg {
            left: s.left - 1,
            total,
        })
        .await
    }
}

async fn host_over(store: Arc<dyn reel::Store>) -> reel::Result<Host> {
    Host::builder()
        .store(store)
        .register(Adder)
        .restart_limit(3, Duration::from_secs(30))
        .build()
        .await
}

fn seg(left: u32) -> Seg {
    Seg { left, total: 0 }
}

/// The other run completes while `bad`'s writes fail.
async fn other_completes(host: &Host) -> anyhow::Result<()> {
    let other = host.start::<Adder>("other", seg(0)).await?;
    other.signal("add", &40u64, "o-1").await?;
    assert_eq!(within(LIMIT, "other's result", other.result()).await??, 40);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_a_full_disk_records_nothing_and_succeeds_later() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let host = host_over(faults.clone()).await?;
    let bad = host.start::<Adder>("bad", seg(0)).await?;
    bad.wait_until_suspended().await?;
    let before = bad.events().await?;

    faults.inject(
        Fault::fail(Op::Submit)
            .for_run("bad")
            .until_healed()
            .message(FULL),
    );
    let refused = within(LIMIT, "cancel on a full disk", bad.cancel("stop")).await?;
    assert!(
        matches!(&refused, Err(Error::Storage(m)) if m.contains("No space left")),
        "{refused:?}"
    );
    other_completes(&host).await?;
    // Nothing half-written: the log is as it was, the run still waits.
    assert_eq!(bad.events().await?, before);
    assert!(
        !matches!(
            bad.status().await?,
            RunStatus::Cancelled | RunStatus::Completed
        ),
        "the refused cancel ended nothing"
    );

    faults.heal();
    if matches!(bad.status().await?, RunStatus::Parked { .. }) {
        bad.retry().await?;
    }
    within(LIMIT, "cancel once space is back", bad.cancel("stop")).await??;
    assert_eq!(bad.status().await?, RunStatus::Cancelled);
    let events = bad.events().await?;
    let requested = events
        .iter()
        .filter(|e| matches!(e, Event::CancelRequested { .. }))
        .count();
    assert_eq!(requested, 1, "{events:?}");
    host.shutdown().await?;
    faults
        .check_acknowledged_in(&*FjallStore::open(dir.path())?)
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_switch_on_a_full_disk_writes_no_half_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let faults = FaultStore::new(FjallStore::open(dir.path())?);
    let host = host_over(faults.clone()).await?;
    let bad = host.handle::<Adder>("bad");
    host.start::<Adder>("bad", seg(2))
        .await?
        .wait_until_suspended()
        .await?;

    // The signal's append lands; every later one (the segment switch, its retries,
    // a park) fails until healed.
    faults.inject(
        Fault::fail(Op::Submit)
            .for_run("bad")
            .after(1)
            .until_healed()
            .message(FULL),
    );
    bad.signal("add", &1u64, "a-1").await?;
    within(LIMIT, "the segment switch fails", async {
        while faults.injected() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    other_completes(&host).await?;
    let events = bad.events().await?;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::ContinuedAsNew { .. })),
        "no half-written segment: {events:?}"
    );

    faults.heal();
    // The run goes on from what is on disk: retried if it was parked, else woken
    // by the next signal (sent again until a live actor takes it).
    if matches!(bad.status().await?, RunStatus::Parked { .. }) {
        bad.retry().await?;
    }
    for (i, add) in [(2, 10u64), (3, 100)] {
        let id = format!("a-{i}");
        common::retry(200, || bad.signal("add", &add, &id)).await?;
    }
    assert_eq!(within(LIMIT, "bad's result", bad.result()).await??, 111);
    let events = bad.events().await?;
    let switches = events
        .iter()
        .filter(|e| matches!(e, Event::ContinuedAsNew { .. }))
        .count();
    let received = events
        .iter()
        .filter(|e| matches!(e, Event::SignalReceived { .. }))
        .count();
    assert_eq!(switches, 2, "{events:?}");
    // Each signal once (a carried signal is recorded again in the next segment).
    assert!(received >= 3, "{events:?}");
    host.shutdown().await?;
    faults
        .check_acknowledged_in(&*FjallStore::open(dir.path())?)
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(())
}
