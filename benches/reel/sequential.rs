//! Scenario 1, sequential: one run of 1,000 no-op steps against one raw insert +
//! fdatasync per step.
//!
//! Twice: on a new store against a new fjall database, then after both are closed
//! and reopened. fjall creates its journal at full length but reopens it cut to its
//! content and appends to it, so after a reopen every fdatasync also commits the
//! file's new size (until the journal rotates after 64 MB): the second pair shows
//! that cost, which reel and raw fjall pay alike.

use std::time::{Duration, Instant};

use fjall::{Database, PersistMode};
use reel::Host;
use tempfile::TempDir;

use crate::Config;
use crate::util::*;

/// Rounds of the sequential scenario; reel and raw alternate so that both see the
/// same phases of the (noisy) disk, and the medians are compared.
const SEQ_ROUNDS: usize = 3;

pub(crate) struct RawSequential {
    dir: TempDir,
    db: Database,
    log: fjall::Keyspace,
    next: u64,
}

impl RawSequential {
    pub(crate) fn open() -> BenchResult<RawSequential> {
        let dir = temp_dir();
        let (db, log) = raw_open(dir.path())?;
        let mut raw = RawSequential {
            dir,
            db,
            log,
            next: 0,
        };
        raw.round(10)?; // warm-up
        Ok(raw)
    }

    /// The same database closed and opened again.
    fn reopen(self) -> BenchResult<RawSequential> {
        let RawSequential { dir, db, log, next } = self;
        drop(log);
        drop(db);
        let (db, log) = raw_open(dir.path())?;
        let mut raw = RawSequential { dir, db, log, next };
        raw.round(10)?; // warm-up
        Ok(raw)
    }

    /// Mean time of `n` insert + persist(SyncData).
    pub(crate) fn round(&mut self, n: u32) -> BenchResult<Duration> {
        let start = Instant::now();
        for _ in 0..n {
            let seq = self.next;
            self.next += 1;
            self.log
                .insert(raw_key("sequential", seq), raw_value(seq))?;
            self.db.persist(PersistMode::SyncData)?;
        }
        Ok(start.elapsed() / n)
    }
}

/// Per-step time of one run of `n` no-op steps, start -> result.
async fn reel_sequential_round(host: &Host, id: &str, n: u32) -> BenchResult<Duration> {
    let start = Instant::now();
    let run = host.start::<Steps>(id, n).await?;
    let out = within(LIMIT, &format!("{id} result()"), run.result()).await?;
    let elapsed = start.elapsed();
    if out != n {
        return Err(format!("{id} returned {out}, expected {n}").into());
    }
    let events = run.events().await?.len();
    let expected = 2 * n as usize + 2;
    if events != expected {
        return Err(format!("{id}: log holds {events} events, expected {expected}").into());
    }
    Ok(elapsed / n)
}

/// Alternating rounds of reel (new runs on `host`) and raw fjall: per-step µs.
fn rounds(
    rt: &tokio::runtime::Runtime,
    host: &Host,
    raw: &mut RawSequential,
    n: u32,
    label: &str,
) -> BenchResult<(Vec<f64>, Vec<f64>)> {
    let (mut reel_us, mut raw_us) = (Vec::new(), Vec::new());
    for round in 0..SEQ_ROUNDS {
        let r = rt.block_on(reel_sequential_round(
            host,
            &format!("sequential-{label}-{round}"),
            n,
        ))?;
        let b = raw.round(n)?;
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "  {label} round {round}: reel {:.1} µs/step, raw insert + persist(SyncData) {:.1} µs ({:.2}x)",
            us(r),
            us(b),
            r.as_secs_f64() / b.as_secs_f64()
        );
        reel_us.push(us(r));
        raw_us.push(us(b));
    }
    Ok((reel_us, raw_us))
}

/// The fresh pair of rounds, then the pair after reopening both stores.
type Medians = [(f64, f64); 2];

fn measure(rt: &tokio::runtime::Runtime, n: u32) -> BenchResult<Medians> {
    let dir = temp_dir();
    let build = || Host::builder().path(dir.path()).register(Steps).build();
    let host = rt.block_on(build())?;
    // Warm-up run: keyspaces, committer, actor system.
    rt.block_on(reel_sequential_round(&host, "warmup", (n / 10).max(1)))?;
    let mut raw = RawSequential::open()?;
    let (reel_new, raw_new) = rounds(rt, &host, &mut raw, n, "new store")?;
    rt.block_on(within(LIMIT, "host.shutdown()", host.shutdown()))?;
    let host = rt.block_on(build())?;
    rt.block_on(reel_sequential_round(
        &host,
        "warmup-reopened",
        (n / 10).max(1),
    ))?;
    let mut raw = raw.reopen()?;
    let (reel_old, raw_old) = rounds(rt, &host, &mut raw, n, "reopened")?;
    rt.block_on(within(LIMIT, "host.shutdown()", host.shutdown()))?;
    Ok([
        (median(reel_new), median(raw_new)),
        (median(reel_old), median(raw_old)),
    ])
}

pub(crate) fn sequential(rt: &tokio::runtime::Runtime, cfg: &Config) -> Vec<Row> {
    let n = cfg.seq_steps;
    println!(
        "\n## sequential: one run of {n} no-op steps ({SEQ_ROUNDS} rounds, alternating with raw fjall), on new stores, then reopened"
    );
    let target = "<= 1.2x";
    let scenarios = [
        format!("sequential, {n} steps, per step"),
        format!("sequential on reopened stores, {n} steps, per step"),
    ];
    let medians = match measure(rt, n) {
        Ok(m) => m,
        Err(e) => {
            println!("  FAILED: {e}");
            return scenarios
                .iter()
                .map(|s| Row::failed(s, target, &e))
                .collect();
        }
    };
    scenarios
        .iter()
        .zip(medians)
        .map(|(scenario, (reel, raw))| {
            let ratio = reel / raw;
            println!(
                "  {scenario}: median reel {reel:.1} µs/step (2 events per step), raw {raw:.1} µs; ratio {ratio:.2}x ({})",
                verdict(ratio <= 1.2)
            );
            Row {
                scenario: scenario.clone(),
                reel: format!("{:.3} ms", reel / 1e3),
                raw: format!("{:.3} ms", raw / 1e3),
                ratio: format!("{ratio:.2}x"),
                target: format!("{target} ({})", verdict(ratio <= 1.2)),
            }
        })
        .collect()
}
