//! Many runs at once: 10,000 runs of a three-step workflow, started concurrently,
//! with a progress bar, a throughput figure and the metrics reel reported (through
//! the `metrics` facade, kept by a recorder the example installs) at the end.
//!
//! ```text
//! cargo run --example many_runs
//! cargo run --release --example many_runs                 # optimized build
//! REEL_MANY_RUNS=2000 cargo run --example many_runs       # fewer runs
//! ```
//!
//! Environment: `REEL_MANY_RUNS` (runs, default 10,000), `REEL_MANY_RUNS_IN_FLIGHT`
//! (runs started and awaited at once, default: all of them) and
//! `REEL_MANY_RUNS_STALL_SECS` (fail if no run finishes for this long, default 30).
//!
//! Every step completion is fsynced before the handler sees it, but runs share
//! fsyncs: one writer thread commits whatever all runs queued in one batch. The
//! figure printed is what this machine did in this run, not a benchmark (see
//! `benches/` for those).

use metrics_util::debugging::DebugValue;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use reel::{Ctx, Host, RunStatus, Workflow};

const DATA_DIR: &str = "reel-data/many_runs";

/// A small order flow: three steps.
struct Order;

impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = u64;
    type Output = u64;

    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<u64> {
        let reserved = ctx
            .step("reserve", |_| async move { Ok::<_, String>(n) })
            .await?;
        let charged = ctx
            .step("charge", |_| async move { Ok::<_, String>(reserved * 2) })
            .await?;
        ctx.step("notify", |_| async move { Ok::<_, String>(charged + 1) })
            .await
    }
}

/// Resolves once the progress bar has not moved for `limit`.
async fn stall_watchdog(bar: &ProgressBar, limit: Duration) -> Duration {
    let mut last = (bar.position(), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let pos = bar.position();
        if pos != last.0 {
            last = (pos, Instant::now());
        } else if last.1.elapsed() >= limit {
            return last.1.elapsed();
        }
    }
}

fn env_usize(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .with_context(|| format!("{name}={v} is not a number")),
        Err(_) => Ok(default),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // reel reports through the `metrics` facade; a service would install a
    // Prometheus exporter here. This one keeps the values and prints them at the end.
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install()?;
    let runs = env_usize("REEL_MANY_RUNS", 10_000)?;
    let in_flight = env_usize("REEL_MANY_RUNS_IN_FLIGHT", runs)?.max(1);
    let stall_after = Duration::from_secs(env_usize("REEL_MANY_RUNS_STALL_SECS", 30)? as u64);
    match std::fs::remove_dir_all(DATA_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context(format!("wiping {DATA_DIR}")),
    }
    let host = Host::builder()
        .path(DATA_DIR)
        .register(Order)
        .build()
        .await?;
    println!("{runs} runs of a 3-step workflow, {in_flight} in flight, store ./{DATA_DIR}");

    // A live count of finished runs (drawn on stderr, hidden when it is not a terminal).
    let bar = ProgressBar::new(runs as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} runs (eta {eta})")?
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(100));

    let started = Instant::now();
    let host_ref = &host;
    let bar_ref = &bar;
    let work = futures::stream::iter(0..runs as u64)
        .map(|i| async move {
            let run = host_ref
                .start::<Order>(&format!("order-{i}"), i)
                .await
                .with_context(|| format!("starting order-{i}"))?;
            let out = run
                .result()
                .await
                .with_context(|| format!("result of order-{i}"))?;
            ensure!(out == i * 2 + 1, "order-{i} returned {out}");
            bar_ref.inc(1);
            Ok::<_, anyhow::Error>(out)
        })
        .buffer_unordered(in_flight)
        .try_fold(0u64, |sum, out| async move { Ok(sum + out) });

    // A run that never finishes would make this example hang; fail instead, naming
    // the runs that stopped making progress.
    let total = tokio::select! {
        total = work => total?,
        stalled = stall_watchdog(&bar, stall_after) => {
            bar.abandon();
            let stuck: Vec<String> = host
                .runs()
                .await?
                .into_iter()
                .filter(|r| r.status != RunStatus::Completed)
                .take(10)
                .map(|r| format!("{} ({:?})", r.run_id, r.status))
                .collect();
            bail!(
                "no run finished for {stalled:?} ({} of {runs} done); unfinished runs include: {}",
                bar.position(),
                stuck.join(", ")
            );
        }
    };
    let elapsed = started.elapsed();
    bar.finish_and_clear();

    let expected: u64 = (0..runs as u64).map(|i| i * 2 + 1).sum();
    ensure!(
        total == expected,
        "outputs sum to {total}, expected {expected}"
    );
    let events_per_run = host.handle::<Order>("order-0").events().await?.len();
    let events = runs * events_per_run;
    let secs = elapsed.as_secs_f64();
    println!(
        "{runs} runs completed in {elapsed:.2?}: {:.0} runs/s, {:.0} events/s \
         ({events_per_run} events per run, {events} events)",
        runs as f64 / secs,
        events as f64 / secs,
    );
    host.shutdown().await?;
    println!("metrics:");
    let mut lines: Vec<String> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
                .collect();
            let name = match labels.is_empty() {
                true => key.key().name().to_owned(),
                false => format!("{}{{{}}}", key.key().name(), labels.join(",")),
            };
            match value {
                DebugValue::Counter(n) => format!("  {name} {n}"),
                DebugValue::Gauge(g) => format!("  {name} {}", g.into_inner()),
                DebugValue::Histogram(v) => {
                    let sum: f64 = v.iter().map(|x| x.into_inner()).sum();
                    format!(
                        "  {name} count {} mean {:.6}",
                        v.len(),
                        sum / v.len().max(1) as f64
                    )
                }
            }
        })
        .collect();
    lines.sort();
    println!("{}", lines.join("\n"));
    Ok(())
}
