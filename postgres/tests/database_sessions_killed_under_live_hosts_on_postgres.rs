//! The database goes away under two live hosts sharing it, mid-work (runs doing
//! steps, sleeping on timers, waiting on signals, parents waiting on children,
//! runs of a queue of two): every session on the test's database is killed once,
//! then twenty times while runs progress, and, separately, sessions are refused
//! for a stretch longer than a lease. Once the database is back:
//! - every run ends completed with the right result, and no step body ran again
//!   after its result was recorded (each execution returns a fresh token; the
//!   token a run recorded is its step's last execution);
//! - callers during the outage (`start`, `signal`, `status`) get `Ok` or a typed
//!   `Error::Storage` within a hang limit, never a panic or a wrong answer;
//! - the notice connection listens again: mail posted by one store after the
//!   outage is heard by the other's notice subscription (not only by polling);
//! - both hosts shut down cleanly.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reel::{Ctx, Error, Host, QueueOptions, RunStatus, Workflow};
use reel_storage::{Cluster, Mail, Notice, Store};
use support::hosts::{joined, owned_by, shutdown_all, spread};
use support::outage;

/// Hang detector of one wait.
const LIMIT: Duration = Duration::from_secs(60);
/// Steps of the long runs: work goes on across the kills.
const LONG: u32 = 40;

type Tokens = Vec<(String, u64)>;

/// Every execution of every step body, by idempotency key, as fresh tokens.
#[derive(Clone, Default)]
struct Ledger {
    runs: Arc<Mutex<HashMap<String, Vec<u64>>>>,
    next: Arc<AtomicU64>,
}

impl Ledger {
    fn exec(&self, key: &str) -> u64 {
        let token = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_owned())
            .or_default()
            .push(token);
        token
    }

    fn total(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }

    /// Each recorded token is its step's last execution.
    fn check(&self, run: &str, recorded: &Tokens) {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        for (key, token) in recorded {
            let execs = runs.get(key).cloned().unwrap_or_default();
            assert_eq!(
                execs.last(),
                Some(token),
                "{run}: step {key} ran again after its result {token} was recorded: \
                 executions {execs:?}"
            );
        }
    }
}

async fn body(ledger: Ledger, key: String) -> Result<(String, u64), String> {
    tokio::time::sleep(Duration::from_millis(3)).await;
    let token = ledger.exec(&key);
    Ok((key, token))
}

/// `n` steps, a short timer after every third.
#[derive(Clone)]
struct Stepper(Ledger);

impl Workflow for Stepper {
    const NAME: &'static str = "stepper";
    type Input = u32;
    type Output = Tokens;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Tokens> {
        let mut out = Vec::new();
        for i in 0..n {
            let l = self.0.clone();
            out.push(
                ctx.step(&format!("s{i}"), |s| {
                    body(l.clone(), s.idempotency_key().to_owned())
                })
                .await?,
            );
            if i % 3 == 2 {
                ctx.sleep(Duration::from_millis(40)).await?;
            }
        }
        Ok(out)
    }
}

/// A step, then waits for `go`, then a step recording it.
#[derive(Clone)]
struct Waiter(Ledger);

impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = (u32, Tokens);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u32, Tokens)> {
        let l = self.0.clone();
        let a = ctx
            .step("before", |s| {
                body(l.clone(), s.idempotency_key().to_owned())
            })
            .await?;
        let n: u32 = ctx.wait_for_signal("go").await?;
        let l = self.0.clone();
        let b = ctx
            .step("after", |s| body(l.clone(), s.idempotency_key().to_owned()))
            .await?;
        Ok((n, vec![a, b]))
    }
}

/// A child `Stepper` of five steps, then a step of its own.
#[derive(Clone)]
struct Parent(Ledger);

impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = ();
    type Output = Tokens;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Tokens> {
        let mut out = ctx
            .child::<Stepper>(&format!("{}-kid", ctx.run_id()), 5)
            .await?;
        let l = self.0.clone();
        out.push(
            ctx.step("own", |s| body(l.clone(), s.idempotency_key().to_owned()))
                .await?,
        );
        Ok(out)
    }
}

async fn open(url: &str, name: &str, ledger: &Ledger) -> anyhow::Result<Host> {
    Ok(joined(url, name)
        .await?
        .register(Stepper(ledger.clone()))
        .register(Waiter(ledger.clone()))
        .register(Parent(ledger.clone()))
        .queue("q", QueueOptions::default().concurrency(2))
        .build()
        .await?)
}

/// Calls `f` until it is not refused for storage, each call within the hang
/// limit; `Error::Storage` is the only refusal an outage may cause (and, for a
/// start whose first answer was lost, `RunExists` after it).
async fn retrying<T, F>(what: &str, mut f: impl FnMut() -> F) -> reel::Result<T>
where
    F: std::future::Future<Output = reel::Result<T>>,
{
    let deadline = Instant::now() + LIMIT;
    loop {
        let r = tokio::time::timeout(Duration::from_secs(20), f())
            .await
            .unwrap_or_else(|_| panic!("{what} hung past 20 s"));
        match r {
            Err(Error::Storage(e)) => {
                assert!(
                    Instant::now() < deadline,
                    "{what} refused for a minute: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

struct Work {
    steppers: Vec<String>,
    waiters: Vec<String>,
    parents: Vec<String>,
    jobs: Vec<String>,
}

/// Starts the work, spread over both hosts' partitions and started through
/// either host.
async fn start_work(hosts: &[Host; 2], owners: &[usize]) -> anyhow::Result<Work> {
    let pick = |owner, prefix, n| owned_by(owners, owner, prefix, n);
    let w = Work {
        steppers: [pick(0, "st", 4), pick(1, "st", 4)].concat(),
        waiters: [pick(0, "wt", 3), pick(1, "wt", 3)].concat(),
        parents: [pick(0, "pa", 2), pick(1, "pa", 2)].concat(),
        jobs: [pick(0, "job", 3), pick(1, "job", 3)].concat(),
    };
    for (i, id) in w.steppers.iter().enumerate() {
        hosts[i % 2].start::<Stepper>(id, LONG).await?;
    }
    for (i, id) in w.waiters.iter().enumerate() {
        hosts[i % 2].start::<Waiter>(id, ()).await?;
    }
    for (i, id) in w.parents.iter().enumerate() {
        hosts[i % 2].start::<Parent>(id, ()).await?;
    }
    for (i, id) in w.jobs.iter().enumerate() {
        hosts[i % 2].start_on::<Stepper>("q", id, 6).await?;
    }
    Ok(w)
}

/// Signals the waiters (through the host that does not own each), awaits every
/// run's result and checks it against the ledger.
async fn finish_work(hosts: &[Host; 2], w: &Work, ledger: &Ledger) -> anyhow::Result<()> {
    for (i, id) in w.waiters.iter().enumerate() {
        let h = hosts[(i + 1) % 2].handle::<Waiter>(id);
        let (n, signal_id) = (i as u32, format!("go-{id}"));
        retrying("signal", || h.signal("go", &n, &signal_id)).await?;
    }
    let result = async |id: &str| {
        let deadline = Instant::now() + LIMIT;
        loop {
            let s = retrying("status", || status_of(&hosts[0], id)).await?;
            if matches!(s, RunStatus::Completed) {
                return Ok::<_, anyhow::Error>(());
            }
            assert!(
                !matches!(
                    s,
                    RunStatus::Failed { .. } | RunStatus::Cancelled | RunStatus::Parked { .. }
                ),
                "{id} ended wrongly after the outage: {s:?}"
            );
            if Instant::now() >= deadline {
                // What the run waits for: the end of its log.
                let events = hosts[0].run(id).events().await;
                let tail: Vec<String> = events
                    .iter()
                    .flatten()
                    .rev()
                    .take(4)
                    .map(|e| format!("{e:?}"))
                    .collect();
                panic!(
                    "{id} never completed; it is {s:?}; its last events, newest first: {tail:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    for id in w.steppers.iter().chain(&w.jobs) {
        result(id).await?;
        let tokens = hosts[1].handle::<Stepper>(id).result().await?;
        let want = if w.jobs.contains(id) {
            6
        } else {
            LONG as usize
        };
        assert_eq!(tokens.len(), want, "{id}");
        ledger.check(id, &tokens);
    }
    for (i, id) in w.waiters.iter().enumerate() {
        result(id).await?;
        let (n, tokens) = hosts[0].handle::<Waiter>(id).result().await?;
        assert_eq!(n, i as u32, "{id} got its own signal");
        ledger.check(id, &tokens);
    }
    for id in &w.parents {
        result(id).await?;
        let tokens = hosts[1].handle::<Parent>(id).result().await?;
        assert_eq!(tokens.len(), 6, "{id}");
        ledger.check(id, &tokens);
    }
    Ok(())
}

async fn status_of(host: &Host, id: &str) -> reel::Result<RunStatus> {
    host.run(id).status().await
}

/// Waits until the step bodies ran `more` more times (the runs progress), or
/// every run that needs no signal has completed.
async fn progress(ledger: &Ledger, more: u64, what: &str, host: &Host, w: &Work) {
    let want = ledger.total() + more;
    let deadline = Instant::now() + LIMIT;
    let mut polls = 0u32;
    while ledger.total() < want {
        assert!(
            Instant::now() < deadline,
            "no progress {what}: {} step executions, waiting for {want}",
            ledger.total()
        );
        polls += 1;
        if polls % 20 == 0 {
            let mut done = true;
            for id in w.steppers.iter().chain(&w.jobs).chain(&w.parents) {
                done &= matches!(status_of(host, id).await, Ok(RunStatus::Completed));
            }
            if done {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn shutdown_within_limit(hosts: [Host; 2]) -> anyhow::Result<()> {
    tokio::time::timeout(LIMIT, shutdown_all(hosts))
        .await
        .map_err(|_| anyhow::anyhow!("the hosts did not shut down"))?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_killed_once_then_twenty_times_mid_work() -> anyhow::Result<()> {
    let url = support::database("killed_mid_work").await;
    let ledger = Ledger::default();
    let (hosts, owners) =
        spread::<2>(&url, 100, async |url, name| open(url, name, &ledger).await).await?;
    let work = start_work(&hosts, &owners).await?;
    progress(&ledger, 20, "before the first kill", &hosts[0], &work).await;
    assert!(outage::kill_sessions(&url).await > 0, "no session to kill");
    progress(&ledger, 10, "after the first kill", &hosts[0], &work).await;
    for round in 0..20 {
        outage::kill_sessions(&url).await;
        // Callers meanwhile: an answer or a storage error, never a wrong state.
        let s = retrying("status", || status_of(&hosts[round % 2], &work.steppers[0])).await?;
        assert!(
            matches!(
                s,
                RunStatus::Running | RunStatus::Suspended { .. } | RunStatus::Completed
            ),
            "{s:?}"
        );
        progress(&ledger, 3, &format!("after kill {round}"), &hosts[0], &work).await;
    }
    finish_work(&hosts, &work, &ledger).await?;
    shutdown_within_limit(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_refused_past_a_lease_then_back() -> anyhow::Result<()> {
    let url = support::database("refused_stretch").await;
    let ledger = Ledger::default();
    let (hosts, owners) =
        spread::<2>(&url, 100, async |url, name| open(url, name, &ledger).await).await?;
    let work = start_work(&hosts, &owners).await?;
    progress(&ledger, 20, "before the outage", &hosts[0], &work).await;
    outage::refuse(&url).await;
    // Callers during the outage: each answers within the limit, `Ok` or a typed
    // storage error.
    let calls = async {
        let late = owned_by(&owners, 1, "late", 1).remove(0);
        let started = hosts[0].start::<Stepper>(&late, 3).await;
        assert!(
            matches!(started, Ok(_) | Err(Error::Storage(_))),
            "start during the outage: {:?}",
            started.err()
        );
        let signalled = hosts[1]
            .handle::<Waiter>(&work.waiters[0])
            .signal("go", &0u32, &format!("go-{}", work.waiters[0]))
            .await;
        assert!(
            matches!(signalled, Ok(()) | Err(Error::Storage(_))),
            "signal during the outage: {signalled:?}"
        );
        let status = hosts[0].run(&work.steppers[1]).status().await;
        assert!(
            matches!(
                status,
                Ok(RunStatus::Running | RunStatus::Suspended { .. }) | Err(Error::Storage(_))
            ),
            "status during the outage: {status:?}"
        );
        (late, started.is_ok())
    };
    let (late, started) = tokio::time::timeout(LIMIT, calls)
        .await
        .map_err(|_| anyhow::anyhow!("a caller hung during the outage"))?;
    // The outage lasts past a lease: every lease runs out, by both clocks.
    tokio::time::sleep(support::TEST_LEASE * 3).await;
    outage::allow(&url).await;
    if started {
        let late_run = hosts[1].handle::<Stepper>(&late);
        let tokens = retrying("result", || late_run.result()).await?;
        ledger.check(&late, &tokens);
    }
    finish_work(&hosts, &work, &ledger).await?;
    shutdown_within_limit(hosts).await
}

/// The stores' notice connections listen again after their sessions were
/// killed, and after sessions were refused for a while: mail one store posts
/// reaches the other's subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_are_heard_again_after_the_outage() -> anyhow::Result<()> {
    let url = support::database("notices_back").await;
    let a = support::join(&url, "host-a").await?;
    let b = support::join(&url, "host-b").await?;
    let mut heard = b.subscribe();
    for outage_kind in ["killed", "refused"] {
        match outage_kind {
            "killed" => {
                outage::kill_sessions(&url).await;
            }
            _ => {
                outage::refuse(&url).await;
                // Gone for longer than the listener's reconnect pause.
                tokio::time::sleep(Duration::from_secs(3)).await;
                outage::allow(&url).await;
            }
        }
        // Mail posted before the listener is back is lost (it says `Missed`):
        // post until a `Mail` notice arrives.
        let deadline = Instant::now() + LIMIT;
        'heard: loop {
            assert!(
                Instant::now() < deadline,
                "no notice after the sessions were {outage_kind}"
            );
            let a = a.clone();
            let _ = tokio::task::spawn_blocking(move || {
                a.post("some-run", &Mail::Wake { timers: Vec::new() })
            })
            .await?;
            let wait = tokio::time::Instant::now() + Duration::from_millis(300);
            while let Ok(n) = tokio::time::timeout_at(wait, heard.recv()).await {
                if let Ok(Notice::Mail(p)) = n
                    && p == reel_storage::partition_of("some-run")
                {
                    break 'heard;
                }
            }
        }
    }
    tokio::task::spawn_blocking(move || {
        a.close();
        b.close();
    })
    .await?;
    Ok(())
}
