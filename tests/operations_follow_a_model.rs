//! Random sequences of operator calls agree with a model of the contract.
//!
//! A proptest drives sequences of up to 40 operations (`start`, `signal` with
//! reused signal ids, `cancel`, `pause`, `resume`, `retry`, `delete`, `Host::fork`,
//! a typed `result()`, moving the `TestClock`, and host restarts on the same
//! fjall directory) against six run ids (three top-level ids and their children's
//! ids) and four small workflows: steps around a signal wait, a step then a
//! durable timer, a parent waiting on a child, and one that crashes and parks.
//! After each operation it checks, against a model of what the docs promise
//! (DESIGN.md, the README, the methods' doc comments; `tests/common/op_model.rs`):
//!
//! - each answer: `Ok`, or the documented typed error (`UnknownRun`,
//!   `InvalidState` naming the run and its state, `RunFinished`, `RunExists`
//!   naming the workflow holding the id, `WorkflowMismatch`);
//! - a refused or "does nothing" operation leaves the run's log as it was;
//! - every status seen moves only along allowed transitions (a finished run
//!   keeps its end, a paused run stays paused until resumed or cancelled, only
//!   the crashing workflow parks) and settles where the model says: cancelled,
//!   paused, resumed and retried runs end as documented, wake-ups that reach a
//!   paused run apply on resume, a cancelled parent cancels its own child;
//! - a finished run's `result()` (typed and untyped) is the model's, and stays;
//! - a deleted id is unknown at once, and a run started on it starts from
//!   nothing (one `RunStarted` in its log; signal ids it used are new again);
//! - `count()`, every page of `list()`, and `runs()` agree with the statuses.
//!
//! A failure prints the shrunk sequence, and the first failing one.
//! `REEL_MODEL_CASES` sets the number of sequences (default 200, about 20 s in a
//! debug build); `REEL_MODEL_OPS` the longest sequence (default 40).

mod common;
#[path = "common/op_model.rs"]
mod op_model;
#[path = "common/op_workflows.rs"]
mod op_workflows;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use common::within;
use op_model::{ALL, End, How, Model, Op, St, Want, Wf, op};
use op_workflows::*;
use proptest::collection::vec;
use proptest::prelude::*;
use reel::testing::TestClock;
use reel::{Error, Event, Host, HostBuilder, RunFilter, StatusKind};

const LIMIT: Duration = Duration::from_secs(10);
const NAP: Duration = Duration::from_secs(3600);

// ---------------------------------------------------------------------------------
// The host (the workflows and checks: `tests/common/op_workflows.rs`).

fn builder(path: &Path, clock: &TestClock) -> HostBuilder {
    Host::builder()
        .path(path)
        .clock(clock.clone())
        .register(Steps)
        .register(Sleeper)
        .register(Parent)
        .register(Crashy)
        .restart_limit(0, Duration::from_secs(30))
}

// ---------------------------------------------------------------------------------
// The harness.

/// The run whose log an answer must leave untouched.
fn untouched(want: Want) -> Option<&'static str> {
    match want {
        Want::Ok | Want::UnknownOrExists(..) | Want::Blocks => None,
        Want::OkNoChange => Some(""),
        Want::Unknown(id)
        | Want::Invalid(id, _)
        | Want::Finished(id)
        | Want::Exists(id, _)
        | Want::Mismatch(id, ..) => Some(id),
    }
}

fn target(op: &Op) -> Option<&'static str> {
    match *op {
        Op::Start { run, .. }
        | Op::Signal { run, .. }
        | Op::Cancel { run, .. }
        | Op::Pause { run }
        | Op::Resume { run }
        | Op::Retry { run }
        | Op::Delete { run } => Some(run),
        Op::Fork { to, .. } => Some(to),
        Op::AdvanceClock | Op::Restart | Op::ResultAs { .. } => None,
    }
}

struct Harness {
    dir: tempfile::TempDir,
    clock: TestClock,
    host: Host,
}

impl Harness {
    async fn perform(&mut self, op: &Op, want: Want) -> anyhow::Result<reel::Result<()>> {
        let host = &self.host;
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
                // The cut right after `RunStarted`: a primitive boundary in every log.
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
                    // The settling checks the untyped result against the model.
                    typed => match host.run(run).result::<u32>().await {
                        untyped if untyped == typed => Ok(()),
                        untyped => Err(Error::failed(format!(
                            "typed result {typed:?}, untyped {untyped:?}"
                        ))),
                    },
                }
            }
            Op::Restart => {
                host.shutdown().await?;
                self.host = builder(self.dir.path(), &self.clock).build().await?;
                Ok(())
            }
        };
        Ok(got)
    }

    async fn log_len(&self, id: &str) -> Option<usize> {
        self.host.run(id).events().await.ok().map(|e| e.len())
    }

    /// Waits until every run stands where `after` says, checking each status seen
    /// on the way against the transitions allowed from `before`; then checks
    /// results, counts and listings.
    async fn settle(&self, before: &Model, after: &Model) -> Check {
        for id in ALL {
            let prev = before.runs.get(id).map(|r| r.st);
            let want = after.runs.get(id).map(|r| r.st.kind());
            let run = self.host.run(id);
            let deadline = tokio::time::Instant::now() + LIMIT;
            loop {
                let got = run.status().await;
                match (&got, want) {
                    (Err(Error::UnknownRun(_)), None) => break,
                    // A child the op created may not exist yet.
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
        // What woke a paused run is recorded (and applied on resume) in the
        // background: wait for it, so that it cannot land during the next operation.
        for (id, r) in &after.runs {
            if r.st != St::Paused || r.wake.is_none() {
                continue;
            }
            let woke: fn(&Event) -> bool = match r.wf {
                Wf::Parent => |e| matches!(e, Event::ChildCompleted { .. }),
                Wf::Sleeper => |e| matches!(e, Event::TimerFired { .. }),
                Wf::Steps | Wf::Crashy => |e| matches!(e, Event::SignalReceived { .. }),
            };
            let what = "the wake-up in a paused run's log";
            common::until_log(&self.host.handle::<Parent>(id), LIMIT, what, |events| {
                events.iter().any(woke)
            })
            .await
            .map_err(|e| format!("`{id}`: {e}"))?;
        }
        // One life per log: a run started on a deleted run's id starts from nothing.
        for id in after.runs.keys() {
            let events = self
                .host
                .run(id)
                .events()
                .await
                .map_err(|e| e.to_string())?;
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
            let got = within(LIMIT, "a result", self.host.run(id).result::<u32>())
                .await
                .map_err(|e| e.to_string())?;
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
        self.listings_agree(after).await
    }

    async fn listings_agree(&self, model: &Model) -> Check {
        let e = |e: Error| e.to_string();
        let counts = self.host.count().await.map_err(e)?;
        let mut counted: BTreeMap<StatusKind, u64> =
            StatusKind::ALL.iter().map(|k| (*k, 0)).collect();
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
            let page = self.host.list(filter.clone()).await.map_err(e)?;
            for info in page.items {
                if listed
                    .insert(info.run_id.clone(), (info.status.kind(), info.workflow))
                    .is_some()
                {
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
        let runs: BTreeMap<_, _> = (self.host.runs().await.map_err(e)?)
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
}

/// How many operations got each kind of answer, over the whole test.
static TALLY: std::sync::Mutex<BTreeMap<String, u64>> = std::sync::Mutex::new(BTreeMap::new());

fn tally(op: &Op, want: Want) {
    let head = |s: String| s.split([' ', '(']).next().unwrap_or_default().to_owned();
    let name = format!("{} {}", head(format!("{op:?}")), head(format!("{want:?}")));
    if let Ok(mut t) = TALLY.lock() {
        *t.entry(name).or_default() += 1;
    }
}

async fn run_ops(h: &mut Harness, ops: &[Op]) -> Check {
    let mut model = Model::default();
    for (i, op) in ops.iter().enumerate() {
        let at = |e: String| format!("#{i} {op:?}: {e}");
        let before = model.clone();
        let want = model.apply(op);
        let quiet = untouched(want).map(|id| {
            if id.is_empty() {
                target(op).unwrap_or("")
            } else {
                id
            }
        });
        let len_before = match quiet {
            Some(id) => h.log_len(id).await,
            None => None,
        };
        let got = within(LIMIT, "the operation", h.perform(op, want))
            .await
            .and_then(|r| r)
            .map_err(|e| at(e.to_string()))?;
        check_answer(want, &got).map_err(at)?;
        tally(op, want);
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

async fn run_case(ops: &[Op]) -> Check {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let clock = TestClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = builder(dir.path(), &clock)
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let mut h = Harness { dir, clock, host };
    let verdict = run_ops(&mut h, ops).await;
    let closed = within(LIMIT, "shutdown", h.host.shutdown()).await;
    verdict?;
    closed
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

#[test]
fn operations_follow_the_model() {
    let config = ProptestConfig {
        cases: u32::try_from(env_or("REEL_MODEL_CASES", 200)).unwrap_or(u32::MAX),
        failure_persistence: None,
        max_shrink_time: 300_000,
        ..ProptestConfig::default()
    };
    quiet_expected_panics();
    let started = std::time::Instant::now();
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let ops = vec(op(), 1..=env_or("REEL_MODEL_OPS", 40));
    let first: std::cell::RefCell<Option<String>> = std::cell::RefCell::new(None);
    let verdict = runner.run(&ops, |ops| {
        one_case(&ops).map_err(|why| {
            (first.borrow_mut()).get_or_insert_with(|| format!("{}{why}", listing(&ops)));
            TestCaseError::fail(why)
        })
    });
    let tally = TALLY.lock().map(|t| t.clone()).unwrap_or_default();
    eprintln!(
        "operations_follow_a_model: answers {tally:?} in {:?}",
        started.elapsed()
    );
    match verdict {
        Ok(()) => {}
        Err(proptest::test_runner::TestError::Fail(why, ops)) => {
            // Run the shrunk sequence again: a failure that does not come back
            // (timing) stops the shrinking early, so the first one is shown too.
            let again = one_case(&ops).err().unwrap_or_else(|| "passed".into());
            let first = first.into_inner().unwrap_or_default();
            panic!(
                "shrunk failing sequence:\n{}{why}\nrun again: {again}\n\
                 first failing sequence:\n{first}",
                listing(&ops)
            );
        }
        Err(e) => panic!("{e}"),
    }
}

fn listing(ops: &[Op]) -> String {
    (ops.iter().enumerate())
        .map(|(i, op)| format!("  #{i} {op:?}\n"))
        .collect()
}

fn one_case(ops: &[Op]) -> Check {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(run_case(ops))
}
