//! End-to-end benchmark of reel's performance targets (DESIGN.md, "Performance
//! targets"), each scenario measured side by side with a raw fjall baseline in the
//! same run, on temporary directories:
//!
//! 1. sequential: one run of 1,000 no-op steps; per-step time against one raw
//!    `keyspace.insert` + `db.persist(SyncData)` (target: ratio <= 1.3x).
//! 2. throughput: 10,000 concurrent runs x 10 steps, started at once, all results
//!    awaited; durable events/s against raw fjall batches of 2,048 ~100-byte inserts
//!    with one `SyncData` per batch (target: >= 0.5x raw).
//! 3. replay: a passivated run whose log holds ~10,000 events (5,000 steps, then a
//!    signal wait); time from `signal()` to `result()` (reload + replay), against a
//!    raw prefix scan of 10,000 records (target: < 20 ms).
//! 4. recovery: 100,000 runs waiting on a signal, passivated; resident memory
//!    (target: < 200 MB), then shut down and time reopening the host + one new run
//!    completing its first step (target: < 2 s), against a raw fjall reopen + scan of
//!    100,000 metadata records.
//!
//! A plain `main` printing a table: `cargo bench --bench reel`.
//! - `REEL_BENCH_QUICK=1` scales everything down for a smoke run of a few seconds.
//! - `REEL_BENCH_ONLY=sequential,throughput,replay,recovery` picks scenarios.
//! - `REEL_BENCH_START_CONCURRENCY` (default 1,024): starts in flight at once in
//!   the recovery scenario.
//! - `REEL_BENCH_DIR` picks the filesystem of the temporary directories (default:
//!   the system temp dir); the figures are dominated by fsync.
//!
//! The recovery scenario runs first so that its memory figures are not blurred by
//! heap left over from the other scenarios. Figures are printed, not asserted; a
//! scenario that fails prints its error in the table and the others still run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use futures::StreamExt;
use reel::{Ctx, Host, RunStatus, Workflow};
use tempfile::TempDir;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BenchResult<T> = Result<T, BoxError>;

// ---------------------------------------------------------------------------
// configuration

struct Config {
    quick: bool,
    only: Option<Vec<String>>,
    seq_steps: u32,
    tp_runs: usize,
    tp_steps: u32,
    raw_batch: usize,
    replay_steps: u32,
    replay_runs: usize,
    recovery_runs: usize,
    recovery_start_concurrency: usize,
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
            tp_runs: if quick { 500 } else { 10_000 },
            tp_steps: 10,
            raw_batch: 2_048,
            replay_steps: if quick { 500 } else { 5_000 },
            replay_runs: 3,
            recovery_runs: if quick { 2_000 } else { 100_000 },
            recovery_start_concurrency: std::env::var("REEL_BENCH_START_CONCURRENCY")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1_024),
        }
    }

    fn wants(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|s| s == scenario))
    }
}

/// How long any single await may take before the bench calls it a hang.
const LIMIT: Duration = Duration::from_secs(60);

fn temp_dir() -> TempDir {
    match std::env::var_os("REEL_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(PathBuf::from(base)).expect("tempdir in REEL_BENCH_DIR"),
        None => tempfile::tempdir().expect("tempdir"),
    }
}

// ---------------------------------------------------------------------------
// workflows

/// `n` no-op steps in a loop (ids `noop`, `noop#1`, ...), returns `n`.
struct Steps;
impl Workflow for Steps {
    const NAME: &'static str = "bench-steps";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        for _ in 0..n {
            ctx.step("noop", |_| async { Ok::<_, String>(()) }).await?;
        }
        Ok(n)
    }
}

/// `n` no-op steps, then waits for the signal `go` and returns its payload + `n`.
struct StepsThenWait;
impl Workflow for StepsThenWait {
    const NAME: &'static str = "bench-steps-then-wait";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        for _ in 0..n {
            ctx.step("noop", |_| async { Ok::<_, String>(()) }).await?;
        }
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(go + n)
    }
}

/// Waits for the signal `go` and returns its payload.
struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "bench-waiter";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal::<u32>("go").await
    }
}

// ---------------------------------------------------------------------------
// helpers

/// A ~100-byte value, the size of a small encoded event.
fn raw_value(seq: u64) -> Vec<u8> {
    (0..100u64)
        .map(|i| (seq.wrapping_mul(31).wrapping_add(i) & 0xff) as u8)
        .collect()
}

fn raw_key(run: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(run.len() + 9);
    k.extend_from_slice(run.as_bytes());
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn raw_open(path: &Path) -> BenchResult<(Database, fjall::Keyspace)> {
    let db = Database::builder(path).open()?;
    let log = db.keyspace("log", KeyspaceCreateOptions::default)?;
    Ok((db, log))
}

/// (VmRSS, VmHWM) of this process in MiB, from /proc/self/status.
fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// glibc heap statistics: what the process really holds, against what RSS shows
/// (freed memory glibc keeps in its arenas still counts as resident).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod heap {
    #[repr(C)]
    struct MallInfo2 {
        arena: usize,
        ordblks: usize,
        smblks: usize,
        hblks: usize,
        hblkhd: usize,
        usmblks: usize,
        fsmblks: usize,
        uordblks: usize,
        fordblks: usize,
        keepcost: usize,
    }

    unsafe extern "C" {
        fn mallinfo2() -> MallInfo2;
        fn malloc_trim(pad: usize) -> i32;
    }

    /// Bytes allocated and not freed (all arenas, plus mmapped chunks), in MiB.
    pub(crate) fn in_use_mib() -> f64 {
        // SAFETY: glibc's mallinfo2 takes no arguments and returns a plain struct.
        let m = unsafe { mallinfo2() };
        (m.uordblks + m.hblkhd) as f64 / (1024.0 * 1024.0)
    }

    /// Returns free heap memory to the OS.
    pub(crate) fn trim() {
        // SAFETY: malloc_trim only releases free memory; any pad is valid.
        unsafe { malloc_trim(0) };
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod heap {
    pub(crate) fn in_use_mib() -> f64 {
        f64::NAN
    }
    pub(crate) fn trim() {}
}

/// CPU seconds (user + system) this process has used so far, from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the file, 12 and 13 after ')'.
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Awaits `fut`, or fails naming `what` once `limit` passes (a hang is a finding,
/// not a reason to stall the whole bench).
async fn within<T, E: std::fmt::Display>(
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> BenchResult<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}").into()),
        Err(_) => Err(format!(
            "{what}: no answer after {:.0} s (hang)",
            limit.as_secs_f64()
        )
        .into()),
    }
}

/// Counts runs by status kind, e.g. "Suspended: 1808, Running: 192".
async fn status_breakdown(host: &Host) -> BenchResult<String> {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for info in host.runs().await? {
        let kind = format!("{:?}", info.status);
        let kind = kind.split([' ', '{', '(']).next().unwrap_or("").to_owned();
        *counts.entry(kind).or_default() += 1;
    }
    Ok(counts
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", "))
}

/// Waits until `status()` says Suspended, by polling (the brief's method). Meanwhile
/// `wait_until_suspended()`, called while the run still runs, must agree: it gets
/// 5 s more once the poll succeeded, else the bench reports a bug and goes on.
async fn wait_suspended<W: Workflow>(h: &reel::RunHandle<W>, steps: u32) -> BenchResult<()> {
    let deadline = Instant::now() + LIMIT;
    let mut waiter = Box::pin(h.wait_until_suspended());
    let mut waiter_done = false;
    loop {
        tokio::select! {
            r = &mut waiter, if !waiter_done => {
                waiter_done = true;
                if let Err(e) = r {
                    println!("  !! {}: wait_until_suspended() failed: {e}", h.id());
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        match h.status().await? {
            RunStatus::Suspended { .. } => break,
            RunStatus::Running if Instant::now() < deadline => {}
            other => {
                let events = h.events().await.map(|e| e.len());
                return Err(format!(
                    "{}: status {other:?} ({events:?} events, {steps} steps)",
                    h.id()
                )
                .into());
            }
        }
    }
    if !waiter_done
        && let Err(e) = within(
            Duration::from_secs(5),
            &format!(
                "{} wait_until_suspended() (called while running) after status() became Suspended",
                h.id()
            ),
            waiter,
        )
        .await
    {
        println!("  !! BUG: {e}");
    }
    Ok(())
}

/// Polls `host.live_runs()` until it reaches 0, `timeout` passes, or the count has
/// not moved for 15 s (stalled); returns the last count.
async fn wait_passivated(host: &Host, timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    let mut last = (usize::MAX, Instant::now());
    loop {
        let live = host.live_runs().await;
        if live != last.0 {
            last = (live, Instant::now());
        }
        if live == 0 || Instant::now() >= deadline || last.1.elapsed() > Duration::from_secs(15) {
            return live;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One line of the final table.
struct Row {
    scenario: String,
    reel: String,
    raw: String,
    ratio: String,
    target: String,
}

impl Row {
    fn failed(scenario: &str, target: &str, e: &BoxError) -> Row {
        Row {
            scenario: scenario.into(),
            reel: format!("FAILED: {e}"),
            raw: String::new(),
            ratio: String::new(),
            target: target.into(),
        }
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

// ---------------------------------------------------------------------------
// 1. sequential

/// Rounds of the sequential scenario; reel and raw alternate so that both see the
/// same phases of the (noisy) disk, and the medians are compared.
const SEQ_ROUNDS: usize = 3;

struct RawSequential {
    _dir: TempDir,
    db: Database,
    log: fjall::Keyspace,
    next: u64,
}

impl RawSequential {
    fn open() -> BenchResult<RawSequential> {
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
    fn round(&mut self, n: u32) -> BenchResult<Duration> {
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

fn sequential(rt: &tokio::runtime::Runtime, cfg: &Config) -> Row {
    let n = cfg.seq_steps;
    println!(
        "\n## sequential: one run of {n} no-op steps ({SEQ_ROUNDS} rounds, alternating with raw fjall)"
    );
    let target = "<= 1.3x";
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
        verdict(ratio <= 1.3)
    );
    Row {
        scenario,
        reel: format!("{:.3} ms", reel / 1e3),
        raw: format!("{:.3} ms", raw / 1e3),
        ratio: format!("{ratio:.2}x"),
        target: format!("{target} ({})", verdict(ratio <= 1.3)),
    }
}

// ---------------------------------------------------------------------------
// 2. throughput

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

fn throughput(rt: &tokio::runtime::Runtime, cfg: &Config) -> Row {
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

// ---------------------------------------------------------------------------
// 3. replay

struct Replay {
    events: usize,
    wake_ms: Vec<f64>,
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
    within(LIMIT, "host.shutdown()", host.shutdown()).await?;
    Ok(Replay { events, wake_ms })
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

fn replay(rt: &tokio::runtime::Runtime, cfg: &Config) -> Row {
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
        reel: format!("{wake:.1} ms"),
        raw: format!("{raw_median:.2} ms (scan)"),
        ratio: format!("{:.1}x", wake / raw_median),
        target: format!("{target} ({})", verdict(wake < 20.0)),
    }
}

// ---------------------------------------------------------------------------
// 4. recovery

/// A memory snapshot: resident set, its peak, and the glibc heap really in use.
#[derive(Clone, Copy)]
struct Mem {
    rss: f64,
    hwm: f64,
    heap: f64,
}

fn mem() -> Mem {
    let (rss, hwm) = memory_mib();
    Mem {
        rss,
        hwm,
        heap: heap::in_use_mib(),
    }
}

struct Recovery {
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
    let host = Arc::new(
        Host::builder()
            .path(dir.path())
            .register(Waiter)
            .register(Steps)
            .passivate_after(Duration::from_millis(100))
            .build()
            .await?,
    );
    let start = Instant::now();
    let mut progress = Instant::now();
    let mut done = 0usize;
    let mut starts = futures::stream::iter(0..n)
        .map(|i| {
            let host = host.clone();
            async move {
                let id = format!("waiter-{i:06}");
                within(LIMIT, &format!("start {id}"), host.start::<Waiter>(&id, ())).await
            }
        })
        .buffer_unordered(cfg.recovery_start_concurrency);
    while let Some(r) = starts.next().await {
        r?;
        done += 1;
        if progress.elapsed() > Duration::from_secs(10) {
            let (rss, _) = memory_mib();
            println!(
                "  .. {done} runs started after {:.0} s (live {}, rss {rss:.0} MiB)",
                start.elapsed().as_secs_f64(),
                host.live_runs().await
            );
            progress = Instant::now();
        }
    }
    drop(starts);
    let started = start.elapsed();
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
    let host = Host::builder()
        .path(dir.path())
        .register(Waiter)
        .register(Steps)
        .passivate_after(Duration::from_millis(100))
        .build()
        .await?;
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

/// Raw fjall: write `n` ~100-byte metadata records plus two ~100-byte log records
/// per run, close, then time reopening the database plus a full scan of the
/// metadata keyspace (the least a recovery must do).
fn raw_recovery(n: usize) -> BenchResult<Duration> {
    let dir = temp_dir();
    {
        let (db, log) = raw_open(dir.path())?;
        let meta = db.keyspace("meta", KeyspaceCreateOptions::default)?;
        for chunk in (0..n).collect::<Vec<_>>().chunks(2_048) {
            let mut b = db.batch().durability(Some(PersistMode::SyncData));
            for &i in chunk {
                let run = format!("waiter-{i:06}");
                b.insert(&meta, run.as_bytes(), raw_value(i as u64));
                b.insert(&log, raw_key(&run, 0), raw_value(0));
                b.insert(&log, raw_key(&run, 1), raw_value(1));
            }
            b.commit()?;
        }
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
    Ok(elapsed)
}

fn recovery(rt: &tokio::runtime::Runtime, cfg: &Config) -> Vec<Row> {
    let n = cfg.recovery_runs;
    println!("\n## recovery: {n} runs waiting on a signal");
    let reopen_scenario = format!("recovery, reopen with {n} waiting runs + first step");
    let mem_scenario = format!("memory, {n} passivated waiting runs (RSS)");
    let reel = match rt.block_on(reel_recovery(cfg)) {
        Ok(r) => r,
        Err(e) => {
            println!("  reel FAILED: {e}");
            return vec![
                Row::failed(&reopen_scenario, "< 2 s", &e),
                Row::failed(&mem_scenario, "< 200 MB", &e),
            ];
        }
    };
    let raw = raw_recovery(n);
    println!("  {} of {n} runs Suspended; memory (MiB):", reel.suspended);
    println!(
        "    {:<44} {:>8} {:>8} {:>13}",
        "", "VmRSS", "VmHWM", "heap in use"
    );
    for (label, m) in [
        ("before creating the runs".to_owned(), reel.before),
        (format!("{n} runs created and passivated"), reel.passivated),
        ("  the same after malloc_trim(0)".to_owned(), reel.trimmed),
        (
            "after host.shutdown() + malloc_trim(0)".to_owned(),
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
        Ok(d) => {
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
    let mem_ok = reel.passivated.rss < 200.0;
    vec![
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
        Row {
            scenario: mem_scenario,
            reel: format!(
                "{:.0} MiB (+{:.0} over {:.0} before; heap in use {:.0} MiB)",
                reel.passivated.rss,
                reel.passivated.rss - reel.before.rss,
                reel.before.rss,
                reel.passivated.heap
            ),
            raw: "n/a".into(),
            ratio: String::new(),
            target: format!("< 200 MB ({})", verdict(mem_ok)),
        },
    ]
}

// ---------------------------------------------------------------------------

fn main() {
    let cfg = Config::from_env();
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
    timed("recovery", &mut || recovery(&rt, &cfg), 3);
    timed("sequential", &mut || vec![sequential(&rt, &cfg)], 0);
    timed("throughput", &mut || vec![throughput(&rt, &cfg)], 1);
    timed("replay", &mut || vec![replay(&rt, &cfg)], 2);
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
