//! Crash torture: invariants 1, 2 and 7 (and replay under concurrency) with a real
//! process killed by SIGKILL at many random points. The harness, for any backend:
//! `tests/crash_torture.rs` runs it on a fjall directory, `reel-postgres`'s
//! `crash_torture_on_postgres` on a PostgreSQL database ([`Backend`]). Layout: this
//! file (the backend, shared helpers, the parent's rounds), `workflows.rs`,
//! `child.rs` (the child process) and `check.rs` (the parent's checks).
//!
//! The test binary re-invokes itself as a child process (`REEL_TORTURE_CHILD=<dir>`).
//! The child opens a host on a fjall directory and keeps a window of `mix` runs in
//! flight, starting new ones (ids `mix-0`, `mix-1`, ...) as earlier ones finish. A
//! `mix` run uses every primitive: recorded values (`now`, `uuid`, `random_u64`),
//! steps, a step that fails its first attempts (tiny durable backoffs), sleeps, a timed
//! signal wait, an untimed signal wait, an approval, a child run (`kid`), `try_join!`
//! and `try_join_all` over branches that each make several calls, `FuturesUnordered`
//! (its completion order goes into the output), a `tokio::select!` of a signal
//! against a timer, a `futures::future::select` of a running step against a timer,
//! and a loop of steps (`loop`, `loop#2`, ...). The child also sends the signals from
//! outside, at random moments, with fixed signal ids, so that a re-send after a
//! restart is deduplicated (an approval, which has no signal id, is sent only if the
//! log holds none yet).
//!
//! Every step body appends `run-id step-id attempt token` to a side file (`O_APPEND`,
//! fsynced) before returning the fresh token as its output (a failing attempt writes a
//! `fail-` token); a record torn by a kill in mid-write is recognised and skipped.
//! The parent starts a child, lets it run a random 5–200 ms ([`Backend::kill_ms`];
//! from its spawn, or, every other round, from its host's open), SIGKILLs it, and
//! repeats (`REEL_TORTURE_KILLS`, default 50); then a last child runs without
//! kills and drives every started run to its end (bounded). Then the parent opens the
//! store itself and checks:
//! 1. every run completed (none parked, failed or hung);
//! 2. the token a `StepCompleted` records is the *last* side-file line of that step: a
//!    body whose result was recorded never ran again; likewise no attempt whose
//!    failure was recorded ran again. And the side file follows the handler's order:
//!    no body ran after a body that the handler reaches only once the first one has
//!    returned (a result the handler saw was durable, and a step that lost its race
//!    against a timer never ran once the run had moved on). Bodies that ran more than
//!    once *before* their result was recorded (at-least-once) are counted, not refused;
//! 3. `reel::testing::replay` of every final log completes with exactly the run's
//!    result (the recorded values, outputs and interleavings are consistent: nothing
//!    diverged after all the crashes), and the results the children saw live match;
//! 4. no step id has two `StepCompleted`, no signal id was delivered twice, nothing
//!    follows the terminal event.
//!
//! The kill delay counts from the spawn, so a kill also lands while the host opens
//! (fjall replays its journal, which grows with the store: the summary line says how
//! many kills hit a host that was not open yet); every other kill counts from the
//! open. At least 40 % of the kills must land mid-work (in a round that ran step
//! bodies), or the test fails: a window that misses the work tortures nothing.
//!
//! `REEL_TORTURE_KILLS=1000 cargo test --release --test crash_torture -- --nocapture`
//! runs the long version; `REEL_TORTURE_KILL_MS=150-400` moves the kill window (past
//! a slow open, say); `REEL_TORTURE_SEED` replays a seed's kill and signal delays
//! (what they meet still depends on timing).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::{Either, select, try_join_all};
use futures::stream::{FuturesUnordered, TryStreamExt};
use reel::testing::{self, Replayed};
use reel::{Ctx, Event, Host, RetryPolicy, RunStatus, StepCtx, Uuid, Workflow};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

mod check;
mod child;
mod workflows;

use check::*;
use child::*;
use workflows::*;

/// Where the runs are stored, and the test that runs the torture.
pub struct Backend {
    /// The test the child processes run (`--exact`): the caller of [`run`].
    pub test: &'static str,
    /// Called once by the parent with the working directory, before any child.
    pub prepare: Option<fn(&Path)>,
    /// Opens the store of the working directory; `None`: a fjall store in
    /// `<dir>/store`. [`in_child`] tells whether a child process asks (the parent
    /// opens the store too, for its checks, once every child is gone).
    pub store: Option<fn(PathBuf) -> StoreFuture>,
    /// The kill delays (ms from the spawn of the child, or from its host's open)
    /// unless `REEL_TORTURE_KILL_MS` says otherwise ([`KILL_MS`] for a local
    /// store).
    pub kill_ms: (u64, u64),
}

/// Whether this process is one of the torture's children.
#[allow(dead_code)] // for `Backend::store`: the fjall backend needs no such test
pub fn in_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// What [`Backend::store`] returns.
pub type StoreFuture = std::pin::Pin<Box<dyn Future<Output = Arc<dyn reel::Store>> + Send>>;

static BACKEND: std::sync::OnceLock<Backend> = std::sync::OnceLock::new();

fn backend() -> &'static Backend {
    BACKEND.get().expect("torture::run sets the backend")
}
/// Set in a child process: the directory it works in.
const CHILD_ENV: &str = "REEL_TORTURE_CHILD";
/// Set in a child process: its generation (0, 1, ...), part of every token.
const GEN_ENV: &str = "REEL_TORTURE_GEN";
/// Set in the last child: start no new run, drive the started ones to their end.
const FINAL_ENV: &str = "REEL_TORTURE_FINAL";
/// The scenario's seed (kill delays; signal delays in the children).
const SEED_ENV: &str = "REEL_TORTURE_SEED";
/// Set in a child process: when the parent spawned it (µs since the epoch).
const SPAWNED_ENV: &str = "REEL_TORTURE_SPAWNED_US";
/// `mix` runs a child keeps in flight at once.
const WINDOW: usize = 24;
/// Kill delays on a local store (`REEL_TORTURE_KILL_MS=lo-hi` changes them).
pub const KILL_MS: (u64, u64) = (5, 200);
/// The share of kills that must land mid-work (the host open and running step
/// bodies), or the torture tortured little: a kill window that misses the work
/// (a slower open, say) fails the test instead of passing it quietly.
const MID_WORK_SHARE: f64 = 0.4;
/// How long the last child may take to finish every run.
const FINAL_LIMIT: Duration = Duration::from_secs(60);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn mix_id(i: u64) -> String {
    format!("mix-{i}")
}

fn kid_id(mix: &str) -> String {
    format!("{mix}.kid")
}

/// splitmix64: the scenario's randomness, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Ends every complete record of the side files.
const END: &str = " END";

/// Appends one record with one `write` on an `O_APPEND` file and fsyncs it, so records
/// of successive (killed) processes come out in the order they were written.
///
/// A SIGKILL can cut a `write` to a regular file short (Linux stops between pages),
/// so a record starts on a line of its own and ends with [`END`]: a torn record, the
/// last thing its process did, stands apart and is recognised by [`read_records`].
fn append_record(path: &Path, record: &str) -> std::io::Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(format!("\n{record}{END}").as_bytes())?;
    f.sync_data()
}

/// The complete records of a side file, in order, and how many were torn by a kill.
fn read_records(path: &Path) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut records, mut torn) = (Vec::new(), 0);
    for line in text.split('\n').filter(|l| !l.is_empty()) {
        match line.strip_suffix(END) {
            Some(record) => records.push(record.to_owned()),
            None => torn += 1,
        }
    }
    (records, torn)
}

// The parent.

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn spawn_child(dir: &Path, seed: u64, generation: u64, last: bool) -> std::process::Child {
    let stderr = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("children.err"))
        .expect("children.err");
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", backend().test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env(GEN_ENV, generation.to_string())
        .env(SPAWNED_ENV, epoch_us().to_string())
        .env(SEED_ENV, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    if last {
        cmd.env(FINAL_ENV, "1");
    }
    cmd.spawn().expect("spawn the child")
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Waits until child `generation` says its host is open (`READY`), it exits, or a
/// minute has passed.
fn wait_ready(dir: &Path, generation: u64, child: &mut std::process::Child) {
    let ready = format!("READY {generation} ");
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        let err = std::fs::read_to_string(dir.join("children.err")).unwrap_or_default();
        if err.lines().any(|l| l.starts_with(&ready)) {
            return;
        }
        std::thread::sleep(ms(2));
    }
}

/// The torture on `backend`: the parent's rounds of kills and checks, or, in a
/// child process, the child's work.
pub fn run(on: Backend) {
    let _ = BACKEND.set(on);
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let started = Instant::now();
    let kills_wanted = env_u64("REEL_TORTURE_KILLS").unwrap_or(50);
    let seed = env_u64(SEED_ENV).unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7)
    });
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    if let Some(prepare) = backend().prepare {
        prepare(dir);
    }
    let side_path = dir.join("side.log");
    let mut rng = Rng(seed);
    let (kill_min, kill_max) = std::env::var("REEL_TORTURE_KILL_MS")
        .ok()
        .and_then(|v| {
            let (lo, hi) = v.split_once('-')?;
            Some((lo.parse().ok()?, hi.parse().ok()?))
        })
        .filter(|(lo, hi)| lo <= hi)
        .unwrap_or(backend().kill_ms);
    println!(
        "crash_torture: seed {seed} (REEL_TORTURE_SEED), {kills_wanted} kills \
         {kill_min}-{kill_max} ms after the spawn (every other one after the open)"
    );

    // Kill phase.
    let mut kills = 0u64;
    let mut idle_rounds = 0u64;
    let mut generation = 0u64;
    let mut failures = Vec::new();
    while kills < kills_wanted {
        let before = file_len(&side_path);
        let mut child = spawn_child(dir, seed, generation, false);
        // Every other child is killed counting from its host's open rather than
        // from its spawn: however long the open takes, half the kills land
        // mid-work.
        if generation % 2 == 1 {
            wait_ready(dir, generation, &mut child);
        }
        // The scenario's randomness: how long the child runs before the kill.
        std::thread::sleep(ms(rng.range(kill_min, kill_max)));
        let exited = child.try_wait().expect("try_wait");
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        match exited {
            Some(s) if !s.success() => failures.push(format!("child {generation} exited: {s}")),
            Some(_) => failures.push(format!(
                "child {generation} exited by itself before the last round"
            )),
            None => kills += 1,
        }
        generation += 1;
        if !failures.is_empty() {
            break;
        }
        if file_len(&side_path) == before {
            idle_rounds += 1;
        }
    }
    let kill_phase = started.elapsed();
    let bodies_during_kills = read_records(&side_path).0.len();
    let done_during_kills = read_records(&dir.join("done.log")).0.len();

    // The last child: no kill, every started run to its end (bounded).
    if failures.is_empty() {
        let mut last = spawn_child(dir, seed, generation, true);
        let pid = last.id();
        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(last.wait());
        });
        match rx.recv_timeout(FINAL_LIMIT + Duration::from_secs(30)) {
            Ok(Ok(s)) if s.success() => {}
            Ok(Ok(s)) => failures.push(format!("the last child exited with {s}")),
            Ok(Err(e)) => failures.push(format!("waiting for the last child: {e}")),
            Err(_) => {
                // SAFETY: kill(2) on the pid of our own unreaped child process.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                failures.push("the last child hung past its own limit".into());
            }
        }
        waiter.join().expect("waiter");
    }
    let children_err = std::fs::read_to_string(dir.join("children.err")).unwrap_or_default();
    let mut ready_ms: Vec<u64> = children_err
        .lines()
        .filter_map(|l| l.strip_prefix("READY "))
        .filter_map(|l| l.split(' ').nth(1)?.parse().ok())
        .collect();
    ready_ms.sort_unstable();
    let open_median = ready_ms.get(ready_ms.len() / 2).copied().unwrap_or(0);
    let killed_before_open = (generation + 1).saturating_sub(ready_ms.len() as u64);
    for line in children_err.lines() {
        if line.starts_with("TORTURE-ERR") || line.starts_with("  log") || line.contains("panicked")
        {
            failures.push(format!("child stderr: {line}"));
        }
    }
    if !failures.is_empty() {
        panic!(
            "crash torture failed (seed {seed}, dir kept at {}):\n{}",
            tmp.keep().display(),
            failures.join("\n")
        );
    }

    // The checks, in this process, on the store the children left.
    let (side_records, torn) = read_records(&side_path);
    let side = read_side(&side_records);
    let (done_log, torn_done) = read_records(&dir.join("done.log"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut f = Figures {
        bodies_run: side.values().map(Vec::len).sum(),
        ..Figures::default()
    };
    // At-least-once: the executions of one attempt beyond the first.
    for lines in side.values() {
        let mut per_attempt: HashMap<u32, usize> = HashMap::new();
        for x in lines {
            *per_attempt.entry(x.attempt).or_default() += 1;
        }
        f.rerun_before_record += per_attempt.values().map(|n| n - 1).sum::<usize>();
    }
    let mut by_run: HashMap<&str, Vec<(&str, &Vec<Exec>)>> = HashMap::new();
    for ((run, step), execs) in &side {
        by_run.entry(run).or_default().push((step, execs));
    }
    let mut problems = Vec::new();
    let mut slow_won = 0;
    rt.block_on(async {
        // Bodies of this host go to another file: none may run.
        let host = builder(dir, "side-of-checker.log", u64::MAX)
            .await
            .build()
            .await
            .expect("reopen the store");
        let infos = host.runs().await.expect("runs");
        let mut seen_live: HashMap<&str, &str> = HashMap::new();
        for line in &done_log {
            let (run, out) = line.split_once(' ').expect("done.log line");
            if let Some(prev) = seen_live.insert(run, out) {
                if prev != out {
                    problems.push(format!("{run}: two different results seen live"));
                }
            }
        }
        let mixes = infos.iter().filter(|i| i.workflow == Mix::NAME).count();
        for info in &infos {
            f.runs += 1;
            if info.status != RunStatus::Completed {
                if matches!(info.status, RunStatus::Parked { .. }) {
                    f.parked += 1;
                }
                problems.push(format!("{}: {:?}", info.run_id, info.status));
                continue;
            }
            let (events, replayed, result) = if info.workflow == Mix::NAME {
                let h = host.handle::<Mix>(&info.run_id);
                let events = h.events().await.expect("events");
                let side = Side {
                    path: Arc::new(dir.join("side-of-replay.log")),
                    generation: 0,
                };
                let replayed = testing::replay(Mix { side }, &events).await;
                (events, replayed, h.result().await)
            } else {
                let h = host.handle::<Kid>(&info.run_id);
                let events = h.events().await.expect("events");
                let side = Side {
                    path: Arc::new(dir.join("side-of-replay.log")),
                    generation: 0,
                };
                let replayed = testing::replay(Kid { side }, &events).await;
                (events, replayed, h.result().await)
            };
            let result = match result {
                Ok(r) => r,
                Err(e) => {
                    problems.push(format!("{}: result: {e}", info.run_id));
                    continue;
                }
            };
            match replayed {
                Ok(Replayed::Completed(r)) if r == result => {}
                other => problems.push(format!(
                    "{}: replay of the final log gives {other:?}, the run's result is {result:?}",
                    info.run_id
                )),
            }
            if let Some(live) = seen_live.get(info.run_id.as_str()) {
                if *live != result {
                    problems.push(format!(
                        "{}: a child saw the result {live:?}, the store now says {result:?}",
                        info.run_id
                    ));
                }
            }
            if info.workflow == Mix::NAME {
                if result.contains("|race:signal:") {
                    f.race_signal += 1;
                } else {
                    f.race_timer += 1;
                }
                if result.contains("|Some(\"ping-") {
                    f.timed_waits_signalled += 1;
                } else {
                    f.timed_waits_timed_out += 1;
                }
                if result.contains("+Some(\"kick-") {
                    f.timed_waits_signalled += 1;
                } else {
                    f.timed_waits_timed_out += 1;
                }
                if !result.contains("|slow:timed-out|") {
                    slow_won += 1;
                }
            }
            // A mix run is checked together with its kid (whose steps all run inside
            // the join), a kid also on its own.
            let lines = if info.workflow == Mix::NAME {
                let mut lines = phased(&by_run, &info.run_id, false, &mut problems);
                for (_, step, at) in phased(&by_run, &kid_id(&info.run_id), true, &mut problems) {
                    lines.push((2, step, at));
                }
                lines
            } else {
                phased(&by_run, &info.run_id, true, &mut problems)
            };
            f.out_of_order += check_phases(&info.run_id, lines, &mut problems);
            check_log(&info.run_id, &events, &side, &mut f, &mut problems);
        }
        if infos.len() != 2 * mixes {
            problems.push(format!(
                "{} runs for {mixes} mix runs: every mix run has exactly one kid",
                infos.len()
            ));
        }
        host.shutdown().await.expect("shutdown");
    });
    if dir.join("side-of-checker.log").exists() || dir.join("side-of-replay.log").exists() {
        problems.push("a step body ran in the checking process".into());
    }

    println!(
        "crash_torture: {kills} kills survived ({} mid-work, {killed_before_open} before \
         the host was open, median open {open_median} ms; {idle_rounds} rounds ran no step body), \
         {} children, {} runs ({} finished during the kill phase), {} steps recorded, \
         {} step bodies run ({bodies_during_kills} during the kill phase), \
         {} bodies re-run before their record (at-least-once; {} side-file records torn \
         by a kill, {torn_done} in done.log), {} re-run after their \
         record, {} bodies run out of handler order, {} failed attempts recorded, {} steps abandoned by a lost race \
         ({slow_won} slow steps won), races signal/timer {}/{}, timed waits signal/timeout {}/{}, {} signals, {} parked; \
         kill phase {:.1?}, total {:.1?}",
        kills - idle_rounds,
        generation + 1,
        f.runs,
        done_during_kills,
        f.steps_recorded,
        f.bodies_run,
        f.rerun_before_record,
        torn,
        f.rerun_after_record,
        f.out_of_order,
        f.failed_attempts_recorded,
        f.abandoned_steps,
        f.race_signal,
        f.race_timer,
        f.timed_waits_signalled,
        f.timed_waits_timed_out,
        f.signals,
        f.parked,
        kill_phase,
        started.elapsed(),
    );
    if !problems.is_empty() {
        let shown: Vec<&String> = problems.iter().take(40).collect();
        panic!(
            "{} problem(s) (seed {seed}, dir kept at {}):\n{}",
            problems.len(),
            tmp.keep().display(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert_eq!(f.rerun_after_record, 0);
    assert_eq!(f.out_of_order, 0);
    assert_eq!(f.parked, 0);
    assert!(kills > 0);
    let mid_work = kills - idle_rounds;
    assert!(
        mid_work as f64 >= MID_WORK_SHARE * kills as f64,
        "only {mid_work} of {kills} kills landed while step bodies ran (seed {seed}): \
         move the kill window (REEL_TORTURE_KILL_MS, Backend::kill_ms) past the open"
    );
}
