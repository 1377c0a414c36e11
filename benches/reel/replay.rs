//! Scenario 3, replay: waking a passivated run with a long log against a raw
//! prefix scan.

use std::time::{Duration, Instant};

use fjall::PersistMode;
use reel::{Host, RunStatus};

use crate::Config;
use crate::util::*;

struct Replay {
    events: usize,
    wake_ms: Vec<f64>,
    /// Median ms of replaying the finished log in memory (`reel::testing::replay`):
    /// the replay's CPU cost without the store, the actor or the fsyncs.
    in_memory_ms: f64,
}

async fn reel_replay(runs: usize, steps: u32) -> BenchResult<Replay> {
    let dir = temp_dir();
    let host = Host::builder()
        .path(dir.path())
        .register(StepsThenWait)
        .passivate_after(Duration::from_millis(50))
        .build()
        .await?;
    // The runs build their logs concurrently (their appends share fsyncs).
    let mut handles = Vec::new();
    for i in 0..runs {
        handles.push(
            host.start::<StepsThenWait>(&format!("replay-{i}"), steps)
                .await?,
        );
    }
    let build = Instant::now();
    for h in &handles {
        wait_suspended(h, steps).await?;
    }
    println!(
        "  built {runs} logs of {steps} steps in {:.2} s",
        build.elapsed().as_secs_f64()
    );
    let live = wait_passivated(&host, Duration::from_secs(30)).await;
    if live != 0 {
        return Err(
            format!("{live} runs still live 30 s after suspending (not passivated)").into(),
        );
    }
    // Let the passivation settle (it's a bench: a plain sleep is fine).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let events = handles[0].events().await?.len();
    let mut wake_ms = Vec::new();
    for (i, h) in handles.iter().enumerate() {
        match h.status().await? {
            RunStatus::Suspended { .. } => {}
            other => return Err(format!("{}: expected Suspended, got {other:?}", h.id()).into()),
        }
        let start = Instant::now();
        within(
            LIMIT,
            &format!("{} signal()", h.id()),
            h.signal("go", &(i as u32), &format!("go-{i}")),
        )
        .await?;
        let out = within(
            LIMIT,
            &format!("{} result() after the signal", h.id()),
            h.result(),
        )
        .await?;
        let elapsed = start.elapsed();
        if out != i as u32 + steps {
            return Err(
                format!("{}: returned {out}, expected {}", h.id(), i as u32 + steps).into(),
            );
        }
        wake_ms.push(ms(elapsed));
    }
    let log = handles[0].events().await?;
    within(LIMIT, "host.shutdown()", host.shutdown()).await?;
    let mut in_memory = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let replayed = reel::testing::replay(StepsThenWait, &log).await?;
        in_memory.push(ms(start.elapsed()));
        if !matches!(replayed, reel::testing::Replayed::Completed(_)) {
            return Err(format!("in-memory replay of the finished log: {replayed:?}").into());
        }
    }
    Ok(Replay {
        events,
        wake_ms,
        in_memory_ms: median(in_memory),
    })
}

/// Median ms of a raw prefix scan (collecting keys and values) of `records`
/// ~100-byte records of one run, among 3 runs' worth of data. Also returns the
/// first (coldest) scan.
fn raw_replay(records: usize) -> BenchResult<(f64, f64)> {
    let dir = temp_dir();
    let (db, log) = raw_open(dir.path())?;
    for run in 0..3 {
        let name = format!("replay-{run}");
        for chunk in (0..records as u64).collect::<Vec<_>>().chunks(2_048) {
            let mut b = db.batch().durability(Some(PersistMode::SyncData));
            for &seq in chunk {
                b.insert(&log, raw_key(&name, seq), raw_value(seq));
            }
            b.commit()?;
        }
    }
    let mut prefix = b"replay-1".to_vec();
    prefix.push(0);
    let mut times = Vec::new();
    let mut first = 0.0;
    for i in 0..5 {
        let start = Instant::now();
        let mut got = Vec::with_capacity(records);
        for g in log.prefix(&prefix) {
            let (k, v) = g.into_inner()?;
            got.push((k, v));
        }
        let t = ms(start.elapsed());
        if got.len() != records {
            return Err(format!(
                "prefix scan found {} records, expected {records}",
                got.len()
            )
            .into());
        }
        if i == 0 {
            first = t;
        }
        times.push(t);
    }
    Ok((first, median(times)))
}

pub(crate) fn replay(rt: &tokio::runtime::Runtime, cfg: &Config) -> Row {
    let steps = cfg.replay_steps;
    println!(
        "\n## replay: wake {} passivated runs of {steps} steps + a signal wait",
        cfg.replay_runs
    );
    let target = "< 20 ms".to_owned();
    let scenario = format!("replay, wake a passivated ~{}-event run", 2 * steps);
    let reel = match rt.block_on(reel_replay(cfg.replay_runs, steps)) {
        Ok(r) => r,
        Err(e) => {
            println!("  reel FAILED: {e}");
            return Row::failed(&scenario, &target, &e);
        }
    };
    let (raw_first, raw_median) = match raw_replay(reel.events) {
        Ok(r) => r,
        Err(e) => return Row::failed(&scenario, &target, &e),
    };
    let wake = median(reel.wake_ms.clone());
    println!(
        "  in-memory replay of the finished log (reel::testing, no store): median {:.2} ms",
        reel.in_memory_ms
    );
    println!(
        "  reel: log of {} events; signal -> result: {} ms (median {wake:.1} ms)",
        reel.events,
        reel.wake_ms
            .iter()
            .map(|t| format!("{t:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  raw fjall prefix scan of {} records: first {raw_first:.2} ms, median of 5 {raw_median:.2} ms",
        reel.events
    );
    Row {
        scenario: format!("replay, wake a passivated {}-event run", reel.events),
        reel: format!(
            "{wake:.1} ms (in-memory replay {:.1} ms)",
            reel.in_memory_ms
        ),
        raw: format!("{raw_median:.2} ms (scan)"),
        ratio: format!("{:.1}x", wake / raw_median),
        target: format!("{target} ({})", verdict(wake < 20.0)),
    }
}
