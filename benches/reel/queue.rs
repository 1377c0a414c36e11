//! Queues: 100,000 runs enqueued, then admitted 64 at a time, against the same
//! drain of a queue a hundred times shorter (admission must not cost more with
//! more runs waiting: target ratio >= 0.8), and the same runs started directly with
//! at most 64 in flight (no queue), in the same run.
//!
//! The runs are enqueued on a host whose queue admits one run an hour, so they all
//! wait; a host then reopens the store with a concurrency of 64: recovery rebuilds
//! the queue from the store, and the drain shows what admission costs with
//! 100,000 runs waiting. An admitted run is activated from the store (its actor
//! reads it) and records `Running` before its first step: a queued run costs a
//! read and a durable write more than a run started directly.

use std::time::{Duration, Instant};

use futures::StreamExt;
use reel::{Host, QueueOptions, StatusKind};
use tokio::sync::Semaphore;

use crate::Config;
use crate::util::*;

const CONCURRENCY: usize = 64;
const IN_FLIGHT_STARTS: usize = 512;

fn queued_host(dir: &std::path::Path, options: QueueOptions) -> reel::HostBuilder {
    Host::builder()
        .path(dir)
        .register(Steps)
        .queue("q", options)
}

struct Queued {
    enqueue_per_s: f64,
    reopen: Duration,
    drain_per_s: f64,
}

async fn reel_queued(n: usize) -> BenchResult<Queued> {
    let dir = temp_dir();
    let trickle = QueueOptions::default().rate_limit(1, Duration::from_secs(3600));
    let host = queued_host(dir.path(), trickle).build().await?;
    let start = Instant::now();
    let mut starts = futures::stream::iter(0..n)
        .map(|i| {
            let host = host.clone();
            async move {
                host.start_on::<Steps>("q", &format!("q-{i:06}"), 1)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(IN_FLIGHT_STARTS);
    while let Some(r) = starts.next().await {
        r?;
    }
    drop(starts);
    let enqueue_per_s = n as f64 / start.elapsed().as_secs_f64();
    within(LIMIT, "shutdown", host.shutdown()).await?;

    let opened = Instant::now();
    let host = queued_host(dir.path(), QueueOptions::default().concurrency(CONCURRENCY))
        .build()
        .await?;
    let reopen = opened.elapsed();
    // Admission begins as the host opens: some may already run.
    let counts = host.count().await?;
    let known = counts.values().sum::<u64>() as usize;
    if known != n || counts[&StatusKind::Enqueued] as usize + 1 + CONCURRENCY < n {
        return Err(format!("{counts:?} after reopening, expected {n} mostly enqueued").into());
    }
    let drain = Instant::now();
    let mut results = futures::stream::iter(0..n)
        .map(|i| {
            let run = host.handle::<Steps>(&format!("q-{i:06}"));
            async move { run.result().await }
        })
        .buffer_unordered(4_096);
    while let Some(r) = results.next().await {
        r?;
    }
    drop(results);
    let drain_per_s = n as f64 / drain.elapsed().as_secs_f64();
    within(LIMIT, "shutdown", host.shutdown()).await?;
    Ok(Queued {
        enqueue_per_s,
        reopen,
        drain_per_s,
    })
}

/// The same runs started directly, at most `CONCURRENCY` unfinished at once.
async fn reel_direct(n: usize) -> BenchResult<f64> {
    let dir = temp_dir();
    let host = Host::builder()
        .path(dir.path())
        .register(Steps)
        .build()
        .await?;
    let slots = std::sync::Arc::new(Semaphore::new(CONCURRENCY));
    let start = Instant::now();
    let mut runs = futures::stream::iter(0..n)
        .map(|i| {
            let host = host.clone();
            let slots = slots.clone();
            async move {
                let _slot = slots.acquire_owned().await?;
                let run = host.start::<Steps>(&format!("d-{i:06}"), 1).await?;
                run.result().await.map(|_| ()).map_err(BoxError::from)
            }
        })
        .buffer_unordered(IN_FLIGHT_STARTS);
    while let Some(r) = runs.next().await {
        r?;
    }
    drop(runs);
    let per_s = n as f64 / start.elapsed().as_secs_f64();
    within(LIMIT, "shutdown", host.shutdown()).await?;
    Ok(per_s)
}

pub(crate) fn queue(rt: &tokio::runtime::Runtime, cfg: &Config) -> Vec<Row> {
    let n = cfg.queue_runs;
    println!("\n## queue: {n} runs enqueued, admitted {CONCURRENCY} at a time");
    let scenario = format!("queue: drain {n} enqueued runs, concurrency {CONCURRENCY}, runs/s");
    let target = "admission cheap at 100,000 enqueued".to_owned();
    let queued = match rt.block_on(reel_queued(n)) {
        Ok(q) => q,
        Err(e) => {
            println!("  reel FAILED: {e}");
            return vec![Row::failed(&scenario, &target, &e)];
        }
    };
    let small = (n / 100).max(500);
    let short = match rt.block_on(reel_queued(small)) {
        Ok(q) => q,
        Err(e) => return vec![Row::failed(&scenario, &target, &e)],
    };
    let direct = match rt.block_on(reel_direct(n)) {
        Ok(d) => d,
        Err(e) => return vec![Row::failed(&scenario, &target, &e)],
    };
    let ratio = queued.drain_per_s / short.drain_per_s;
    println!(
        "  enqueue: {:.0} runs/s; reopen with {n} enqueued: {:.0} ms; drain: {:.0} runs/s",
        queued.enqueue_per_s,
        ms(queued.reopen),
        queued.drain_per_s
    );
    println!(
        "  drain of {small} enqueued: {:.0} runs/s; ratio {n}/{small}: {ratio:.2}x",
        short.drain_per_s
    );
    println!(
        "  same runs started directly, {CONCURRENCY} at a time: {direct:.0} runs/s (queued/direct {:.2}x)",
        queued.drain_per_s / direct
    );
    vec![Row {
        scenario,
        reel: format!(
            "{:.0} (enqueue {:.0}/s, reopen {:.0} ms; started directly {direct:.0})",
            queued.drain_per_s,
            queued.enqueue_per_s,
            ms(queued.reopen)
        ),
        raw: format!("{:.0} (drain of {small} enqueued)", short.drain_per_s),
        ratio: format!("{ratio:.2}x"),
        target: format!("{target} ({})", verdict(ratio >= 0.8)),
    }]
}
