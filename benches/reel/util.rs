//! What the scenarios share: workflows, raw fjall helpers, process statistics,
//! waiting helpers and the table row.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fjall::{Database, KeyspaceCreateOptions};
use futures::StreamExt;
use reel::{Ctx, Host, RunStatus, Workflow};
use tempfile::TempDir;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type BenchResult<T> = Result<T, BoxError>;

/// How long any single await may take before the bench calls it a hang.
pub(crate) const LIMIT: Duration = Duration::from_secs(60);

pub(crate) fn temp_dir() -> TempDir {
    match std::env::var_os("REEL_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(PathBuf::from(base)).expect("tempdir in REEL_BENCH_DIR"),
        None => tempfile::tempdir().expect("tempdir"),
    }
}

// ---------------------------------------------------------------------------
// workflows

/// `n` no-op steps in a loop (ids `noop`, `noop#1`, ...), returns `n`.
pub(crate) struct Steps;
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
pub(crate) struct StepsThenWait;
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
pub(crate) struct Waiter;
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
pub(crate) fn raw_value(seq: u64) -> Vec<u8> {
    (0..100u64)
        .map(|i| (seq.wrapping_mul(31).wrapping_add(i) & 0xff) as u8)
        .collect()
}

pub(crate) fn raw_key(run: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(run.len() + 9);
    k.extend_from_slice(run.as_bytes());
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

pub(crate) fn raw_open(path: &Path) -> BenchResult<(Database, fjall::Keyspace)> {
    let db = Database::builder(path).open()?;
    let log = db.keyspace("log", KeyspaceCreateOptions::default)?;
    Ok((db, log))
}

/// (VmRSS, VmHWM) of this process in MiB, from /proc/self/status.
pub(crate) fn memory_mib() -> (f64, f64) {
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

/// Heap statistics of mimalloc, the bench's global allocator: what it has
/// committed, against what RSS shows.
pub(crate) mod heap {
    unsafe extern "C" {
        fn mi_collect(force: bool);
        #[allow(clippy::too_many_arguments)]
        fn mi_process_info(
            elapsed_msecs: *mut usize,
            user_msecs: *mut usize,
            system_msecs: *mut usize,
            current_rss: *mut usize,
            peak_rss: *mut usize,
            current_commit: *mut usize,
            peak_commit: *mut usize,
            page_faults: *mut usize,
        );
    }

    /// Memory mimalloc has committed now (what the heap holds, free pages it keeps
    /// included), in MiB.
    pub(crate) fn in_use_mib() -> f64 {
        let mut v = [0usize; 8];
        let [a, b, c, d, e, f, g, h] = &mut v;
        // SAFETY: mi_process_info writes one usize through each non-null pointer.
        unsafe { mi_process_info(a, b, c, d, e, f, g, h) };
        v[5] as f64 / (1024.0 * 1024.0)
    }

    /// Returns free heap memory to the OS.
    pub(crate) fn trim() {
        // SAFETY: mi_collect only frees memory the heap no longer uses.
        unsafe { mi_collect(true) };
    }
}

/// CPU seconds (user + system) this process has used so far, from /proc/self/stat.
pub(crate) fn cpu_seconds() -> f64 {
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

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Awaits `fut`, or fails naming `what` once `limit` passes (a hang is a finding,
/// not a reason to stall the whole bench).
pub(crate) async fn within<T, E: std::fmt::Display>(
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
pub(crate) async fn status_breakdown(host: &Host) -> BenchResult<String> {
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
pub(crate) async fn wait_suspended<W: Workflow>(
    h: &reel::RunHandle<W>,
    steps: u32,
) -> BenchResult<()> {
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
pub(crate) async fn wait_passivated(host: &Host, timeout: Duration) -> usize {
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
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) reel: String,
    pub(crate) raw: String,
    pub(crate) ratio: String,
    pub(crate) target: String,
}

impl Row {
    pub(crate) fn failed(scenario: &str, target: &str, e: &BoxError) -> Row {
        Row {
            scenario: scenario.into(),
            reel: format!("FAILED: {e}"),
            raw: String::new(),
            ratio: String::new(),
            target: target.into(),
        }
    }
}

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// A memory snapshot: resident set, its peak, and the heap mimalloc has committed.
#[derive(Clone, Copy)]
pub(crate) struct Mem {
    pub(crate) rss: f64,
    pub(crate) hwm: f64,
    pub(crate) heap: f64,
}

pub(crate) fn mem() -> Mem {
    let (rss, hwm) = memory_mib();
    Mem {
        rss,
        hwm,
        heap: heap::in_use_mib(),
    }
}

/// A host on `path` with [`Waiter`] and [`Steps`] registered that passivates runs
/// idle for 100 ms, as the starts scenarios use.
pub(crate) async fn waiting_host(path: &Path) -> BenchResult<Host> {
    Ok(Host::builder()
        .path(path)
        .register(Waiter)
        .register(Steps)
        .passivate_after(Duration::from_millis(100))
        .build()
        .await?)
}

/// Starts `n` [`Waiter`] runs named by `id`, `in_flight` at a time, printing
/// progress every 10 s; fails with the first start that fails.
pub(crate) async fn start_waiters(
    host: &Arc<Host>,
    n: usize,
    in_flight: usize,
    id: impl Fn(usize) -> String,
) -> BenchResult<()> {
    let start = Instant::now();
    let mut progress = Instant::now();
    let mut done = 0usize;
    let mut starts = futures::stream::iter(0..n)
        .map(|i| {
            let host = host.clone();
            let id = id(i);
            async move {
                within(LIMIT, &format!("start {id}"), host.start::<Waiter>(&id, ())).await
            }
        })
        .buffer_unordered(in_flight);
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
    Ok(())
}
