//! End-to-end benchmark of reel's performance targets (DESIGN.md, "Performance
//! targets"), each scenario measured side by side with a raw fjall baseline in the
//! same run, on temporary directories, and printed as a ratio:
//!
//! 1. sequential: one run of 1,000 no-op steps; per-step time against one raw
//!    `keyspace.insert` + `db.persist(SyncData)` (target: ratio <= 1.2x); on new
//!    stores, then on both reopened (fjall appends to a reopened journal, which
//!    costs each fdatasync a file-size commit).
//! 2. throughput: 10,000 concurrent runs x 10 steps, started at once, all results
//!    awaited; durable events/s against raw fjall batches of 2,048 ~100-byte inserts
//!    with one `SyncData` per batch (target: >= 0.5x raw). Three rounds, reel then
//!    raw in each; the medians are the figures (one round's can be a third off:
//!    this VM's first touch of fresh memory sometimes costs a fifth of the CPU).
//! 3. replay: a passivated run whose log holds ~10,000 events (5,000 steps, then a
//!    signal wait); time from `signal()` to `result()` (reload + replay), against a
//!    raw prefix scan of 10,000 records (target: < 20 ms).
//! 4. starts + recovery: 100,000 runs waiting on a signal, 4,096 starts in flight,
//!    passivated after 100 ms: runs/s against raw fjall batches of the same records
//!    (target: >= 40k runs/s), resident memory after passivation against the
//!    process before (target: < 250 MiB); then shut down and time reopening the host +
//!    one new run completing its first step (target: < 2 s), against a raw fjall
//!    reopen + scan of 100,000 metadata records.
//! 5. entity: one run looping `wait_for_signal` + one step, signalled 10,000 times
//!    one after another; ms per signal over the first 100 and the last 100, against
//!    two raw insert + fdatasync (a signal costs two durable writes: the signal, the
//!    step's result). Twice: in one log segment, and continuing as new every 1,000
//!    signals. Target: the last 100 within 1.5x of the first 100.
//! 6. listing: `Host::list` (a page of 50: unfiltered, by status, by workflow, the
//!    20th page) and `Host::count` over 1,000,000 runs, against raw fjall reading
//!    50 metadata records and scanning all of them (target: flat in the number of
//!    runs).
//! 7. queue: see `queue.rs`.
//! 8. million: 1,000,000 runs waiting on a signal, passivated: resident memory
//!    (target: under 1 GB), then `signal()` -> `result()` of 1,000 of them across
//!    the range, one after another (target: p99 under 10 ms), against two raw
//!    insert + fdatasync. Runs second, after recovery: its memory figure also shows
//!    the process before it.
//!
//! A plain `main` printing a table: `cargo bench --bench reel`.
//! - `REEL_BENCH_QUICK=1` scales everything down for a smoke run of a few seconds.
//! - `REEL_BENCH_ONLY=sequential,throughput,replay,recovery,entity,listing,queue,million`
//!   picks scenarios.
//! - `REEL_BENCH_TP_RUNS` (default 10,000) and `REEL_BENCH_TP_STEPS` (default 10):
//!   the throughput scenario's runs and steps per run; `REEL_BENCH_TP_ROUNDS`
//!   (default 3): its rounds, each reel on a new store then raw fjall, whose
//!   medians it reports.
//! - `REEL_BENCH_START_CONCURRENCY` (default 4,096): starts in flight at once in
//!   the recovery and million scenarios.
//! - `REEL_BENCH_MILLION_RUNS` (default 1,000,000): runs of the million scenario.
//! - `REEL_BENCH_ENTITY_SIGNALS` (default 10,000): signals of the entity scenario.
//! - `REEL_BENCH_TRACING` (say `info`): installs a `tracing` subscriber with that
//!   filter that formats what it records and writes it nowhere, as a service that
//!   logs would; the default records nothing.
//! - `REEL_BENCH_DIR` picks the filesystem of the temporary directories (default:
//!   the system temp dir); the figures are dominated by fsync.
//!
//! The process uses mimalloc as its global allocator (raw baselines included): with
//! glibc's, 100,000 starts leave ~300 MiB resident for ~65 MiB of heap in use,
//! which measures glibc's per-thread arenas rather than reel.
//!
//! The recovery scenario runs first so that its memory figures are not blurred by
//! heap left over from the other scenarios. Figures are printed, not asserted; a
//! scenario that fails prints its error in the table and the others still run.

use std::fmt::Write as _;

/// mimalloc, for the raw baselines and reel alike: with glibc's allocator the
/// memory figure measures glibc's per-thread arenas (memory freed after the burst
/// of activations stays resident) more than reel's heap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::Instant;

mod entity;
mod listing;
mod million;
mod queue;
mod recovery;
mod replay;
mod sequential;
mod throughput;
mod util;

use util::Row;

pub(crate) struct Config {
    quick: bool,
    only: Option<Vec<String>>,
    seq_steps: u32,
    tp_runs: usize,
    tp_steps: u32,
    tp_rounds: usize,
    raw_batch: usize,
    replay_steps: u32,
    replay_runs: usize,
    recovery_runs: usize,
    recovery_start_concurrency: usize,
    entity_signals: u32,
    listing_runs: usize,
    million_runs: usize,
    million_samples: usize,
    queue_runs: usize,
}

impl Config {
    fn from_env() -> Config {
        let quick = std::env::var("REEL_BENCH_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
        let only = std::env::var("REEL_BENCH_ONLY").ok().map(|v| {
            v.split(',')
                .map(|s| s.trim().to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect()
        });
        Config {
            quick,
            only,
            seq_steps: if quick { 100 } else { 1_000 },
            tp_runs: std::env::var("REEL_BENCH_TP_RUNS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(if quick { 500 } else { 10_000 }),
            tp_steps: std::env::var("REEL_BENCH_TP_STEPS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(10),
            tp_rounds: std::env::var("REEL_BENCH_TP_ROUNDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .unwrap_or(if quick { 1 } else { 3 }),
            raw_batch: 2_048,
            replay_steps: if quick { 500 } else { 5_000 },
            replay_runs: 3,
            recovery_runs: if quick { 2_000 } else { 100_000 },
            recovery_start_concurrency: std::env::var("REEL_BENCH_START_CONCURRENCY")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(4_096),
            entity_signals: std::env::var("REEL_BENCH_ENTITY_SIGNALS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(if quick { 250 } else { 10_000 }),
            listing_runs: if quick { 3_000 } else { 1_000_000 },
            million_runs: std::env::var("REEL_BENCH_MILLION_RUNS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(if quick { 5_000 } else { 1_000_000 }),
            million_samples: if quick { 100 } else { 1_000 },
            queue_runs: if quick { 2_000 } else { 100_000 },
        }
    }

    fn wants(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|s| s == scenario))
    }
}

fn main() {
    let cfg = Config::from_env();
    if let Ok(filter) = std::env::var("REEL_BENCH_TRACING") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::sink)
            .init();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!(
        "reel end-to-end bench ({} mode; temp dirs under {}; {} CPUs)",
        if cfg.quick { "quick" } else { "full" },
        std::env::var("REEL_BENCH_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let all = Instant::now();
    let mut rows: Vec<(usize, Row)> = Vec::new();
    let mut timed = |name: &str, f: &mut dyn FnMut() -> Vec<Row>, order: usize| {
        if !cfg.wants(name) {
            return;
        }
        let t = Instant::now();
        let out = f();
        println!("  ({name} took {:.1} s)", t.elapsed().as_secs_f64());
        rows.extend(out.into_iter().map(|r| (order, r)));
    };
    // Recovery first: its memory figures should not include heap from the others.
    timed("recovery", &mut || recovery::recovery(&rt, &cfg), 3);
    timed("million", &mut || million::million(&rt, &cfg), 7);
    timed("sequential", &mut || sequential::sequential(&rt, &cfg), 0);
    timed(
        "throughput",
        &mut || vec![throughput::throughput(&rt, &cfg)],
        1,
    );
    timed("replay", &mut || vec![replay::replay(&rt, &cfg)], 2);
    timed("entity", &mut || entity::entity(&rt, &cfg), 4);
    timed("listing", &mut || listing::listing(&rt, &cfg), 5);
    timed("queue", &mut || queue::queue(&rt, &cfg), 6);
    rows.sort_by_key(|(o, _)| *o);

    let mut table = String::new();
    let _ = writeln!(table, "| scenario | reel | raw fjall | ratio | target |");
    let _ = writeln!(table, "| --- | --- | --- | --- | --- |");
    for (_, r) in &rows {
        let _ = writeln!(
            table,
            "| {} | {} | {} | {} | {} |",
            r.scenario, r.reel, r.raw, r.ratio, r.target
        );
    }
    println!("\n{table}");
    println!("total {:.1} s", all.elapsed().as_secs_f64());
}
