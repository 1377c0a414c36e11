//! reel against the embedded durable-execution crates on crates.io, on the same
//! workload, in the same run, on temporary directories:
//!
//! - memable 0.1.5 (redb backend; one redb commit, fsynced, per step);
//! - duroxide 0.1.32 with its `sqlite` feature (SQLite in WAL mode; its provider sets
//!   `PRAGMA synchronous = WAL`, which SQLite does not recognise and reads as NORMAL:
//!   WAL commits are not fsynced, only checkpoints are), dispatcher poll interval
//!   tuned to 1 ms;
//! - reel (this repository, by path).
//!
//! Workloads: sequential (one run of N no-op steps, per-step time; rounds alternate
//! between reel and memable so both see the same disk) and throughput (R concurrent
//! runs x 10 no-op steps, all started, all results awaited; steps/s).
//!
//! `cargo run --release --manifest-path benches/peers/Cargo.toml`
//!
//! Environment: `PEERS_QUICK=1` (small sizes), `PEERS_ONLY=reel,memable,duroxide`,
//! `PEERS_SEQ_STEPS`, `PEERS_REEL_RUNS`, `PEERS_MEMABLE_RUNS`, `PEERS_DUROXIDE_RUNS`,
//! `PEERS_DUROXIDE_CONCURRENCY` (orchestration and worker slots, default 4),
//! `PEERS_DIR` (parent of the temporary directories).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BenchResult<T> = Result<T, BoxError>;

const STEPS_PER_RUN: u32 = 10;
const SEQ_ROUNDS: usize = 3;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Config {
    quick: bool,
    only: Option<Vec<String>>,
    seq_steps: u32,
    reel_runs: usize,
    memable_runs: usize,
    duroxide_runs: usize,
    duroxide_concurrency: usize,
}

impl Config {
    fn from_env() -> Config {
        let quick = std::env::var("PEERS_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
        let only = std::env::var("PEERS_ONLY").ok().map(|v| {
            v.split(',')
                .map(|s| s.trim().to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect()
        });
        Config {
            quick,
            only,
            seq_steps: env_usize("PEERS_SEQ_STEPS", if quick { 100 } else { 1_000 }) as u32,
            reel_runs: env_usize("PEERS_REEL_RUNS", if quick { 500 } else { 10_000 }),
            memable_runs: env_usize("PEERS_MEMABLE_RUNS", if quick { 100 } else { 10_000 }),
            duroxide_runs: env_usize("PEERS_DUROXIDE_RUNS", if quick { 10 } else { 100 }),
            duroxide_concurrency: env_usize("PEERS_DUROXIDE_CONCURRENCY", 4),
        }
    }

    fn wants(&self, engine: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|e| e == engine))
    }
}

fn temp_dir() -> TempDir {
    match std::env::var_os("PEERS_DIR") {
        Some(base) => tempfile::tempdir_in(PathBuf::from(base)).expect("tempdir in PEERS_DIR"),
        None => tempfile::tempdir().expect("tempdir"),
    }
}

/// Awaits `fut`, or fails naming `what` after `limit`.
async fn within<T, E: std::fmt::Display>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = Result<T, E>>,
) -> BenchResult<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}").into()),
        Err(_) => Err(format!("{what}: no answer after {:.0} s", limit.as_secs_f64()).into()),
    }
}

const LIMIT: Duration = Duration::from_secs(600);

/// Wall time of R concurrent runs x 10 steps.
struct Throughput {
    runs: usize,
    elapsed: Duration,
}

impl Throughput {
    fn steps_per_s(&self) -> f64 {
        (self.runs as f64 * f64::from(STEPS_PER_RUN)) / self.elapsed.as_secs_f64()
    }
}

mod duroxide_engine;
mod memable_engine;
mod reel_engine;

// ---------------------------------------------------------------------------

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[derive(Default)]
struct Figures {
    seq_ms: Option<f64>,
    seq_rounds: Vec<f64>,
    tp: Option<Throughput>,
    error: Option<String>,
}

async fn run(cfg: &Config) -> [(&'static str, &'static str, Figures); 3] {
    let mut reel = Figures::default();
    let mut memable = Figures::default();
    let mut duroxide = Figures::default();
    let n = cfg.seq_steps;

    // Sequential: reel and memable alternate round by round.
    println!("## sequential: one run of {n} no-op steps");
    let mut r = None;
    if cfg.wants("reel") {
        match reel_engine::Reel::open().await {
            Ok(e) => r = Some(e),
            Err(e) => reel.error = Some(e.to_string()),
        }
    }
    let mut m = None;
    if cfg.wants("memable") {
        match memable_engine::Memable::open().await {
            Ok(e) => m = Some(e),
            Err(e) => memable.error = Some(e.to_string()),
        }
    }
    for round in 0..SEQ_ROUNDS {
        if let Some(e) = r.as_mut() {
            match e.sequential(n).await {
                Ok(d) => {
                    println!(
                        "  round {round}: reel    {:.3} ms/step",
                        d.as_secs_f64() * 1e3
                    );
                    reel.seq_rounds.push(d.as_secs_f64() * 1e3);
                }
                Err(e) => reel.error = Some(e.to_string()),
            }
        }
        if let Some(e) = m.as_mut() {
            match e.sequential(n).await {
                Ok(d) => {
                    println!(
                        "  round {round}: memable {:.3} ms/step",
                        d.as_secs_f64() * 1e3
                    );
                    memable.seq_rounds.push(d.as_secs_f64() * 1e3);
                }
                Err(e) => memable.error = Some(e.to_string()),
            }
        }
    }
    let mut d = None;
    if cfg.wants("duroxide") {
        match duroxide_engine::Duroxide::open(cfg.duroxide_concurrency).await {
            Ok(mut e) => {
                match e.sequential(n).await {
                    Ok(t) => {
                        println!("  duroxide {:.3} ms/step", t.as_secs_f64() * 1e3);
                        duroxide.seq_rounds.push(t.as_secs_f64() * 1e3);
                    }
                    Err(e) => duroxide.error = Some(e.to_string()),
                }
                d = Some(e);
            }
            Err(e) => duroxide.error = Some(e.to_string()),
        }
    }
    for f in [&mut reel, &mut memable, &mut duroxide] {
        if !f.seq_rounds.is_empty() {
            f.seq_ms = Some(median(f.seq_rounds.clone()));
        }
    }

    println!("\n## throughput: concurrent runs x {STEPS_PER_RUN} no-op steps");
    if let Some(e) = r.as_mut() {
        match e.throughput(cfg.reel_runs).await {
            Ok(t) => {
                println!(
                    "  reel     {} runs in {:.2} s",
                    t.runs,
                    t.elapsed.as_secs_f64()
                );
                reel.tp = Some(t);
            }
            Err(e) => reel.error = Some(e.to_string()),
        }
    }
    if let Some(e) = m.as_mut() {
        match e.throughput(cfg.memable_runs).await {
            Ok(t) => {
                println!(
                    "  memable  {} runs in {:.2} s",
                    t.runs,
                    t.elapsed.as_secs_f64()
                );
                memable.tp = Some(t);
            }
            Err(e) => memable.error = Some(e.to_string()),
        }
    }
    if let Some(e) = d.as_mut() {
        match e.throughput(cfg.duroxide_runs).await {
            Ok(t) => {
                println!(
                    "  duroxide {} runs in {:.2} s",
                    t.runs,
                    t.elapsed.as_secs_f64()
                );
                duroxide.tp = Some(t);
            }
            Err(e) => duroxide.error = Some(e.to_string()),
        }
    }
    for (name, closed) in [
        (
            "reel",
            match r {
                Some(e) => e.close().await,
                None => Ok(()),
            },
        ),
        (
            "memable",
            match m {
                Some(e) => e.close().await,
                None => Ok(()),
            },
        ),
        (
            "duroxide",
            match d {
                Some(e) => e.close().await,
                None => Ok(()),
            },
        ),
    ] {
        if let Err(e) = closed {
            println!("  {name}: close failed: {e}");
        }
    }
    [
        ("reel", "fjall, group commit (fdatasync per batch)", reel),
        (
            "memable 0.1.5",
            "redb, one fsynced commit per step",
            memable,
        ),
        (
            "duroxide 0.1.32",
            "SQLite WAL, synchronous=NORMAL (no fsync per commit), poll 1 ms",
            duroxide,
        ),
    ]
}

fn main() {
    // duroxide installs a global tracing subscriber whose filter always lets WARN
    // through unless RUST_LOG says otherwise; under load it warns on every SQLite
    // "database is locked" retry. Keep the table readable (set RUST_LOG to see them).
    if std::env::var_os("RUST_LOG").is_none() {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var("RUST_LOG", "error") };
    }
    let cfg = Config::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!(
        "peers bench ({} mode; {} CPUs; temp dirs under {})\n",
        if cfg.quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::env::var("PEERS_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
    );
    let total = Instant::now();
    let rows = rt.block_on(run(&cfg));

    println!(
        "\n| engine | storage / durability | sequential, ms/step | throughput runs x steps | steps/s |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for (name, storage, f) in &rows {
        let seq = f
            .seq_ms
            .map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"));
        let (shape, rate) = match &f.tp {
            Some(t) => (
                format!(
                    "{} x {STEPS_PER_RUN} ({:.2} s)",
                    t.runs,
                    t.elapsed.as_secs_f64()
                ),
                format!("{:.0}", t.steps_per_s()),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        println!("| {name} | {storage} | {seq} | {shape} | {rate} |");
        if let Some(e) = &f.error {
            println!("|   {name} error | {e} | | | |");
        }
    }
    let [(_, _, reel), (_, _, memable), _] = &rows;
    if let (Some(r), Some(m)) = (reel.seq_ms, memable.seq_ms) {
        println!(
            "\nsequential reel / memable: {:.2}x (target <= 1.0x: {})",
            r / m,
            if r <= m { "met" } else { "MISSED" }
        );
    }
    if let (Some(r), Some(m)) = (&reel.tp, &memable.tp) {
        let x = r.steps_per_s() / m.steps_per_s();
        println!(
            "throughput reel / memable: {x:.1}x (target >= 20x: {})",
            if x >= 20.0 { "met" } else { "MISSED" }
        );
    }
    println!("total {:.1} s", total.elapsed().as_secs_f64());
}
