//! Crash torture: invariants 1, 2 and 7 (and replay under concurrency) with a real
//! process killed by SIGKILL at many random points. The harness, for any backend:
//! `tests/crash_torture.rs` runs it on a fjall directory, `reel-postgres`'s
//! `crash_torture_on_postgres` on a PostgreSQL database ([`Backend`]).
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
//! `fail-` token); a record torn by a kill in mid-write is recognised and skipped. The parent starts a child, lets it run a random 5–200 ms, SIGKILLs
//! it, and repeats (`REEL_TORTURE_KILLS`, default 50); then a last child runs without
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
//! many kills hit a host that was not open yet).
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

/// Where the runs are stored, and the test that runs the torture.
pub struct Backend {
    /// The test the child processes run (`--exact`): the caller of [`run`].
    pub test: &'static str,
    /// Called once by the parent with the working directory, before any child.
    pub prepare: Option<fn(&Path)>,
    /// Opens the store of the working directory; `None`: a fjall store in
    /// `<dir>/store`.
    pub store: Option<fn(PathBuf) -> StoreFuture>,
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
/// Kill delays, from the spawn of the child (`REEL_TORTURE_KILL_MS=lo-hi` changes them).
const KILL_MS: (u64, u64) = (5, 200);
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

/// Where step bodies log their executions, and the generation of this process.
#[derive(Clone)]
struct Side {
    path: Arc<PathBuf>,
    generation: u64,
}

/// Every step uses this: fail fast, retry fast (the backoffs are durable timers).
fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        initial_backoff: ms(2),
        max_backoff: ms(8),
        multiplier: 2.0,
    }
}

/// A step whose body logs `run step attempt token` to the side file, works for
/// `work_ms`, and returns the token; its first `fails` attempts fail.
fn logged_step(
    ctx: &Ctx,
    side: &Side,
    name: &str,
    fails: u32,
    work_ms: u64,
) -> impl Future<Output = reel::Result<String>> + Send + use<> {
    let side = side.clone();
    ctx.step_with(name, fast_retries(), move |s: StepCtx| {
        let side = side.clone();
        async move {
            // Run ids here contain no `/` or `%`, so the key is `run/step` verbatim.
            let key = s.idempotency_key().to_owned();
            let (run, step) = key.split_once('/').ok_or("no `/` in the key")?;
            let attempt = s.attempt();
            let fail = attempt <= fails;
            let token = format!(
                "{}g{}-{}",
                if fail { "fail-" } else { "" },
                side.generation,
                Uuid::new_v4().simple()
            );
            // Written synchronously, before the body can be dropped by a lost race.
            append_record(&side.path, &format!("{run} {step} {attempt} {token}"))
                .map_err(|e| format!("side file: {e}"))?;
            if work_ms > 0 {
                tokio::time::sleep(ms(work_ms)).await;
            }
            if fail {
                Err(format!("attempt {attempt} fails on purpose"))
            } else {
                Ok(token)
            }
        }
    })
}

fn epoch_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

fn epoch_ms(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// The main workflow: every primitive, concurrency included.
struct Mix {
    side: Side,
}

impl Workflow for Mix {
    const NAME: &'static str = "mix";
    type Input = u64;
    type Output = String;

    fn retry_policy(&self) -> RetryPolicy {
        fast_retries()
    }

    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<String> {
        let s = &self.side;
        let mut out = Vec::new();

        // Recorded values.
        let now = ctx.now().await?;
        let uuid = ctx.uuid().await?;
        let r = ctx.random_u64().await?;
        out.push(format!("t{} {uuid} {r:x}", epoch_ms(now)));

        // A plain step, then one that fails its first one or two attempts.
        out.push(logged_step(&ctx, s, "first", 0, 0).await?);
        out.push(logged_step(&ctx, s, "flaky", 1 + (n % 2) as u32, 0).await?);
        ctx.sleep(ms(1 + r % 12)).await?;

        // A join of branches that each make several calls, one of them a child run.
        let (left, right, kid) = futures::try_join!(
            async {
                let a = logged_step(&ctx, s, "left", 0, r % 3).await?;
                ctx.sleep(ms(2 + (r >> 4) % 5)).await?;
                let b = logged_step(&ctx, s, "left", 0, 0).await?;
                Ok::<_, reel::Error>(format!("{a}+{b}"))
            },
            async {
                let ping = ctx
                    .wait_for_signal_timeout::<String>("ping", ms(5 + (r >> 8) % 40))
                    .await?;
                let t = logged_step(&ctx, s, "right", 0, 0).await?;
                let v = ctx.random_u64().await?;
                Ok(format!("{ping:?}+{t}+{v:x}"))
            },
            // The kid's id comes from the input, not from `ctx.run_id()`:
            // `testing::replay` runs the handler under the run id `replay`.
            ctx.child::<Kid>(&kid_id(&mix_id(n)), n),
        )?;
        out.extend([left, right, kid]);

        // try_join_all over loops of steps.
        let fan = try_join_all((0..3u64).map(|k| {
            let ctx = ctx.clone();
            async move {
                let mut v = Vec::new();
                for _ in 0..2 {
                    v.push(logged_step(&ctx, s, "fan", 0, (r >> (12 + k)) % 3).await?);
                }
                v.push(ctx.uuid().await?.to_string());
                Ok::<_, reel::Error>(v.join("+"))
            }
        }))
        .await?;
        out.extend(fan);

        // FuturesUnordered: the completion order is part of the output.
        let mut unordered = FuturesUnordered::new();
        for k in 0..3u64 {
            let ctx = ctx.clone();
            unordered.push(async move {
                ctx.sleep(ms(1 + (r >> (20 + 3 * k)) % 6)).await?;
                let t = logged_step(&ctx, s, "unord", 0, 0).await?;
                Ok::<_, reel::Error>(format!("{k}:{t}"))
            });
        }
        while let Some(x) = unordered.try_next().await? {
            out.push(x);
        }

        // tokio::select!: a signal against a timer.
        let race = tokio::select! {
            sig = ctx.wait_for_signal::<String>("race") => format!("race:signal:{}", sig?),
            slept = ctx.sleep(ms(3 + (r >> 32) % 40)) => { slept?; "race:timer".to_owned() }
        };
        out.push(race);

        // futures::future::select: a running step against a timer. The loser is
        // dropped right away.
        let slow = Box::pin(logged_step(&ctx, s, "slow", 0, 1 + (r >> 40) % 12));
        let deadline = Box::pin(ctx.sleep(ms(6)));
        let slow = match select(slow, deadline).await {
            Either::Left((token, timer)) => {
                drop(timer);
                token?
            }
            Either::Right((slept, step)) => {
                drop(step);
                slept?;
                "slow:timed-out".to_owned()
            }
        };
        out.push(slow);
        out.push(logged_step(&ctx, s, "after-race", 0, 0).await?);

        // An untimed signal wait and an approval, both sent from outside.
        let pay: String = ctx.wait_for_signal("pay").await?;
        let decision = ctx.approval("ship").await?;
        out.push(format!("{pay} {:?}", decision.feedback));
        let last = if decision.approved { "ship" } else { "refund" };
        out.push(logged_step(&ctx, s, last, 0, 0).await?);

        // A loop of steps (ids loop, loop#2, ...).
        for k in 0..4 {
            out.push(logged_step(&ctx, s, "loop", 0, 0).await?);
            if k == 1 {
                ctx.sleep(ms(2)).await?;
            }
        }
        out.push(format!("end t{}", epoch_ms(ctx.now().await?)));
        Ok(out.join("|"))
    }
}

/// The child run of every `mix` run.
struct Kid {
    side: Side,
}

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = u64;
    type Output = String;

    fn retry_policy(&self) -> RetryPolicy {
        fast_retries()
    }

    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<String> {
        let s = &self.side;
        let mut out = Vec::new();
        for _ in 0..2 {
            out.push(logged_step(&ctx, s, "k", 0, 0).await?);
        }
        let kick = ctx
            .wait_for_signal_timeout::<String>("kick", ms(5 + n % 30))
            .await?;
        out.push(format!("{kick:?}"));
        ctx.sleep(ms(1 + n % 4)).await?;
        out.push(format!("{:x}", ctx.random_u64().await?));
        out.push(logged_step(&ctx, s, "k", (n % 3 == 0) as u32, 0).await?);
        Ok(out.join("+"))
    }
}

async fn builder(dir: &Path, side_file: &str, generation: u64) -> reel::HostBuilder {
    let side = Side {
        path: Arc::new(dir.join(side_file)),
        generation,
    };
    let builder = match backend().store {
        Some(open) => Host::builder().store(open(dir.to_owned()).await),
        None => Host::builder().path(dir.join("store")),
    };
    builder
        .register(Mix { side: side.clone() })
        .register(Kid { side })
}

// ---------------------------------------------------------------------------------
// The child process.

/// A problem the child saw; the parent fails the test when it finds one.
fn child_error(what: String) {
    eprintln!("TORTURE-ERR {what}");
}

/// Sends signal `name` to `run` after `delay`, with a fixed signal id. A run that
/// does not exist yet (a kid not yet started) is tried again; a finished run needs
/// nothing any more.
async fn send_later<W: Workflow>(run: reel::RunHandle<W>, name: &'static str, delay: Duration) {
    tokio::time::sleep(delay).await;
    let signal_id = format!("{}/{name}", run.id());
    let payload = format!("{name}-{}", run.id());
    loop {
        match run.signal(name, &payload, &signal_id).await {
            Ok(()) | Err(reel::Error::RunFinished(_)) => return,
            Err(reel::Error::UnknownRun(_)) => tokio::time::sleep(ms(5)).await,
            Err(e) => {
                child_error(format!("signal {name} to {}: {e}", run.id()));
                return;
            }
        }
    }
}

/// Sends signal `name` to `run` once the run waits for it, `delay` after the wait was
/// first seen: a timed wait or a race against a timer then goes either way.
async fn send_when_awaited<W: Workflow>(
    run: reel::RunHandle<W>,
    name: &'static str,
    delay: Duration,
) {
    loop {
        // Gated on suspension, so that a busy run is not read over and over.
        match run.wait_until_suspended().await {
            Ok(_) => {}
            Err(reel::Error::UnknownRun(_)) => {
                tokio::time::sleep(ms(5)).await;
                continue;
            }
            Err(reel::Error::RunFinished(_)) => return,
            Err(e) => return child_error(format!("waiting on {}: {e}", run.id())),
        }
        match run.events().await {
            Ok(events)
                if events
                    .iter()
                    .any(|e| matches!(e, Event::SignalAwaited { name: n, .. } if n == name)) =>
            {
                break;
            }
            Ok(_) => tokio::time::sleep(ms(5)).await,
            Err(e) => return child_error(format!("events of {}: {e}", run.id())),
        }
    }
    send_later(run, name, delay).await;
}

/// Approves `ship` after `delay`, unless the log already holds a decision: an
/// approval has no signal id, so a re-send would be a second decision.
async fn approve_later(run: reel::RunHandle<Mix>, n: u64, delay: Duration) {
    tokio::time::sleep(delay).await;
    let events = match run.events().await {
        Ok(e) => e,
        Err(e) => return child_error(format!("events of {}: {e}", run.id())),
    };
    let decided = events
        .iter()
        .any(|e| matches!(e, Event::SignalReceived { name, .. } if name == "approval:ship"));
    if decided {
        return;
    }
    match run
        .approve("ship", n % 4 != 0, Some(format!("fb-{n}")))
        .await
    {
        Ok(()) | Err(reel::Error::RunFinished(_)) => {}
        Err(e) => child_error(format!("approve {}: {e}", run.id())),
    }
}

/// Starts (idempotently) `mix-n`, sends its signals at random moments, waits for its
/// end and logs its output to `done.log`.
async fn drive(host: Arc<Host>, dir: Arc<PathBuf>, n: u64, seed: u64) {
    let id = mix_id(n);
    let run = match host.start::<Mix>(&id, n).await {
        Ok(run) => run,
        Err(e) => return child_error(format!("start {id}: {e}")),
    };
    let mut rng = Rng(seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut signals = JoinSet::new();
    // `pay` and the approval usually arrive before their wait (buffered), the others
    // while their wait runs against a timer.
    signals.spawn(send_later(run.clone(), "pay", ms(rng.range(0, 30))));
    signals.spawn(approve_later(run.clone(), n, ms(rng.range(0, 40))));
    signals.spawn(send_when_awaited(run.clone(), "ping", ms(rng.range(0, 8))));
    signals.spawn(send_when_awaited(run.clone(), "race", ms(rng.range(0, 10))));
    let kid = host.handle::<Kid>(&kid_id(&id));
    signals.spawn(send_when_awaited(kid, "kick", ms(rng.range(0, 8))));
    match run.result().await {
        Ok(out) => {
            if let Err(e) = append_record(&dir.join("done.log"), &format!("{id} {out}")) {
                child_error(format!("done.log: {e}"));
            }
        }
        Err(e) => child_error(format!("result of {id}: {e}")),
    }
    signals.abort_all();
}

fn child(dir: &Path) {
    let generation: u64 = std::env::var(GEN_ENV)
        .ok()
        .and_then(|g| g.parse().ok())
        .unwrap_or(0);
    let last = std::env::var_os(FINAL_ENV).is_some();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // Some children passivate suspended runs almost at once, so that wake-ups
        // also replay from disk within one process, not only after a kill.
        let passivate = [ms(5), ms(30), Duration::from_secs(10)][generation as usize % 3];
        let host = Arc::new(
            builder(dir, "side.log", generation)
                .await
                .passivate_after(passivate)
                .build()
                .await
                .expect("open the store"),
        );
        // Tells the parent how long the start took (and that this kill hit a live host).
        let spawned = std::env::var(SPAWNED_ENV)
            .ok()
            .and_then(|t| t.parse::<u128>().ok())
            .unwrap_or(0);
        eprintln!(
            "READY {generation} {}",
            epoch_us().saturating_sub(spawned) / 1000
        );
        let work = child_work(host.clone(), dir, generation, last);
        if last {
            if tokio::time::timeout(FINAL_LIMIT, work).await.is_err() {
                report_unfinished(&host).await;
                std::process::exit(3);
            }
        } else {
            work.await;
        }
        match Arc::try_unwrap(host) {
            Ok(host) => host.shutdown().await.expect("shutdown"),
            Err(_) => child_error("the host is still shared at the end".into()),
        }
    });
}

async fn child_work(host: Arc<Host>, dir: &Path, generation: u64, last: bool) {
    let dir = Arc::new(dir.to_owned());
    // Signal delays: from the parent's seed, so a printed seed reproduces them too
    // (what they meet still depends on timing).
    let seed = env_u64(SEED_ENV).unwrap_or(0) ^ generation.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let infos = host.runs().await.expect("runs");
    let mut started = 0;
    let mut unfinished = Vec::new();
    for info in infos.iter().filter(|i| i.workflow == Mix::NAME) {
        started += 1;
        if info.status != RunStatus::Completed {
            let n = info.run_id["mix-".len()..].parse::<u64>().expect("mix id");
            unfinished.push(n);
        }
    }
    let window = Arc::new(Semaphore::new(WINDOW));
    let mut tasks = JoinSet::new();
    // The runs already started first, then (before the last child) new ones for ever.
    let fresh = (started as u64..).take_while(|_| !last);
    for n in unfinished.into_iter().chain(fresh) {
        let permit = window.clone().acquire_owned().await.expect("window");
        let (host, dir) = (host.clone(), dir.clone());
        tasks.spawn(async move {
            drive(host, dir, n, seed).await;
            drop(permit);
        });
    }
    while tasks.join_next().await.is_some() {}
    println!("all-done");
}

async fn report_unfinished(host: &Host) {
    let infos = host.runs().await.unwrap_or_default();
    for info in infos
        .iter()
        .filter(|i| !matches!(i.status, RunStatus::Completed))
    {
        child_error(format!(
            "unfinished after {FINAL_LIMIT:?}: {} {:?}",
            info.run_id, info.status
        ));
        let events = match info.workflow.as_str() {
            "mix" => host.handle::<Mix>(&info.run_id).events().await,
            _ => host.handle::<Kid>(&info.run_id).events().await,
        };
        eprintln!("  log: {events:?}");
    }
}

// ---------------------------------------------------------------------------------
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

/// One line of the side file.
struct Exec {
    /// Line number in the side file: the order in which bodies ran, across processes.
    pos: usize,
    attempt: u32,
    token: String,
}

fn read_side(records: &[String]) -> HashMap<(String, String), Vec<Exec>> {
    let mut side: HashMap<(String, String), Vec<Exec>> = HashMap::new();
    for (pos, line) in records.iter().enumerate() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [run, step, attempt, token] = parts[..] else {
            panic!("malformed side-file line {line:?}");
        };
        side.entry((run.to_owned(), step.to_owned()))
            .or_default()
            .push(Exec {
                pos,
                attempt: attempt.parse().expect("attempt"),
                token: token.to_owned(),
            });
    }
    side
}

#[derive(Default, Debug)]
struct Figures {
    runs: usize,
    steps_recorded: usize,
    bodies_run: usize,
    rerun_before_record: usize,
    rerun_after_record: usize,
    out_of_order: usize,
    failed_attempts_recorded: usize,
    abandoned_steps: usize,
    signals: usize,
    race_signal: usize,
    race_timer: usize,
    timed_waits_signalled: usize,
    timed_waits_timed_out: usize,
    parked: usize,
}

/// Checks one run's final log against the side file; adds to `f`, pushes problems.
fn check_log(
    run: &str,
    events: &[Event],
    side: &HashMap<(String, String), Vec<Exec>>,
    f: &mut Figures,
    problems: &mut Vec<String>,
) {
    let terminal = events
        .iter()
        .position(|e| {
            matches!(
                e,
                Event::RunCompleted { .. } | Event::RunFailed { .. } | Event::RunCancelled { .. }
            )
        })
        .unwrap_or(events.len());
    if terminal + 1 != events.len() {
        problems.push(format!(
            "{run}: the terminal event is at {terminal} of {} events",
            events.len()
        ));
    }
    if !matches!(events.first(), Some(Event::RunStarted { .. })) {
        problems.push(format!("{run}: the log does not start with RunStarted"));
    }
    let mut completed: HashSet<&str> = HashSet::new();
    let mut failed: HashSet<&str> = HashSet::new();
    let mut started: BTreeMap<&str, u32> = BTreeMap::new();
    let mut signal_ids: HashSet<&str> = HashSet::new();
    let no_lines = Vec::new();
    for e in events {
        match e {
            Event::StepStarted { id, attempt } => {
                started.insert(id, *attempt);
            }
            Event::StepCompleted { id, output } => {
                f.steps_recorded += 1;
                if !completed.insert(id) {
                    problems.push(format!("{run}: step {id} completed twice"));
                }
                let token: String = match rmp_serde::from_slice(output.as_bytes()) {
                    Ok(t) => t,
                    Err(e) => {
                        problems.push(format!("{run}: step {id}: undecodable output: {e}"));
                        continue;
                    }
                };
                let lines = side.get(&(run.to_owned(), id.clone())).unwrap_or(&no_lines);
                match lines.iter().rposition(|x| x.token == token) {
                    None => problems.push(format!(
                        "{run}: step {id}: recorded token {token} was never written by a body"
                    )),
                    Some(at) => {
                        let after = lines.len() - 1 - at;
                        if after > 0 {
                            f.rerun_after_record += after;
                            problems.push(format!(
                                "{run}: step {id} ran {after} more time(s) after its result \
                                 {token} was recorded"
                            ));
                        }
                        let attempt = started.get(id.as_str()).copied().unwrap_or(0);
                        if lines[at].attempt != attempt {
                            problems.push(format!(
                                "{run}: step {id}: recorded value from attempt {}, the log's \
                                 last StepStarted says attempt {attempt}",
                                lines[at].attempt
                            ));
                        }
                    }
                }
            }
            Event::StepFailed { id, attempt, .. } => {
                f.failed_attempts_recorded += 1;
                failed.insert(id);
                let lines = side.get(&(run.to_owned(), id.clone())).unwrap_or(&no_lines);
                // The last execution of this attempt failed, and no execution of this or
                // an earlier attempt follows it.
                match lines.iter().rposition(|x| x.attempt == *attempt) {
                    None => problems.push(format!(
                        "{run}: step {id}: failed attempt {attempt} never ran"
                    )),
                    Some(at) => {
                        if !lines[at].token.starts_with("fail-") {
                            problems.push(format!(
                                "{run}: step {id}: attempt {attempt} is recorded as failed, \
                                 its last execution succeeded"
                            ));
                        }
                        let again = lines[at + 1..]
                            .iter()
                            .filter(|x| x.attempt <= *attempt)
                            .count();
                        if again > 0 {
                            f.rerun_after_record += again;
                            problems.push(format!(
                                "{run}: step {id}: attempt {attempt} (or an earlier one) ran \
                                 {again} time(s) after its failure was recorded"
                            ));
                        }
                    }
                }
            }
            Event::SignalReceived { signal_id, .. } => {
                f.signals += 1;
                if !signal_ids.insert(signal_id) {
                    problems.push(format!("{run}: signal id {signal_id} delivered twice"));
                }
            }
            _ => {}
        }
    }
    // Steps that were opened and never finished: only the `slow` step may lose its race.
    for id in started.keys() {
        if completed.contains(id) || failed.contains(id) {
            continue;
        }
        f.abandoned_steps += 1;
        if *id != "slow" {
            problems.push(format!("{run}: step {id} was started and never finished"));
            continue;
        }
        // Whether it ran again once the race was decided is checked against the
        // side-file order by the caller.
    }
}

/// Where a step sits in its handler: a step of a later phase is called only once
/// every step of the earlier phases has returned, that is once their results were
/// recorded (durably) and seen. The steps of a mix run's kid all run inside the
/// mix run's join (phase 2); inside the kid, `k`, `k#2` and `k#3` follow each other.
/// `None`: not a step of these handlers.
fn phase(kid: bool, step: &str) -> Option<u32> {
    let (name, k) = match step.split_once('#') {
        Some((name, k)) => (name, k.parse::<u32>().ok()?),
        None => (step, 1),
    };
    if kid {
        return (name == "k").then_some(k);
    }
    Some(match name {
        "first" => 0,
        "flaky" => 1,
        "left" | "right" => 2,
        "fan" => 3,
        "unord" => 4,
        "slow" => 5,
        "after-race" => 6,
        "ship" | "refund" => 7,
        "loop" => 7 + k,
        _ => return None,
    })
}

/// The bodies of one run's steps, in the form [`check_phases`] takes.
fn phased(
    by_run: &HashMap<&str, Vec<(&str, &Vec<Exec>)>>,
    run: &str,
    kid: bool,
    problems: &mut Vec<String>,
) -> Vec<(u32, String, Vec<usize>)> {
    let mut lines = Vec::new();
    for (step, execs) in by_run.get(run).into_iter().flatten() {
        match phase(kid, step) {
            Some(p) => lines.push((
                p,
                format!("{run}/{step}"),
                execs.iter().map(|x| x.pos).collect(),
            )),
            None => problems.push(format!("{run}: unknown step {step}")),
        }
    }
    lines
}

/// Checks that no body of an earlier phase ran after a body of a later phase had
/// run: that would be a result the handler had seen that was lost (invariant 1), a
/// recorded step that ran again, or a race loser that ran after the race was decided
/// (invariant 2). `lines`: (phase, step, side-file positions). Returns the offenders.
fn check_phases(
    run: &str,
    mut lines: Vec<(u32, String, Vec<usize>)>,
    problems: &mut Vec<String>,
) -> usize {
    lines.sort_by_key(|(phase, _, _)| *phase);
    let mut late = 0;
    for (phase, step, at) in &lines {
        // The first body of any later phase.
        let first_later = lines
            .iter()
            .filter(|(p, _, _)| p > phase)
            .filter_map(|(_, later, at)| Some((*at.iter().min()?, later)))
            .min();
        let Some((first_later, later)) = first_later else {
            continue;
        };
        let n = at.iter().filter(|p| **p > first_later).count();
        if n > 0 {
            late += n;
            problems.push(format!(
                "{run}: step {step} ran {n} time(s) after step {later} had started, which \
                 the handler reaches only once {step} has returned"
            ));
        }
    }
    late
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
        .unwrap_or(KILL_MS);
    println!(
        "crash_torture: seed {seed} (REEL_TORTURE_SEED), {kills_wanted} kills \
         {kill_min}-{kill_max} ms after the spawn"
    );

    // Kill phase.
    let mut kills = 0u64;
    let mut idle_rounds = 0u64;
    let mut generation = 0u64;
    let mut failures = Vec::new();
    while kills < kills_wanted {
        let before = file_len(&side_path);
        let mut child = spawn_child(dir, seed, generation, false);
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
        "crash_torture: {kills} kills survived ({killed_before_open} before the host was \
         open, median open {open_median} ms; {idle_rounds} rounds ran no step body), \
         {} children, {} runs ({} finished during the kill phase), {} steps recorded, \
         {} step bodies run ({bodies_during_kills} during the kill phase), \
         {} bodies re-run before their record (at-least-once; {} side-file records torn \
         by a kill, {torn_done} in done.log), {} re-run after their \
         record, {} bodies run out of handler order, {} failed attempts recorded, {} steps abandoned by a lost race \
         ({slow_won} slow steps won), races signal/timer {}/{}, timed waits signal/timeout {}/{}, {} signals, {} parked; \
         kill phase {:.1?}, total {:.1?}",
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
}
