//! Scenario 8, a million waiting runs: 1,000,000 runs waiting on a signal, started
//! 4,096 at a time and passivated; resident memory then (DESIGN.md target: under
//! 1 GB), and the time from `signal()` to `result()` of 1,000 of them picked across
//! the whole range, one after another (each is activated from disk, replays and
//! finishes: target p99 under 10 ms), against two raw insert + fdatasync (a signal
//! and the run's end are two durable writes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Config;
use crate::sequential::RawSequential;
use crate::util::*;

struct Million {
    started: Duration,
    before: Mem,
    passivated: Mem,
    trimmed: Mem,
    /// ms from `signal()` to `result()`, sorted.
    latencies: Vec<f64>,
}

/// The `q`-quantile of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

async fn reel_million(n: usize, samples: usize, in_flight: usize) -> BenchResult<Million> {
    let dir = temp_dir();
    let before = mem();
    let host = Arc::new(waiting_host(dir.path()).await?);
    let start = Instant::now();
    start_waiters(&host, n, in_flight, |i| format!("m-{i:07}")).await?;
    let started = start.elapsed();
    let live = wait_passivated(&host, Duration::from_secs(300)).await;
    if live != 0 {
        println!("  !! BUG: {live} runs still live (not passivated) after the last start");
    }
    // As in the recovery scenario: a moment for the passivation to release memory.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let passivated = mem();
    heap::trim();
    let trimmed = mem();
    let mut latencies = Vec::with_capacity(samples);
    for k in 0..samples {
        // Spread over the whole range, so most wake runs long flushed to disk.
        let i = (k * n / samples + k % 97) % n;
        let h = host.handle::<Waiter>(&format!("m-{i:07}"));
        let payload = k as u32;
        let t = Instant::now();
        within(
            LIMIT,
            "signal()",
            h.signal("go", &payload, &format!("go-{k}")),
        )
        .await?;
        let got = within(LIMIT, "result()", h.result()).await?;
        latencies.push(ms(t.elapsed()));
        if got != payload {
            return Err(format!("m-{i:07} returned {got}, expected {payload}").into());
        }
    }
    latencies.sort_by(f64::total_cmp);
    let host = Arc::try_unwrap(host).map_err(|_| "host still shared")?;
    within(LIMIT, "host.shutdown()", host.shutdown()).await?;
    Ok(Million {
        started,
        before,
        passivated,
        trimmed,
        latencies,
    })
}

pub(crate) fn million(rt: &tokio::runtime::Runtime, cfg: &Config) -> Vec<Row> {
    let (n, samples) = (cfg.million_runs, cfg.million_samples);
    println!(
        "\n## million: {n} runs waiting on a signal, then signal -> result of {samples} of them"
    );
    let mem_scenario = format!("memory, {n} passivated waiting runs (RSS)");
    let wake_scenario = format!("signal -> result, {samples} of {n} passivated runs, p50 / p99");
    let reel = match rt.block_on(reel_million(n, samples, cfg.recovery_start_concurrency)) {
        Ok(r) => r,
        Err(e) => {
            println!("  reel FAILED: {e}");
            return vec![
                Row::failed(&mem_scenario, "< 1 GB", &e),
                Row::failed(&wake_scenario, "p99 < 10 ms", &e),
            ];
        }
    };
    println!(
        "  started {n} runs in {:.1} s ({:.0} runs/s); resident {:.0} MiB after passivation (peak {:.0}, heap committed {:.0}), {:.0} MiB after mi_collect; {:.0} MiB before",
        reel.started.as_secs_f64(),
        n as f64 / reel.started.as_secs_f64(),
        reel.passivated.rss,
        reel.passivated.hwm,
        reel.passivated.heap,
        reel.trimmed.rss,
        reel.before.rss
    );
    let v = &reel.latencies;
    let (p50, p99, max) = (quantile(v, 0.5), quantile(v, 0.99), quantile(v, 1.0));
    println!("  signal -> result: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms");
    let raw = RawSequential::open().and_then(|mut r| r.round(200));
    let (raw_cell, ratio_cell) = match &raw {
        Ok(per) => {
            let pair = 2.0 * ms(*per);
            println!("  raw fjall, 2 x insert + fdatasync: {pair:.3} ms");
            (
                format!("{pair:.3} ms (2 x insert + fdatasync)"),
                format!("{:.1}x / {:.1}x", p50 / pair, p99 / pair),
            )
        }
        Err(e) => (format!("FAILED: {e}"), String::new()),
    };
    let gib = reel.passivated.rss < 1024.0;
    vec![
        Row {
            scenario: mem_scenario,
            reel: format!(
                "{:.0} MiB ({:.0} MiB after mi_collect)",
                reel.passivated.rss, reel.trimmed.rss
            ),
            raw: format!("{:.0} MiB (process before)", reel.before.rss),
            ratio: format!("+{:.0} MiB", reel.passivated.rss - reel.before.rss),
            target: format!("< 1 GB ({})", verdict(gib)),
        },
        Row {
            scenario: wake_scenario,
            reel: format!("{p50:.2} / {p99:.2} ms (max {max:.2})"),
            raw: raw_cell,
            ratio: ratio_cell,
            target: format!("p99 < 10 ms ({})", verdict(p99 < 10.0)),
        },
    ]
}
