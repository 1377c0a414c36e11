//! Scenario 1, sequential: one run of 1,000 no-op steps against one raw insert +
//! fdatasync per step.

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
    _dir: TempDir,
    db: Database,
    log: fjall::Keyspace,
    next: u64,
}

impl RawSequential {
    pub(crate) fn open() -> BenchResult<RawSequential> {
        let dir = temp_dir();
        let (db, log) = raw_open(dir.path())?;
        let mut raw = RawSequential {
            _dir: dir,
            db,
            log,
            next: 0,
        };
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

pub(crate) fn sequential(rt: &tokio::runtime::Runtime, cfg: &Config) -> Row {
    let n = cfg.seq_steps;
    println!(
        "\n## sequential: one run of {n} no-op steps ({SEQ_ROUNDS} rounds, alternating with raw fjall)"
    );
    let target = "<= 1.2x";
    let scenario = format!("sequential, {n} steps, per step");
    let result: BenchResult<(Vec<f64>, Vec<f64>)> = (|| {
        let dir = temp_dir();
        let host = rt.block_on(Host::builder().path(dir.path()).register(Steps).build())?;
        // Warm-up run: keyspaces, committer, actor system.
        rt.block_on(reel_sequential_round(&host, "warmup", (n / 10).max(1)))?;
        let mut raw = RawSequential::open()?;
        let (mut reel_us, mut raw_us) = (Vec::new(), Vec::new());
        for round in 0..SEQ_ROUNDS {
            let r = rt.block_on(reel_sequential_round(
                &host,
                &format!("sequential-{round}"),
                n,
            ))?;
            let b = raw.round(n)?;
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            println!(
                "  round {round}: reel {:.1} µs/step, raw insert + persist(SyncData) {:.1} µs ({:.2}x)",
                us(r),
                us(b),
                r.as_secs_f64() / b.as_secs_f64()
            );
            reel_us.push(us(r));
            raw_us.push(us(b));
        }
        rt.block_on(within(LIMIT, "host.shutdown()", host.shutdown()))?;
        Ok((reel_us, raw_us))
    })();
    let (reel_us, raw_us) = match result {
        Ok(v) => v,
        Err(e) => {
            println!("  FAILED: {e}");
            return Row::failed(&scenario, target, &e);
        }
    };
    let (reel, raw) = (median(reel_us), median(raw_us));
    let ratio = reel / raw;
    println!(
        "  median: reel {reel:.1} µs/step (2 events per step), raw {raw:.1} µs; ratio {ratio:.2}x ({})",
        verdict(ratio <= 1.2)
    );
    Row {
        scenario,
        reel: format!("{:.3} ms", reel / 1e3),
        raw: format!("{:.3} ms", raw / 1e3),
        ratio: format!("{ratio:.2}x"),
        target: format!("{target} ({})", verdict(ratio <= 1.2)),
    }
}
