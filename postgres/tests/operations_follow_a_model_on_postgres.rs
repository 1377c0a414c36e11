//! The model of the operating API (`tests/common/op_model.rs`, driven on fjall by
//! `tests/operations_follow_a_model.rs`) on PostgreSQL: random sequences of
//! `start`, `signal`, `cancel`, `pause`, `resume`, `retry`, `delete`, `fork`,
//! `result()`, `TestClock` moves and host restarts, each answer and every status,
//! log, result, count and listing checked against the model after each step.
//!
//! - `one_host_follows_the_model`: one host (`HostBuilder::postgres`), a restart
//!   reopens the same database.
//! - `two_hosts_follow_the_model`: two hosts joined to one database (leases
//!   spread first), each operation sent through either host at random (the docs:
//!   operations through a non-owner reach the owner), every check made through
//!   both hosts; a restart restarts one of them under a new host id.
//!
//! Operations through a non-owner take effect once the owner applied its inbox,
//! and a restart moves partitions twice (re-activating the parked runs moved): the
//! harness waits for the inbox to empty after each operation, and for the leases
//! to even out after a restart, before it checks.
//!
//! `REEL_MODEL_CASES` sets the number of sequences (default 60 for one host, 20 for
//! two: about 30 s together in a debug build), `REEL_MODEL_OPS` the longest
//! sequence (default 40).

#[path = "../../tests/common/op_model.rs"]
mod op_model;
#[path = "../../tests/common/op_workflows.rs"]
mod op_workflows;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use op_model::{ALL, End, How, Model, Op, St, Want, Wf, op};
use op_workflows::*;
use proptest::collection::vec;
use proptest::prelude::*;
use reel::testing::TestClock;
use reel::{Error, Event, Host, HostBuilder, RunFilter, StatusKind};

/// A safety net for each wait (multi-host: inbox polls, rebalances after restarts).
const LIMIT: Duration = Duration::from_secs(20);
const NAP: Duration = Duration::from_secs(3600);

async fn within<F: std::future::Future>(what: &str, fut: F) -> Result<F::Output, String> {
    tokio::time::timeout(LIMIT, fut)
        .await
        .map_err(|_| format!("timed out after {LIMIT:?} waiting for {what}"))
}

// ---------------------------------------------------------------------------------
// The hosts (the workflows and checks: `tests/common/op_workflows.rs`).

fn registered(b: HostBuilder, clock: &TestClock) -> HostBuilder {
    b.clock(clock.clone())
        .register(Steps)
        .register(Sleeper)
        .register(Parent)
        .register(Crashy)
        .restart_limit(0, Duration::from_secs(30))
}

// ---------------------------------------------------------------------------------
// The harness (checks as in tests/operations_follow_a_model.rs, through every host).

/// The run whose log an answer must leave untouched.
fn untouched(want: Want, op: &Op) -> Option<&'static str> {
    match want {
        Want::Ok | Want::UnknownOrExists(..) | Want::Blocks => None,
        Want::OkNoChange => match *op {
            Op::Start { run, .. }
            | Op::Signal { run, .. }
            | Op::Cancel { run, .. }
            | Op::Pause { run }
            | Op::Resume { run }
            | Op::Retry { run }
            | Op::Delete { run } => Some(run),
            Op::Fork { to, .. } => Some(to),
            Op::AdvanceClock | Op::Restart | Op::ResultAs { .. } => None,
        },
        Want::Unknown(id)
        | Want::Invalid(id, _)
        | Want::Finished(id)
        | Want::Exists(id, _)
        | Want::Mismatch(id, ..) => Some(id),
    }
}

struct Harness {
    url: String,
    clock: TestClock,
    hosts: Vec<Host>,
    /// Joined hosts (`PgStore::join`) rather than one `HostBuilder::postgres`.
    joined: bool,
    restarts: u32,
    /// A session on the database, to see the hosts' inbox (two hosts only).
    db: Option<tokio_postgres::Client>,
}

async fn open(url: &str, name: Option<&str>, clock: &TestClock) -> anyhow::Result<Host> {
    let b = match name {
        Some(name) => support::hosts::joined(url, name).await?,
        None => Host::builder().postgres(url),
    };
    Ok(registered(b, clock).build().await?)
}

impl Harness {
    async fn perform(
        &mut self,
        op: &Op,
        want: Want,
        via: usize,
    ) -> anyhow::Result<reel::Result<()>> {
        let host = &self.hosts[via];
        let got = match *op {
            Op::Start { run, wf, input } => match wf {
                Wf::Steps => host.start::<Steps>(run, input).await.map(drop),
                Wf::Sleeper => host.start::<Sleeper>(run, input).await.map(drop),
                Wf::Parent => host.start::<Parent>(run, input).await.map(drop),
                Wf::Crashy => host.start::<Crashy>(run, input).await.map(drop),
            },
            Op::Signal { run, value, sid } => {
                host.run(run).signal("go", &value, &format!("s{sid}")).await
            }
            Op::Cancel { run, how } => match how {
                How::Cancel => host.run(run).cancel("operator").await,
                How::Request => host.run(run).request_cancel("operator").await,
                How::Terminate => host.run(run).terminate("operator").await,
            },
            Op::Pause { run } => host.run(run).pause().await,
            Op::Resume { run } => host.run(run).resume().await,
            Op::Retry { run } => host.run(run).retry().await,
            Op::Delete { run } => host.run(run).delete().await,
            Op::Fork { from, to } => {
                let at = match host.run(from).records().await {
                    Ok(records) => records.first().map_or(1, |r| r.seq + 1),
                    Err(_) => 1,
                };
                host.fork(from, at, to).await.map(drop)
            }
            Op::AdvanceClock => {
                self.clock.advance(NAP);
                Ok(())
            }
            Op::ResultAs { .. } if want == Want::Blocks => Ok(()),
            Op::ResultAs { run, wf } => {
                let typed = match wf {
                    Wf::Steps => host.handle::<Steps>(run).result().await,
                    Wf::Sleeper => host.handle::<Sleeper>(run).result().await,
                    Wf::Parent => host.handle::<Parent>(run).result().await,
                    Wf::Crashy => host.handle::<Crashy>(run).result().await,
                };
                match typed {
                    Err(e @ (Error::WorkflowMismatch { .. } | Error::UnknownRun(_))) => Err(e),
                    typed => match host.run(run).result::<u32>().await {
                        untyped if untyped == typed => Ok(()),
                        untyped => Err(Error::failed(format!(
                            "typed result {typed:?}, untyped {untyped:?}"
                        ))),
                    },
                }
            }
            Op::Restart => {
                self.hosts[via].shutdown().await?;
                self.restarts += 1;
                let name = format!("host-{via}-{}", self.restarts);
                let name = self.joined.then_some(name.as_str());
                self.hosts[via] = open(&self.url, name, &self.clock).await?;
                Ok(())
            }
        };
        Ok(got)
    }

    /// Waits until the hosts' inbox is empty: an operation sent through a host
    /// that does not own its run is answered once it is in the owner's inbox
    /// (README, "Several hosts on one database"); its effects begin once the owner
    /// has applied (and so removed) the letter.
    async fn inbox_applied(&self) -> Check {
        let Some(db) = &self.db else {
            return Ok(());
        };
        within("the owners to apply their inbox", async {
            loop {
                let row = (db.query_one("SELECT count(*) FROM reel_inbox", &[]).await)
                    .map_err(|e| e.to_string())?;
                if row.get::<_, i64>(0) == 0 {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .and_then(|r| r)
    }

    /// Waits until the two hosts hold 128 partitions each: after a restart the
    /// other host takes the leases given back, then gives half back to the new
    /// host; each move re-activates the parked runs moved (as a host opening the
    /// store does), so the model holds again once the leases are still.
    async fn rebalanced(&self) -> Check {
        let Some(db) = &self.db else {
            return Ok(());
        };
        let sql = "SELECT count(*) FROM reel_leases WHERE owner IS NOT NULL GROUP BY owner";
        within("the leases to even out", async {
            loop {
                let rows = db.query(sql, &[]).await.map_err(|e| e.to_string())?;
                if rows.len() == 2 && rows.iter().all(|r| r.get::<_, i64>(0) == 128) {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .and_then(|r| r)
    }

    async fn log_len(&self, id: &str) -> Vec<Option<usize>> {
        let mut lens = Vec::new();
        for h in &self.hosts {
            lens.push(h.run(id).events().await.ok().map(|e| e.len()));
        }
        lens
    }

    async fn settle(&self, before: &Model, after: &Model) -> Check {
        for (i, host) in self.hosts.iter().enumerate() {
            self.settle_on(host, before, after)
                .await
                .map_err(|e| format!("through host {i}: {e}"))?;
        }
        Ok(())
    }

    /// Waits until every run stands where `after` says as `host` reads it, checking
    /// each status seen on the way; then checks logs, results, counts and listings.
    async fn settle_on(&self, host: &Host, before: &Model, after: &Model) -> Check {
        for id in ALL {
            let prev = before.runs.get(id).map(|r| r.st);
            let want = after.runs.get(id).map(|r| r.st.kind());
            let run = host.run(id);
            let deadline = tokio::time::Instant::now() + LIMIT;
            loop {
                let got = run.status().await;
                match (&got, want) {
                    (Err(Error::UnknownRun(_)), None) => break,
                    (Err(Error::UnknownRun(_)), Some(_)) if prev.is_none() => {}
                    (Ok(s), Some(k)) => {
                        allowed(id, prev, k, s)?;
                        if s.kind() == k {
                            break;
                        }
                    }
                    _ => return Err(format!("`{id}`: status {got:?}, the model says {want:?}")),
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!(
                        "`{id}`: still {got:?} after {LIMIT:?}, want {want:?}"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        // What woke a paused run is recorded in the background: wait for it.
        for (id, r) in &after.runs {
            if r.st != St::Paused || r.wake.is_none() {
                continue;
            }
            let woke: fn(&Event) -> bool = match r.wf {
                Wf::Parent => |e| matches!(e, Event::ChildCompleted { .. }),
                Wf::Sleeper => |e| matches!(e, Event::TimerFired { .. }),
                Wf::Steps | Wf::Crashy => |e| matches!(e, Event::SignalReceived { .. }),
            };
            let run = host.run(id);
            within("the wake-up in a paused run's log", async {
                loop {
                    match run.events().await {
                        Ok(events) if events.iter().any(woke) => return Ok(()),
                        Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                        Err(e) => return Err(e.to_string()),
                    }
                }
            })
            .await
            .and_then(|r| r)
            .map_err(|e| format!("`{id}`: {e}"))?;
        }
        // One life per log.
        for id in after.runs.keys() {
            let events = host.run(id).events().await.map_err(|e| e.to_string())?;
            let starts = (events.iter())
                .filter(|e| matches!(e, Event::RunStarted { .. }))
                .count();
            if starts != 1 || !matches!(events.first(), Some(Event::RunStarted { .. })) {
                return Err(format!("`{id}`: a log of {starts} lives: {events:?}"));
            }
        }
        for (id, r) in &after.runs {
            let end = match r.st {
                St::Done(end) => Some(end),
                St::Parked => None,
                St::Waiting | St::Paused => continue,
            };
            let got = within("a result", host.run(id).result::<u32>()).await?;
            let ok = match (end, &got) {
                (Some(End::Completed(v)), Ok(w)) => v == *w,
                (Some(End::Failed), Err(Error::Failed(m))) => m.starts_with("kid cancelled"),
                (Some(End::Cancelled), Err(Error::Cancelled(_))) => true,
                (None, Err(Error::Crashed(m))) => m.contains(CRASH),
                _ => false,
            };
            if !ok {
                return Err(format!("`{id}`: result {got:?}, the model says {end:?}"));
            }
        }
        // A parked run moved to another host with its partition is retried there
        // (it shows `Running` until it parks again): the counts and listings
        // must come to agree with the model, not at one instant.
        let deadline = std::time::Instant::now() + LIMIT;
        loop {
            match listings_agree(host, after).await {
                Err(_) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                agreed => return agreed,
            }
        }
    }
}

async fn listings_agree(host: &Host, model: &Model) -> Check {
    let e = |e: Error| e.to_string();
    let counts = host.count().await.map_err(e)?;
    let mut counted: BTreeMap<StatusKind, u64> = StatusKind::ALL.iter().map(|k| (*k, 0)).collect();
    counted.extend(counts);
    if counted != model.counts() {
        return Err(format!(
            "count() {counted:?}, the model has {:?}",
            model.counts()
        ));
    }
    let mut listed = BTreeMap::new();
    let mut filter = RunFilter::default().limit(4);
    loop {
        let page = host.list(filter.clone()).await.map_err(e)?;
        for info in page.items {
            if (listed.insert(info.run_id.clone(), (info.status.kind(), info.workflow))).is_some() {
                return Err(format!("list() shows `{}` twice", info.run_id));
            }
        }
        match page.next {
            Some(next) => filter = filter.after(Some(next)),
            None => break,
        }
    }
    if listed != model.statuses() {
        return Err(format!(
            "list() {listed:?}, the model has {:?}",
            model.statuses()
        ));
    }
    let runs: BTreeMap<_, _> = (host.runs().await.map_err(e)?)
        .into_iter()
        .map(|i| (i.run_id, (i.status.kind(), i.workflow)))
        .collect();
    if runs != model.statuses() {
        return Err(format!(
            "runs() {runs:?}, the model has {:?}",
            model.statuses()
        ));
    }
    Ok(())
}

/// One step of a sequence: the operation and the host it goes through.
type Step = (Op, usize);

async fn run_ops(h: &mut Harness, ops: &[Step]) -> Check {
    let mut model = Model::default();
    for (i, (op, via)) in ops.iter().enumerate() {
        let via = via % h.hosts.len();
        let at = |e: String| format!("#{i} {op:?} via host {via}: {e}");
        let before = model.clone();
        let want = model.apply(op);
        let quiet = untouched(want, op);
        let len_before = match quiet {
            Some(id) => h.log_len(id).await,
            None => Vec::new(),
        };
        let got = within("the operation", h.perform(op, want, via))
            .await
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(at)?;
        check_answer(want, &got).map_err(at)?;
        if matches!(op, Op::Restart) {
            h.rebalanced().await.map_err(at)?;
        }
        h.inbox_applied().await.map_err(at)?;
        h.settle(&before, &model).await.map_err(at)?;
        if let Some(id) = quiet {
            let len_after = h.log_len(id).await;
            if len_after != len_before {
                return Err(at(format!(
                    "`{id}`'s log went from {len_before:?} to {len_after:?} events"
                )));
            }
        }
    }
    Ok(())
}

/// Drops a case's database (connections forced out), so that hundreds of cases
/// do not fill the disk. Best effort.
async fn drop_database(url: &str) {
    let Some((_, name)) = url.rsplit_once('/') else {
        return;
    };
    let admin = format!("{}/postgres", support::cluster().base);
    if let Ok((client, conn)) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await {
        let task = tokio::spawn(conn);
        let _ =
            (client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))).await;
        drop(client);
        let _ = task.await;
    }
}

async fn run_case(hosts: usize, ops: &[Step]) -> Check {
    let url = support::database(if hosts == 1 { "model_one" } else { "model_two" }).await;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let verdict = async {
        let opened = if hosts == 1 {
            vec![open(&url, None, &clock).await.map_err(|e| e.to_string())?]
        } else {
            let (hs, _) = support::hosts::spread::<2>(&url, 100, async |u: &str, n: &str| {
                open(u, Some(n), &clock).await
            })
            .await
            .map_err(|e| e.to_string())?;
            hs.into()
        };
        let db = if hosts > 1 {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Some(client)
        } else {
            None
        };
        let mut h = Harness {
            db,
            url: url.clone(),
            clock: clock.clone(),
            hosts: opened,
            joined: hosts > 1,
            restarts: 0,
        };
        let verdict = run_ops(&mut h, ops).await;
        let mut closed = Ok(());
        for (i, host) in h.hosts.iter().enumerate() {
            let c = within("shutdown", host.shutdown()).await;
            if closed.is_ok() {
                closed = c.and_then(|r| r.map_err(|e| e.to_string()));
                closed = closed.map_err(|e| format!("shutdown of host {i}: {e}"));
            }
        }
        verdict.and(closed)
    }
    .await;
    drop_database(&url).await;
    verdict
}

fn one_case(hosts: usize, ops: &[Step]) -> Check {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(run_case(hosts, ops))
}

fn listing(ops: &[Step], hosts: usize) -> String {
    (ops.iter().enumerate())
        .map(|(i, (op, via))| format!("  #{i} {op:?} via host {}\n", via % hosts))
        .collect()
}

fn follow_the_model(hosts: usize, default_cases: usize) {
    let config = ProptestConfig {
        cases: u32::try_from(env_or("REEL_MODEL_CASES", default_cases)).unwrap_or(u32::MAX),
        failure_persistence: None,
        max_shrink_time: 600_000,
        ..ProptestConfig::default()
    };
    quiet_expected_panics();
    let started = std::time::Instant::now();
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let steps = vec((op(), 0..hosts), 1..=env_or("REEL_MODEL_OPS", 40));
    let first: std::cell::RefCell<Option<String>> = std::cell::RefCell::new(None);
    let verdict = runner.run(&steps, |ops| {
        one_case(hosts, &ops).map_err(|why| {
            (first.borrow_mut()).get_or_insert_with(|| format!("{}{why}", listing(&ops, hosts)));
            TestCaseError::fail(why)
        })
    });
    eprintln!("{hosts} host(s): done in {:?}", started.elapsed());
    match verdict {
        Ok(()) => {}
        Err(proptest::test_runner::TestError::Fail(why, ops)) => {
            let again = one_case(hosts, &ops)
                .err()
                .unwrap_or_else(|| "passed".into());
            let first = first.into_inner().unwrap_or_default();
            panic!(
                "shrunk failing sequence:\n{}{why}\nrun again: {again}\n\
                 first failing sequence:\n{first}",
                listing(&ops, hosts)
            );
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn one_host_follows_the_model() {
    follow_the_model(1, 60);
}

#[test]
fn two_hosts_follow_the_model() {
    follow_the_model(2, 20);
}

// ---------------------------------------------------------------------------------
// Bugs found by the model, as deterministic tests.

/// Found by `two_hosts_follow_the_model` (shrunk: `Start r0 Parent`, `Cancel r0`,
/// `Delete r0`, `Start r0 Steps`, all through host 1; `r0` owned by host 0):
/// a run started through a non-owner on the id of a deleted, cancelled parent
/// stays `Running` with only `RunStarted` in its log; it never reaches its
/// signal wait (through the owner, or with a `Steps` in the first life, it does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_a_deleted_parents_id_started_through_a_non_owner_runs() -> anyhow::Result<()> {
    use support::hosts::{cancelled, owned_by, spread, suspended, until_status};
    let url = support::database("model_reuse_parent").await;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let (hosts, owners) = spread::<2>(&url, 100, async |u: &str, n: &str| {
        open(u, Some(n), &clock).await
    })
    .await?;
    let id = &owned_by(&owners, 0, "p", 1)[0];
    let kid = format!("{id}-kid");
    let via = &hosts[1];
    via.start::<Parent>(id, 3).await?;
    until_status(via, &kid, "waited for its signal", suspended).await;
    via.run(id).cancel("operator").await?;
    until_status(via, &kid, "was cancelled with its parent", cancelled).await;
    via.run(id).delete().await?;
    via.start::<Steps>(id, 3).await?;
    // Fails here: `p-…` stays Running, its log [RunStarted].
    until_status(via, id, "waited for its signal", suspended).await;
    support::hosts::shutdown_all(hosts).await
}

/// Found by `two_hosts_follow_the_model` (shrunk: `Start r0 Parent` via host 0,
/// `Cancel r0` via host 1, `Delete r0` via host 0, `Start r0 Parent` via host 1):
/// the new parent calls the same child id at the same wait as the old one did,
/// that child already cancelled; the owner still held the old parent's
/// subscription to it ("already started"), so the new parent never heard its end
/// and waited for ever instead of failing with the child's cancellation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_parent_under_a_deleted_parents_id_hears_the_old_childs_end() -> anyhow::Result<()> {
    use support::hosts::{cancelled, owned_by, spread, suspended, until_status};
    let url = support::database("model_reuse_parent_child").await;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let (hosts, owners) = spread::<2>(&url, 100, async |u: &str, n: &str| {
        open(u, Some(n), &clock).await
    })
    .await?;
    for id in owned_by(&owners, 0, "q", 3) {
        let kid = format!("{id}-kid");
        hosts[0].start::<Parent>(&id, 3).await?;
        until_status(&hosts[0], &kid, "waited for its signal", suspended).await;
        hosts[1].run(&id).cancel("operator").await?;
        until_status(&hosts[1], &id, "was cancelled", cancelled).await;
        until_status(&hosts[1], &kid, "was cancelled with its parent", cancelled).await;
        hosts[0].run(&id).delete().await?;
        hosts[1].start::<Parent>(&id, 0).await?;
        // The child it calls is the old one, cancelled: the parent fails.
        until_status(&hosts[1], &id, "failed on its cancelled child", |s| {
            matches!(s, reel::RunStatus::Failed { .. })
        })
        .await;
    }
    support::hosts::shutdown_all(hosts).await
}
