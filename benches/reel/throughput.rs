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

pub(crate) fn throughput(rt: &tokio::runtime::Runtime, cfg: &Config) -> Row {
    let (runs, steps) = (cfg.tp_runs, cfg.tp_steps);
    println!("\n## throughput: {runs} concurrent runs x {steps} steps");
    let target = ">= 0.5x".to_owned();
    let scenario = format!("throughput, {runs} runs x {steps} steps, events/s");
    let reel = match rt.block_on(reel_throughput(runs, steps)) {
        Ok(t) => t,
        Err(e) => {
            println!("  reel FAILED: {e}");
            return Row::failed(&scenario, &target, &e);
        }
    };
    let total = reel.events_per_run * runs;
    // Raw fjall right after reel and once more, to see how much the disk drifts.
    let raw_rates = match (0..2)
        .map(|_| raw_throughput(total, runs, cfg.raw_batch))
        .collect::<BenchResult<Vec<f64>>>()
    {
        Ok(r) => r,
        Err(e) => return Row::failed(&scenario, &target, &e),
    };
    let raw = raw_rates.iter().sum::<f64>() / raw_rates.len() as f64;
    let ratio = reel.events_per_s / raw;
    println!(
        "  reel: {total} events ({} per run) in {:.2} s = {:.0} events/s ({:.0} steps/s)",
        reel.events_per_run,
        reel.elapsed.as_secs_f64(),
        reel.events_per_s,
        (runs as f64 * f64::from(steps)) / reel.elapsed.as_secs_f64()
    );
    println!(
        "        CPU {:.2} s over {:.2} s wall ({:.0}% of {} cores busy); {:.1} µs CPU per event",
        reel.cpu,
        reel.elapsed.as_secs_f64(),
        100.0 * reel.cpu
            / reel.elapsed.as_secs_f64()
            / std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        reel.cpu * 1e6 / total as f64
    );
    println!(
        "  raw fjall, {total} inserts in batches of {} with one SyncData each: {} events/s (mean {raw:.0})",
        cfg.raw_batch,
        raw_rates
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("  ratio reel/raw: {ratio:.2}x  ({})", verdict(ratio >= 0.5));
    Row {
        scenario,
        reel: format!("{:.0}", reel.events_per_s),
        raw: format!("{raw:.0}"),
        ratio: format!("{ratio:.2}x"),
        target: format!("{target} ({})", verdict(ratio >= 0.5)),
    }
}
