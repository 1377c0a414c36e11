//! The interpreter: a workflow that runs a [`Node`] and returns the trace of what
//! its handler observed.

use std::collections::BTreeMap;
use std::future::ready;
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use reel::{Ctx, Error, RetryPolicy, Workflow};

use super::program::{Node, Program, begins, child_run_id, root_path};
use super::{lock, ms};

/// What one execution of a handler observed, in order.
pub(crate) type Trace = Arc<Mutex<Vec<String>>>;
/// The traces of every execution of one run, in order.
pub(crate) type Executions = Arc<Mutex<Vec<Trace>>>;

/// Executions of the runs on the test's hosts, by run id.
pub(crate) static LIVE_EXECUTIONS: Mutex<BTreeMap<String, Executions>> =
    Mutex::new(BTreeMap::new());
/// How often each step body returned `Ok`, by idempotency key (`run id/step id`).
pub(crate) static BODY_COMPLETIONS: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

pub(crate) fn executions_of(run_id: &str) -> Executions {
    lock(&LIVE_EXECUTIONS)
        .entry(run_id.to_owned())
        .or_default()
        .clone()
}

/// What the handler saw last in an execution: its whole trace.
pub(crate) fn last_trace(executions: &Executions) -> Option<Vec<String>> {
    lock(executions).last().map(|t| lock(t).clone())
}

/// Interprets a [`Node`]; its output is the trace of what the handler observed.
#[derive(Clone, Default)]
pub(crate) struct Interp {
    /// Where executions record their traces; `None`: [`LIVE_EXECUTIONS`].
    pub(crate) sink: Option<Executions>,
}

impl Workflow for Interp {
    const NAME: &'static str = "interp";
    type Input = Program;
    type Output = Vec<String>;

    async fn run(&self, ctx: Ctx, input: Program) -> reel::Result<Vec<String>> {
        // The trace goes on from the earlier segments'.
        let trace = Trace::new(Mutex::new(input.before.clone()));
        let k = input.segment;
        if k > 0 {
            note(&trace, begins(k));
        }
        let sink = match &self.sink {
            Some(s) => s.clone(),
            None => executions_of(ctx.run_id()),
        };
        lock(&sink).push(trace.clone());
        let input = Arc::new(input);
        let cx = Cx {
            ctx,
            run: Arc::from(input.run.as_str()),
            trace: trace.clone(),
            biased: input.biased_races,
            input: input.clone(),
        };
        let root = root_path(k);
        let mut result = Ok(());
        if let (true, Some(prologue)) = (k > 0, &input.prologue) {
            result = eval(&cx, prologue, &format!("s{k}p")).await;
        }
        if result.is_ok() {
            result = eval(&cx, &input.root, &root).await;
        }
        if result.is_ok() && k < input.segments {
            result = continue_as_new(&cx, &root).await;
        }
        match result {
            Ok(()) => {}
            Err(Error::Cancelled(reason)) if input.complete_on_cancel => {
                note(
                    &trace,
                    format!("{root} completes after the cancel ({reason})"),
                );
            }
            Err(e) => {
                note(&trace, format!("{root} ends with {e}"));
                return Err(e);
            }
        }
        let observed = lock(&trace).clone();
        Ok(observed)
    }
}

/// `ctx.continue_as_new` with the next segment's input (the trace so far), if the
/// run has segments left. It never returns `Ok` when called: the handler ends, or
/// the run has seen a cancel request (`Error::Cancelled`, recorded).
fn continue_as_new(cx: &Cx, path: &str) -> BoxFuture<'static, reel::Result<()>> {
    let input = &cx.input;
    if input.segment >= input.segments {
        return Box::pin(ready(Ok(())));
    }
    let next = Program {
        before: lock(&cx.trace).clone(),
        segment: input.segment + 1,
        ..(**input).clone()
    };
    let call = cx.ctx.continue_as_new::<Interp>(next);
    let (t, path) = (cx.trace.clone(), path.to_owned());
    Box::pin(async move {
        let out = call
            .await
            .map_err(|e| seen(&t, &path, "continue_as_new", e))?;
        note(&t, format!("{path} continue_as_new returned {out:?}"));
        Ok(())
    })
}

/// What a handler evaluates a node with.
#[derive(Clone)]
struct Cx {
    ctx: Ctx,
    run: Arc<str>,
    trace: Trace,
    biased: bool,
    /// The run's input (its segment and how many it has).
    input: Arc<Program>,
}

fn note(trace: &Trace, what: String) {
    lock(trace).push(what);
}

/// Records where the handler saw a cancellation error, and passes the error on.
fn seen(t: &Trace, path: &str, what: &str, e: Error) -> Error {
    if let Error::Cancelled(reason) = &e {
        note(t, format!("{path} {what} cancelled ({reason})"));
    }
    e
}

/// Builds the future of `node`. Every primitive a node can call without waiting for
/// an earlier result is called here, eagerly, in tree order (the first child of a
/// `seq` included), so that ids never depend on the order futures are first polled
/// in (`tokio::select!` polls its branches in random order): the handler itself is
/// deterministic, and any difference between executions comes from what reel hands
/// it. Instant nodes note what they see here too.
fn eval(cx: &Cx, node: &Node, path: &str) -> BoxFuture<'static, reel::Result<()>> {
    let (ctx, t) = (&cx.ctx, cx.trace.clone());
    let path = path.to_owned();
    match node {
        Node::Step {
            name,
            yields,
            body_sleep_ms,
            fail_first,
            backoff_ms,
        } => step(
            cx,
            name,
            *yields,
            *body_sleep_ms,
            *fail_first,
            *backoff_ms,
            path,
        ),
        Node::Sleep { ms: d } => {
            let sleep = ctx.sleep(ms(*d));
            Box::pin(async move {
                sleep.await.map_err(|e| seen(&t, &path, "sleep", e))?;
                note(&t, format!("{path} slept"));
                Ok(())
            })
        }
        Node::Wait { name } => {
            let wait = ctx.wait_for_signal::<u32>(name);
            let name = name.clone();
            Box::pin(async move {
                let v = wait.await.map_err(|e| seen(&t, &path, "wait", e))?;
                note(&t, format!("{path} signal {name} -> {v}"));
                Ok(())
            })
        }
        Node::WaitTimeout { name, ms: d } => {
            let wait = ctx.wait_for_signal_timeout::<u32>(name, ms(*d));
            let name = name.clone();
            Box::pin(async move {
                match wait.await.map_err(|e| seen(&t, &path, "timed wait", e))? {
                    Some(v) => note(&t, format!("{path} signal {name} -> {v}")),
                    None => note(&t, format!("{path} signal {name} timed out")),
                }
                Ok(())
            })
        }
        Node::Approval { name } => {
            let wait = ctx.approval(name);
            let name = name.clone();
            Box::pin(async move {
                let a = wait.await.map_err(|e| seen(&t, &path, "approval", e))?;
                note(
                    &t,
                    format!("{path} approval {name} -> {} {:?}", a.approved, a.feedback),
                );
                Ok(())
            })
        }
        Node::Now => {
            let now = ctx.now();
            Box::pin(async move {
                let at = now.await?;
                let at = at
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis();
                note(&t, format!("{path} now -> {at}"));
                Ok(())
            })
        }
        Node::Uuid => {
            let uuid = ctx.uuid();
            Box::pin(async move {
                let u = uuid.await?;
                note(&t, format!("{path} uuid -> {u}"));
                Ok(())
            })
        }
        Node::Random => {
            let random = ctx.random_u64();
            Box::pin(async move {
                let r = random.await?;
                note(&t, format!("{path} random -> {r}"));
                Ok(())
            })
        }
        Node::Child {
            program,
            complete_on_cancel,
        } => {
            let run = child_run_id(&cx.run, &path);
            let input = Program {
                run: run.clone(),
                root: (**program).clone(),
                complete_on_cancel: *complete_on_cancel,
                biased_races: cx.biased,
                segments: 0,
                segment: 0,
                before: Vec::new(),
                prologue: None,
            };
            let child = ctx.child::<Interp>(&run, input);
            Box::pin(async move {
                let out = child.await.map_err(|e| seen(&t, &path, "child", e))?;
                note(&t, format!("{path} child -> [{}]", out.join("; ")));
                Ok(())
            })
        }
        Node::IsCancelled => {
            note(&t, format!("{path} is_cancelled -> {}", ctx.is_cancelled()));
            Box::pin(ready(Ok(())))
        }
        Node::Patched { id } => {
            note(&t, format!("{path} patched {id} -> {}", ctx.patched(id)));
            Box::pin(ready(Ok(())))
        }
        Node::Publish { key } => {
            let published = ctx.publish(key, &path);
            let key = key.clone();
            Box::pin(async move {
                published.await?;
                note(&t, format!("{path} published {key}"));
                Ok(())
            })
        }
        Node::Cancelled => {
            let cancelled = ctx.cancelled();
            Box::pin(async move {
                let reason = cancelled.await;
                note(&t, format!("{path} saw the cancel ({reason})"));
                Ok(())
            })
        }
        Node::ContinueAsNew => continue_as_new(cx, &path),
        Node::Guard {
            body,
            cleanup,
            resume,
        } => {
            let body = eval(cx, body, &format!("{path}.0"));
            let shielded = Cx {
                ctx: ctx.shielded(),
                ..cx.clone()
            };
            let (cleanup, resume) = ((**cleanup).clone(), *resume);
            Box::pin(async move {
                let reason = match body.await {
                    Err(Error::Cancelled(reason)) => reason,
                    other => return other,
                };
                note(&t, format!("{path} cleans up"));
                eval(&shielded, &cleanup, &format!("{path}.c")).await?;
                if resume {
                    note(&t, format!("{path} resumes after the cancel"));
                    return Ok(());
                }
                Err(Error::Cancelled(reason))
            })
        }
        Node::Seq(children) => {
            let first = children.first().map(|c| eval(cx, c, &format!("{path}.0")));
            let rest = children.iter().skip(1).cloned().collect::<Vec<_>>();
            let cx = cx.clone();
            Box::pin(async move {
                if let Some(first) = first {
                    first.await?;
                }
                for (i, c) in rest.iter().enumerate() {
                    eval(&cx, c, &format!("{path}.{}", i + 1)).await?;
                }
                Ok(())
            })
        }
        Node::Join(children) => {
            let branches = children
                .iter()
                .enumerate()
                .map(|(i, c)| eval(cx, c, &format!("{path}.{i}")))
                .collect::<Vec<_>>();
            Box::pin(async move {
                futures::future::try_join_all(branches).await?;
                note(&t, format!("{path} joined"));
                Ok(())
            })
        }
        Node::Unordered(children) => {
            let mut branches = children
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let branch = eval(cx, c, &format!("{path}.{i}"));
                    async move { (i, branch.await) }
                })
                .collect::<FuturesUnordered<_>>();
            Box::pin(async move {
                let mut order = Vec::new();
                while let Some((i, done)) = branches.next().await {
                    done?;
                    order.push(i);
                }
                note(&t, format!("{path} unordered finished in order {order:?}"));
                Ok(())
            })
        }
        Node::Select(children) => {
            let branches = children
                .iter()
                .enumerate()
                .map(|(i, c)| eval(cx, c, &format!("{path}.{i}")))
                .collect::<Vec<_>>();
            Box::pin(async move {
                if branches.is_empty() {
                    return Ok(());
                }
                let (won, i, losers) = futures::future::select_all(branches).await;
                drop(losers);
                won?;
                note(&t, format!("{path} select won by {i}"));
                Ok(())
            })
        }
        Node::Race(a, b) => {
            let a = eval(cx, a, &format!("{path}.0"));
            let b = eval(cx, b, &format!("{path}.1"));
            let biased = cx.biased;
            Box::pin(async move {
                let (i, won) = if biased {
                    tokio::select! {
                        biased;
                        r = a => (0, r),
                        r = b => (1, r),
                    }
                } else {
                    tokio::select! {
                        r = a => (0, r),
                        r = b => (1, r),
                    }
                };
                won?;
                note(&t, format!("{path} race won by {i}"));
                Ok(())
            })
        }
    }
}

/// A step node: see [`Node::Step`].
fn step(
    cx: &Cx,
    name: &str,
    yields: u8,
    body_sleep_ms: u8,
    fail_first: u8,
    backoff_ms: u8,
    path: String,
) -> BoxFuture<'static, reel::Result<()>> {
    let policy = RetryPolicy {
        max_attempts: 3,
        initial_backoff: ms(backoff_ms),
        max_backoff: ms(backoff_ms),
        multiplier: 1.0,
    };
    let fail_first = u32::from(fail_first);
    let label = name.to_owned();
    let step = cx.ctx.step_with(name, policy, move |s| {
        let label = label.clone();
        async move {
            for _ in 0..yields {
                tokio::task::yield_now().await;
            }
            let mut stopped = String::new();
            if body_sleep_ms > 0 {
                tokio::select! {
                    () = tokio::time::sleep(ms(body_sleep_ms)) => {}
                    reason = s.cancelled() => stopped = format!(" stopped early ({reason})"),
                }
            }
            if s.attempt() <= fail_first {
                return Err(format!("attempt {} fails", s.attempt()));
            }
            *lock(&BODY_COMPLETIONS)
                .entry(s.idempotency_key().to_owned())
                .or_default() += 1;
            Ok(format!("{label}@{}{stopped}", s.attempt()))
        }
    });
    let (t, name) = (cx.trace.clone(), name.to_owned());
    Box::pin(async move {
        match step.await {
            Ok(v) => note(&t, format!("{path} step {name} -> {v}")),
            Err(Error::Step { step, message }) => {
                note(&t, format!("{path} step {name} failed ({step}: {message})"));
            }
            Err(e) => return Err(seen(&t, &path, &format!("step {name}"), e)),
        }
        Ok(())
    })
}
