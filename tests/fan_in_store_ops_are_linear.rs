//! A parent waiting on many children does work per wake-up that does not grow with
//! the children already started: each execution of its handler calls every child
//! again, but a child this host has started and subscribed to is neither started
//! nor checked for a cycle again, so the store operations of a fan-in of N grow
//! linearly in N, not with N² (issue 11). After a restart each unfinished child is
//! started once more, not once per execution of the parent. And a run looping on
//! signals writes three times per signal: the signal, the step (its start and
//! result together), and the suspension with the wait it records.

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use reel::{Ctx, Event, FjallStore, Host, Workflow};

use common::counting::{CountingStore, Op};
use common::within;

/// Store operations of a fan-in.
#[derive(Clone, Copy, Debug)]
struct Ops {
    /// `get_run` of a child.
    child_meta_reads: u64,
    /// Appends creating a child: one per start attempt.
    child_starts: u64,
    /// Every append.
    submits: u64,
}

fn is_child(run_id: &str) -> bool {
    run_id.starts_with("kid-")
}

fn ops(store: &CountingStore) -> Ops {
    Ops {
        child_meta_reads: store.count(Op::GetRun, is_child),
        child_starts: store.count(Op::Start, is_child),
        submits: store.count(Op::Submit, |_| true),
    }
}

/// Reads of the parent's log: one per activation, plus the test's own.
fn parent_log_reads(store: &CountingStore) -> u64 {
    store.count(Op::ReadLog, |r| r == "fan")
}

/// Waits for its signal and returns it.
struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: u32) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

/// Waits on `n` children at once.
struct Fan;
impl Workflow for Fan {
    const NAME: &'static str = "fan";
    type Input = u32;
    type Output = u64;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u64> {
        let kids = (0..n).map(|i| ctx.child::<Kid>(&format!("kid-{i}"), i));
        let outs = try_join_all(kids).await?;
        Ok(outs.into_iter().map(u64::from).sum())
    }
}

/// Children released at once; the parent passivates (and so executes its handler
/// again, from the top) between two waves.
const WAVE: u32 = 50;

async fn host_over(path: &std::path::Path) -> anyhow::Result<(Host, Arc<CountingStore>)> {
    let store = CountingStore::new(FjallStore::open(path)?);
    let host = Host::builder()
        .store(store.clone())
        .register(Fan)
        .register(Kid)
        .passivate_after(Duration::from_millis(1))
        .build()
        .await?;
    Ok((host, store))
}

/// Releases children `range` one wave at a time; after each wave, waits until the
/// parent has recorded their ends and every run (the parent too) is passivated.
/// Returns how many times the test read the parent's log.
async fn release(
    host: &Host,
    range: std::ops::Range<u32>,
    done_before: usize,
) -> anyhow::Result<u64> {
    let fan = host.handle::<Fan>("fan");
    let mut reads = 0;
    let mut done = done_before;
    let ids: Vec<u32> = range.collect();
    for wave in ids.chunks(WAVE as usize) {
        // At once, so that their appends share fsyncs.
        try_join_all(wave.iter().map(|&i| async move {
            let kid = host.handle::<Kid>(&format!("kid-{i}"));
            kid.signal("go", &i, &format!("go-{i}")).await?;
            kid.result().await
        }))
        .await?;
        done += wave.len();
        within(Duration::from_secs(60), "the wave's ends", async {
            loop {
                reads += 1;
                let events = fan.events().await?;
                let ended = events
                    .iter()
                    .filter(|e| matches!(e, Event::ChildCompleted { .. }))
                    .count();
                if ended >= done {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            while host.live_runs().await > 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            anyhow::Ok(())
        })
        .await??;
    }
    Ok(reads)
}

/// Runs a fan-in of `n` children released in waves and returns the store
/// operations it took, and how many times the parent was activated.
async fn fan_in(n: u32) -> anyhow::Result<(Ops, u64)> {
    let dir = tempfile::tempdir()?;
    let (host, store) = host_over(dir.path()).await?;
    let fan = host.start::<Fan>("fan", n).await?;
    fan.wait_until_suspended().await?;
    let reads = release(&host, 0..n, 0).await?;
    let sum = within(Duration::from_secs(60), "the parent's result", fan.result()).await??;
    assert_eq!(sum, (0..u64::from(n)).sum::<u64>());
    let activations = parent_log_reads(&store) - reads;
    let ops = ops(&store);
    host.shutdown().await?;
    Ok((ops, activations))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_operations_of_a_fan_in_grow_linearly() -> anyhow::Result<()> {
    let (small, small_activations) = fan_in(250).await?;
    let (large, large_activations) = fan_in(1_000).await?;
    eprintln!("N=250: {small:?}, {small_activations} parent activations");
    eprintln!("N=1000: {large:?}, {large_activations} parent activations");
    // The parent really executed its handler again between the waves (most of
    // them: a wave whose ends reach the parent while it is still live from the
    // previous one takes no new activation).
    assert!(
        large_activations >= u64::from(1_000 / WAVE) / 2,
        "{large_activations}"
    );
    // Each child is started once: later executions of the parent do not try again.
    // (Executing the parent again from the top for each wave would start every
    // child still running again: about 1,000 × 20 / 2 attempts.)
    assert!(small.child_starts <= 250 + 5, "{small:?}");
    assert!(large.child_starts <= 1_000 + 20, "{large:?}");
    // A handful of reads of each child's metadata (start, signal, activation), not
    // one per execution of its parent.
    assert!(large.child_meta_reads < 8 * 1_000, "{large:?}");
    assert!(large.submits < 12 * 1_000, "{large:?}");
    // Four times the children, about four times the work.
    let ratio = |a: u64, b: u64| a as f64 / b as f64;
    let meta = ratio(large.child_meta_reads, small.child_meta_reads);
    let submits = ratio(large.submits, small.submits);
    assert!(
        meta < 5.5,
        "child metadata reads grew {meta:.1}x: {small:?} → {large:?}"
    );
    assert!(
        submits < 5.5,
        "appends grew {submits:.1}x: {small:?} → {large:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_each_unfinished_child_is_started_once() -> anyhow::Result<()> {
    const N: u32 = 200;
    let dir = tempfile::tempdir()?;
    let (host, _) = host_over(dir.path()).await?;
    let fan = host.start::<Fan>("fan", N).await?;
    fan.wait_until_suspended().await?;
    release(&host, 0..N / 2, 0).await?;
    host.shutdown().await?;

    let (host, store) = host_over(dir.path()).await?;
    release(&host, N / 2..N, N as usize / 2).await?;
    let fan = host.handle::<Fan>("fan");
    let sum = within(Duration::from_secs(60), "the parent's result", fan.result()).await??;
    assert_eq!(sum, (0..u64::from(N)).sum::<u64>());
    let ops = ops(&store);
    // Once each (executing the parent's handler again for every wave would start
    // the rest again each time: 100 + 50).
    assert!(
        ops.child_starts <= u64::from(N / 2) + 2,
        "{} start attempts for {} unfinished children: {ops:?}",
        ops.child_starts,
        N / 2
    );
    eprintln!("after the restart: {ops:?}");
    host.shutdown().await?;
    Ok(())
}

/// Waits for a signal and applies it in a step, `n` times.
struct Looper;
impl Workflow for Looper {
    const NAME: &'static str = "looper";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let mut sum = 0;
        for _ in 0..n {
            let add: u32 = ctx.wait_for_signal("add").await?;
            sum += ctx
                .step("apply", move |_| async move { Ok::<_, String>(add) })
                .await?;
        }
        Ok(sum)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_loop_writes_three_times_per_signal() -> anyhow::Result<()> {
    const SIGNALS: u32 = 20;
    let dir = tempfile::tempdir()?;
    let store = CountingStore::new(FjallStore::open(dir.path())?);
    let host = Host::builder()
        .store(store.clone())
        .register(Looper)
        .build()
        .await?;
    let run = host.start::<Looper>("loop", SIGNALS + 1).await?;
    run.wait_until_suspended().await?;
    let before = store.count(Op::Submit, |r| r == "loop");
    for i in 0..SIGNALS {
        run.signal("add", &i, &format!("add-{i}")).await?;
        run.wait_until_suspended().await?;
    }
    let writes = store.count(Op::Submit, |r| r == "loop") - before;
    // The signal (with the state back to running), `StepStarted` + `StepCompleted`,
    // and the suspension's state with the next wait's `SignalAwaited`.
    assert_eq!(
        writes,
        3 * u64::from(SIGNALS),
        "writes for {SIGNALS} signals"
    );
    host.shutdown().await?;
    Ok(())
}
