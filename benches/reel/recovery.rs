//! Scenario 4, starts and recovery: 100,000 runs waiting on a signal (starts/s and
//! memory after passivation), then reopening the store with all of them
//! unfinished.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel::RunStatus;

use crate::Config;
use crate::util::*;

struct Recovery {
    /// From the first start to the last start's answer.
    started: Duration,
    /// CPU seconds of the process meanwhile.
    start_cpu: f64,
    before: Mem,
    passivated: Mem,
    trimmed: Mem,
    after_shutdown: Mem,
    reopened: Mem,
    build: Duration,
    first_step: Duration,
    old_run_wake: Duration,
    suspended: usize,
}

async fn reel_recovery(cfg: &Config) -> BenchResult<Recovery> {
    let n = cfg.recovery_runs;
    let dir = temp_dir();
    let before = mem();
    let host = Arc::new(waiting_host(dir.path()).await?);
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    start_waiters(&host, n, cfg.recovery_start_concurrency, |i| {
        format!("waiter-{i:06}")
    })
    .await?;
    let started = start.elapsed();
    let start_cpu = cpu_seconds() - cpu0;
    let live = wait_passivated(&host, Duration::from_secs(120)).await;
    let create = start.elapsed();
    println!(
        "  started {n} waiting runs in {:.1} s; all passivated after {:.1} s",
        started.as_secs_f64(),
        create.as_secs_f64()
    );
    if live != 0 {
        println!(
            "  !! BUG: {live} runs still live (not passivated) {:.0} s after the last start; the count stopped moving",
            (create - started).as_secs_f64()
        );
    }
    // It's a bench: give the passivation a moment to release what it releases.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let passivated = mem();
    heap::trim();
    let trimmed = mem();
    let infos = host.runs().await?;
    let suspended = infos
        .iter()
        .filter(|r| matches!(r.status, RunStatus::Suspended { .. }))
        .count();
    let stuck: Vec<String> = infos
        .iter()
        .filter(|r| !matches!(r.status, RunStatus::Suspended { .. }))
        .take(3)
        .map(|r| format!("{} {:?}", r.run_id, r.status))
        .collect();
    drop(infos);
    if let Some(first) = stuck.first() {
        let id = first.split(' ').next().unwrap_or_default();
        let h = host.handle::<Waiter>(id);
        let events = h.events().await?;
        println!("  !! log of {id}: {events:?}");
        // Is the stuck run still usable? (It then no longer counts as waiting.)
        let probe = async {
            within(LIMIT, "signal()", h.signal("go", &1u32, "probe")).await?;
            within(LIMIT, "result()", h.result()).await
        };
        match probe.await {
            Ok(v) => println!("  !! {id} still answers a signal: result {v}"),
            Err(e) => println!("  !! {id} does not answer a signal: {e}"),
        }
    }
    if suspended != n {
        println!(
            "  !! {suspended} of {n} runs are Suspended ({}); e.g. {}",
            status_breakdown(&host).await?,
            stuck.join("; ")
        );
    }
    let host = Arc::try_unwrap(host).map_err(|_| "host still shared")?;
    let shutdown = Instant::now();
    within(LIMIT, "host.shutdown()", host.shutdown()).await?;
    println!("  shutdown took {:.2} s", shutdown.elapsed().as_secs_f64());
    heap::trim();
    let after_shutdown = mem();

    // Reopen and accept new work.
    let t0 = Instant::now();
    let host = waiting_host(dir.path()).await?;
    let build = t0.elapsed();
    let run = within(
        LIMIT,
        "start after reopen",
        host.start::<Steps>("after-reopen", 1),
    )
    .await?;
    let out = within(LIMIT, "result() of the new run after reopen", run.result()).await?;
    let first_step = t0.elapsed();
    if out != 1 {
        return Err(format!("new run returned {out}").into());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reopened = mem();
    println!(
        "  live runs 1 s after reopening: {}",
        host.live_runs().await
    );
    // A recovered waiting run still works.
    let old = host.handle::<Waiter>(&format!("waiter-{:06}", n / 2));
    let t1 = Instant::now();
    within(
        LIMIT,
        "signal() to a recovered run",
        old.signal("go", &7u32, "go-1"),
    )
    .await?;
    let got = within(LIMIT, "result() of a recovered run", old.result()).await?;
    let old_run_wake = t1.elapsed();
    if got != 7 {
        return Err(format!("recovered run returned {got}, expected 7").into());
    }
    within(LIMIT, "host.shutdown()", host.shutdown()).await?;
    Ok(Recovery {
        started,
        start_cpu,
        before,
        passivated,
        trimmed,
        after_shutdown,
        reopened,
        build,
        first_step,
        old_run_wake,
        suspended,
    })
}

/// Raw fjall: write what starting `n` waiting runs writes, `batch` runs per batch
/// with one `SyncData` each: per run two ~100-byte log records (`RunStarted`,
/// `SignalAwaited`) and a ~100-byte metadata record twice (running, then
/// suspended) in both `meta` and `active`. Returns the time of those writes, then
/// closes and times reopening the database plus a full scan of the metadata
/// keyspace (the least a recovery must do).
fn raw_recovery(n: usize, batch: usize) -> BenchResult<(Duration, Duration)> {
    let dir = temp_dir();
    let create;
    {
        let (db, log) = raw_open(dir.path())?;
        let meta = db.keyspace("meta", KeyspaceCreateOptions::default)?;
        let active = db.keyspace("active", KeyspaceCreateOptions::default)?;
        let start = Instant::now();
        for chunk in (0..n).collect::<Vec<_>>().chunks(batch.max(1)) {
            let mut b = db.batch().durability(Some(PersistMode::SyncData));
            for &i in chunk {
                let run = format!("waiter-{i:06}");
                for state in 0..2u64 {
                    b.insert(&meta, run.as_bytes(), raw_value(i as u64 + state));
                    b.insert(&active, run.as_bytes(), raw_value(i as u64 + state));
                }
                b.insert(&log, raw_key(&run, 0), raw_value(0));
                b.insert(&log, raw_key(&run, 1), raw_value(1));
            }
            b.commit()?;
        }
        create = start.elapsed();
        db.persist(PersistMode::SyncAll)?;
    }
    let start = Instant::now();
    let db = Database::builder(dir.path()).open()?;
    let meta = db.keyspace("meta", KeyspaceCreateOptions::default)?;
    let mut count = 0usize;
    for g in meta.iter() {
        let (_k, _v) = g.into_inner()?;
        count += 1;
    }
    let elapsed = start.elapsed();
    if count != n {
        return Err(format!("raw scan found {count} records, expected {n}").into());
    }
    Ok((create, elapsed))
}

pub(crate) fn recovery(rt: &tokio::runtime::Runtime, cfg: &Config) -> Vec<Row> {
    let n = cfg.recovery_runs;
    println!("\n## recovery: {n} runs waiting on a signal");
    let reopen_scenario = format!("recovery, reopen with {n} waiting runs + first step");
    let mem_scenario = format!("memory, {n} passivated waiting runs (RSS)");
    let starts_scenario = format!(
        "starts, {n} runs waiting on a signal, {} in flight, runs/s",
        cfg.recovery_start_concurrency
    );
    let reel = match rt.block_on(reel_recovery(cfg)) {
        Ok(r) => r,
        Err(e) => {
            println!("  reel FAILED: {e}");
            return vec![
                Row::failed(&starts_scenario, ">= 40k runs/s", &e),
                Row::failed(&mem_scenario, "< 250 MiB", &e),
                Row::failed(&reopen_scenario, "< 2 s", &e),
            ];
        }
    };
    let raw = raw_recovery(n, cfg.recovery_start_concurrency);
    let reel_rate = n as f64 / reel.started.as_secs_f64();
    println!(
        "  reel: {n} starts in {:.2} s = {reel_rate:.0} runs/s; CPU {:.2} s ({:.0}% of {} cores), {:.1} µs CPU per start",
        reel.started.as_secs_f64(),
        reel.start_cpu,
        100.0 * reel.start_cpu
            / reel.started.as_secs_f64()
            / std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        reel.start_cpu * 1e6 / n as f64
    );
    let starts_row = match &raw {
        Ok((create, _)) => {
            let raw_rate = n as f64 / create.as_secs_f64();
            println!(
                "  raw fjall, the same records in batches of {} runs with one SyncData each: {raw_rate:.0} runs/s; reel/raw {:.2}x",
                cfg.recovery_start_concurrency,
                reel_rate / raw_rate
            );
            Row {
                scenario: starts_scenario,
                reel: format!("{reel_rate:.0}"),
                raw: format!("{raw_rate:.0}"),
                ratio: format!("{:.2}x", reel_rate / raw_rate),
                target: format!(">= 40k runs/s ({})", verdict(reel_rate >= 40_000.0)),
            }
        }
        Err(e) => Row::failed(&starts_scenario, ">= 40k runs/s", e),
    };
    println!("  {} of {n} runs Suspended; memory (MiB):", reel.suspended);
    println!(
        "    {:<44} {:>8} {:>8} {:>13}",
        "", "VmRSS", "VmHWM", "committed"
    );
    for (label, m) in [
        ("before creating the runs".to_owned(), reel.before),
        (format!("{n} runs created and passivated"), reel.passivated),
        ("  the same after mi_collect(true)".to_owned(), reel.trimmed),
        (
            "after host.shutdown() + mi_collect(true)".to_owned(),
            reel.after_shutdown,
        ),
        (
            "reopened host, 1 s after its first run".to_owned(),
            reel.reopened,
        ),
    ] {
        println!(
            "    {label:<44} {:>8.0} {:>8.0} {:>13.0}",
            m.rss, m.hwm, m.heap
        );
    }
    println!(
        "  reopen: build {:.0} ms, + start and finish a 1-step run: {:.0} ms total",
        ms(reel.build),
        ms(reel.first_step),
    );
    println!(
        "  signal -> result of one recovered waiting run: {:.1} ms",
        ms(reel.old_run_wake)
    );
    let (raw_cell, ratio_cell) = match &raw {
        Ok((_, d)) => {
            println!(
                "  raw fjall reopen + scan of {n} metadata records: {:.0} ms",
                ms(*d)
            );
            (
                format!("{:.0} ms (open + scan)", ms(*d)),
                format!("{:.1}x", reel.first_step.as_secs_f64() / d.as_secs_f64()),
            )
        }
        Err(e) => {
            println!("  raw recovery baseline FAILED: {e}");
            (format!("FAILED: {e}"), String::new())
        }
    };
    let mem_ok = reel.passivated.rss < 250.0;
    vec![
        starts_row,
        Row {
            scenario: mem_scenario,
            reel: format!(
                "{:.0} MiB (heap committed {:.0} MiB; {:.0} MiB after mi_collect)",
                reel.passivated.rss, reel.passivated.heap, reel.trimmed.rss
            ),
            raw: format!("{:.0} MiB (process before)", reel.before.rss),
            ratio: format!("+{:.0} MiB", reel.passivated.rss - reel.before.rss),
            target: format!("< 250 MiB ({})", verdict(mem_ok)),
        },
        Row {
            scenario: reopen_scenario,
            reel: format!("{:.0} ms", ms(reel.first_step)),
            raw: raw_cell,
            ratio: ratio_cell,
            target: format!(
                "< 2 s ({})",
                verdict(reel.first_step < Duration::from_secs(2))
            ),
        },
    ]
}
