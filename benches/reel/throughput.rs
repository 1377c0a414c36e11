//! Scenario 2, throughput: 10,000 concurrent runs x 10 steps against raw fjall
//! batches.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fjall::PersistMode;
use reel::Host;

use crate::Config;
use crate::util::*;

/// Events/s of raw fjall committing `total` ~100-byte inserts (keys spread over
/// `runs` runs) in batches of `batch` with one `SyncData` each.
fn raw_throughput(total: usize, runs: usize, batch: usize) -> BenchResult<f64> {
    let dir = temp_dir();
    let (db, log) = raw_open(dir.path())?;
    let names: Vec<String> = (0..runs).map(|i| format!("run-{i:05}")).collect();
    let start = Instant::now();
    let mut written = 0usize;
    while written < total {
        let mut b = db.batch().durability(Some(PersistMode::SyncData));
        let end = (written + batch).min(total);
        for i in written..end {
            let seq = (i / runs) as u64;
            b.insert(&log, raw_key(&names[i % runs], seq), raw_value(seq));
        }
        b.commit()?;
        written = end;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

struct Throughput {
    events_per_s: f64,
    elapsed: Duration,
    events_per_run: usize,
    cpu: f64,
}

async fn reel_throughput(runs: usize, steps: u32) -> BenchResult<Throughput> {
    let dir = temp_dir();
    let host = Arc::new(
        Host::builder()
            .path(dir.path())
            .register(Steps)
            .build()
            .await?,
    );
    let warm = host.start::<Steps>("warmup", 1).await?;
    within(LIMIT, "warm-up run result()", warm.result()).await?;
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|i| {
            let host = host.clone();
            tokio::spawn(async move {
                let id = format!("run-{i:05}");
                let run = within(
                    LIMIT,
                    &format!("start {id}"),
                    host.start::<Steps>(&id, steps),
                )
                .await?;
                within(LIMIT, &format!("{id} result()"), run.result()).await
            })
        })
        .collect();
    let mut failures = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(out)) if out == steps => {}
            Ok(Ok(out)) => failures.push(format!("returned {out}")),
            Ok(Err(e)) => failures.push(e.to_string()),
            Err(e) => failures.push(format!("task: {e}")),
        }
    }
    let elapsed = start.elapsed();
    let cpu = cpu_seconds() - cpu0;
    if !failures.is_empty() {
        return Err(format!(
            "{} of {runs} runs failed, first: {}",
            failures.len(),
            failures[0]
        )
        .into());
    }
    let events_per_run = host.handle::<Steps>("run-00000").events().await?.len();
    let host = Arc::try_unwrap(host).map_err(|_| "host still shared")?;
    within(LIMIT, "host.shutdown()", host.shutdown()).await?;
    Ok(Throughput {
        events_per_s: (events_per_run * runs) as f64 / elapsed.as_secs_f64(),
        elapsed,
        events_per_run,
        cpu,
    })
}

/// The median of `v` (the upper one of an even count).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Figures as a list, `"a, b, c"`.
fn listed(v: &[f64], digits: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.digits$}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn throughput(rt: &tokio::runtime::Runtime, cfg: &Config) -> Row {
    let (runs, steps, rounds) = (cfg.tp_runs, cfg.tp_steps, cfg.tp_rounds);
    println!("\n## throughput: {runs} concurrent runs x {steps} steps, {rounds} rounds");
    let target = ">= 0.5x".to_owned();
    let scenario = format!("throughput, {runs} runs x {steps} steps, events/s");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (mut reel_rates, mut raw_rates, mut ratios, mut cpu_per_event) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        // Each round on a new store, raw fjall right after reel on as many records.
        let reel = match rt.block_on(reel_throughput(runs, steps)) {
            Ok(t) => t,
            Err(e) => {
                println!("  reel FAILED: {e}");
                return Row::failed(&scenario, &target, &e);
            }
        };
        let total = reel.events_per_run * runs;
        let raw = match raw_throughput(total, runs, cfg.raw_batch) {
            Ok(r) => r,
            Err(e) => return Row::failed(&scenario, &target, &e),
        };
        let cpu = reel.cpu * 1e6 / total as f64;
        println!(
            "  round {round}: reel {total} events ({} per run) in {:.2} s = {:.0} events/s \
             ({:.0} steps/s), CPU {:.2} s ({:.0}% of {cores} cores), {cpu:.1} µs CPU per event; \
             raw fjall {raw:.0} events/s (batches of {}, one SyncData each); ratio {:.2}x",
            reel.events_per_run,
            reel.elapsed.as_secs_f64(),
            reel.events_per_s,
            (runs as f64 * f64::from(steps)) / reel.elapsed.as_secs_f64(),
            reel.cpu,
            100.0 * reel.cpu / reel.elapsed.as_secs_f64() / cores as f64,
            cfg.raw_batch,
            reel.events_per_s / raw,
        );
        reel_rates.push(reel.events_per_s);
        raw_rates.push(raw);
        ratios.push(reel.events_per_s / raw);
        cpu_per_event.push(cpu);
    }
    let ratio = median(&ratios);
    println!(
        "  medians of {rounds}: reel {:.0} events/s ({}), {:.1} µs CPU per event ({}); raw fjall {:.0} ({})",
        median(&reel_rates),
        listed(&reel_rates, 0),
        median(&cpu_per_event),
        listed(&cpu_per_event, 1),
        median(&raw_rates),
        listed(&raw_rates, 0),
    );
    println!(
        "  ratio reel/raw: {ratio:.2}x, median of {} ({})",
        listed(&ratios, 2),
        verdict(ratio >= 0.5)
    );
    Row {
        scenario,
        reel: format!("{:.0}", median(&reel_rates)),
        raw: format!("{:.0}", median(&raw_rates)),
        ratio: format!("{ratio:.2}x"),
        target: format!("{target} ({})", verdict(ratio >= 0.5)),
    }
}
