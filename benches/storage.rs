//! Storage benchmark: reel's group-committed `FjallStore` against raw fjall, measured
//! side by side in the same run on temporary directories.
//!
//! 1. Latency of one durable append (submit + await the ticket, one ~100-byte event,
//!    sequential) against a raw `keyspace.insert` + `db.persist(SyncData)`.
//! 2. Throughput of 1, 2, 4, 16, 100 and 10,000 concurrent appenders (tokio tasks, each doing
//!    sequential durable appends to its own run) against raw fjall batches of as
//!    many inserts as there are appenders, each committed with `SyncData`.
//!
//! A plain `main` printing a table (no statistics machinery): `cargo bench -p reel
//! --bench storage`. `REEL_BENCH_QUICK=1` scales everything down for a smoke run;
//! `REEL_BENCH_DIR` picks the filesystem of the temporary directories (default: the
//! system temp dir), which matters because the figures are dominated by fsync.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use reel_storage::{Append, Event, FjallStore, LogReader, LogWriter, Payload, Store};
use tempfile::TempDir;

struct Config {
    quick: bool,
    latency_iters: usize,
    /// Events per throughput measurement; each appender does `total / appenders` (at
    /// least one).
    total_events: usize,
    concurrency: [usize; 6],
}

impl Config {
    fn from_env() -> Config {
        let quick = std::env::var("REEL_BENCH_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
        Config {
            quick,
            latency_iters: if quick { 200 } else { 2_000 },
            total_events: if quick { 10_000 } else { 50_000 },
            concurrency: [1, 2, 4, 16, 100, 10_000],
        }
    }
}

fn temp_dir() -> TempDir {
    match std::env::var_os("REEL_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(PathBuf::from(base)).expect("tempdir in REEL_BENCH_DIR"),
        None => tempfile::tempdir().expect("tempdir"),
    }
}

/// The benchmark's event: a step result of about 100 bytes encoded.
fn event(seq: u64) -> Event {
    Event::StepCompleted {
        id: format!("charge#{}", seq % 1000),
        // A MessagePack bin8 of 72 bytes.
        output: Payload(
            [0xc4, 72]
                .into_iter()
                .chain((0..72u8).map(|i| i.wrapping_mul(31)))
                .collect(),
        ),
    }
}

fn log_key(run: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(run.len() + 9);
    k.extend_from_slice(run.as_bytes());
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

struct Latency {
    mean: f64,
    p50: f64,
    p99: f64,
}

fn latency_of(mut samples: Vec<Duration>) -> Latency {
    samples.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let n = samples.len();
    let pct = |p: usize| us(samples[(n * p / 100).min(n - 1)]);
    Latency {
        mean: samples.iter().copied().map(us).sum::<f64>() / n as f64,
        p50: pct(50),
        p99: pct(99),
    }
}

fn reel_latency(rt: &tokio::runtime::Runtime, iters: usize) -> Latency {
    let dir = temp_dir();
    let store = FjallStore::open(dir.path()).expect("open store");
    let run = "latency";
    let warmup = iters / 10;
    let samples = rt.block_on(async {
        let mut samples = Vec::with_capacity(iters);
        for seq in 0..(warmup + iters) as u64 {
            let start = Instant::now();
            store
                .submit(Append {
                    run_id: run.into(),
                    expected_seq: Some(seq),
                    events: vec![event(seq)],
                    durable: true,
                    ..Append::default()
                })
                .await
                .expect("durable append");
            if seq as usize >= warmup {
                samples.push(start.elapsed());
            }
        }
        samples
    });
    assert_eq!(
        store.read_log(run).expect("read back").len(),
        warmup + iters,
        "every append landed"
    );
    store.close();
    latency_of(samples)
}

fn raw_latency(iters: usize) -> Latency {
    let dir = temp_dir();
    let db = Database::builder(dir.path()).open().expect("raw open");
    let log = db
        .keyspace("log", KeyspaceCreateOptions::default)
        .expect("keyspace");
    let run = "latency";
    let warmup = iters / 10;
    let mut samples = Vec::with_capacity(iters);
    for seq in 0..(warmup + iters) as u64 {
        let value = event(seq).encode().expect("encode");
        let start = Instant::now();
        log.insert(log_key(run, seq), value).expect("insert");
        db.persist(PersistMode::SyncData).expect("persist");
        if seq as usize >= warmup {
            samples.push(start.elapsed());
        }
    }
    latency_of(samples)
}

/// Events per second of `appenders` tasks doing `per_task` sequential durable appends
/// each to their own run.
fn reel_throughput(rt: &tokio::runtime::Runtime, appenders: usize, per_task: usize) -> f64 {
    let dir = temp_dir();
    let store = FjallStore::open(dir.path()).expect("open store");
    let elapsed = rt.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..appenders)
            .map(|task| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let run = format!("run-{task:05}");
                    for seq in 0..per_task as u64 {
                        store
                            .submit(Append {
                                run_id: run.clone(),
                                expected_seq: Some(seq),
                                events: vec![event(seq)],
                                durable: true,
                                ..Append::default()
                            })
                            .await
                            .expect("durable append");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("appender task");
        }
        start.elapsed()
    });
    // Spot-check that the work was really done.
    for task in [0, appenders / 2, appenders - 1] {
        let run = format!("run-{task:05}");
        assert_eq!(store.read_log(&run).expect("read back").len(), per_task);
    }
    store.close();
    (appenders * per_task) as f64 / elapsed.as_secs_f64()
}

/// Events per second of raw fjall committing `batches` batches of `batch_size`
/// inserts, each batch with one `SyncData`.
fn raw_throughput(batch_size: usize, batches: usize) -> f64 {
    let dir = temp_dir();
    let db = Database::builder(dir.path()).open().expect("raw open");
    let log = db
        .keyspace("log", KeyspaceCreateOptions::default)
        .expect("keyspace");
    let runs: Vec<String> = (0..batch_size).map(|i| format!("run-{i:05}")).collect();
    let start = Instant::now();
    for seq in 0..batches as u64 {
        let mut batch = db.batch().durability(Some(PersistMode::SyncData));
        for run in &runs {
            // Encoding is part of the work reel does per event too.
            batch.insert(
                &log,
                log_key(run, seq),
                event(seq).encode().expect("encode"),
            );
        }
        batch.commit().expect("commit");
    }
    (batch_size * batches) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let cfg = Config::from_env();
    let rt = runtime();
    let record_len = event(0).encode().expect("encode").len();
    println!(
        "reel storage bench ({} mode; temp dirs under {}; one event = {record_len} bytes encoded)",
        if cfg.quick { "quick" } else { "full" },
        std::env::var("REEL_BENCH_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
    );

    println!();
    println!(
        "(1) latency of one durable append, sequential, {} iterations (after {} warm-up)",
        cfg.latency_iters,
        cfg.latency_iters / 10
    );
    let reel = reel_latency(&rt, cfg.latency_iters);
    let raw = raw_latency(cfg.latency_iters);
    println!(
        "    {:<42} {:>10} {:>10} {:>10}",
        "", "mean µs", "p50 µs", "p99 µs"
    );
    println!(
        "    {:<42} {:>10.1} {:>10.1} {:>10.1}",
        "reel FjallStore submit + await ticket", reel.mean, reel.p50, reel.p99
    );
    println!(
        "    {:<42} {:>10.1} {:>10.1} {:>10.1}",
        "raw fjall insert + persist(SyncData)", raw.mean, raw.p50, raw.p99
    );
    println!(
        "    {:<42} {:>9.2}x {:>9.2}x {:>9.2}x",
        "ratio reel / raw",
        reel.mean / raw.mean,
        reel.p50 / raw.p50,
        reel.p99 / raw.p99
    );

    println!();
    println!(
        "(2) throughput of durable appends, {} events per row (appenders x events each)",
        cfg.total_events
    );
    println!(
        "    {:>9} {:>12} {:>14} {:>16} {:>10}",
        "appenders", "x events", "reel ev/s", "raw batch ev/s", "reel/raw"
    );
    let mut reel_rates = Vec::new();
    let mut raw_rates = Vec::new();
    for &appenders in &cfg.concurrency {
        let per_task = (cfg.total_events / appenders).max(1);
        let reel = reel_throughput(&rt, appenders, per_task);
        let raw = raw_throughput(appenders, per_task);
        println!(
            "    {:>9} {:>12} {:>14.0} {:>16.0} {:>9.2}x",
            appenders,
            per_task,
            reel,
            raw,
            reel / raw
        );
        reel_rates.push(reel);
        raw_rates.push(raw);
    }
    let (first, last) = (0, cfg.concurrency.len() - 1);
    println!(
        "    scaling {} vs {} appenders: reel {:.1}x, raw (batch {} vs {}) {:.1}x",
        cfg.concurrency[last],
        cfg.concurrency[first],
        reel_rates[last] / reel_rates[first],
        cfg.concurrency[last],
        cfg.concurrency[first],
        raw_rates[last] / raw_rates[first],
    );
}
