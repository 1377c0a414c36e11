//! Handlers that arbitrary logs are replayed against, shared by
//! `tests/replay_arbitrary_logs.rs` (proptest, stable) and
//! `fuzz/fuzz_targets/replay_log.rs` (libFuzzer), plus the property both check:
//! replaying any log returns `Ok(Completed | Failed | Pending)` or a typed error,
//! never panics and never hangs.
//!
//! Each handler uses the primitive ids the generators draw from: steps `a`, `a#2`,
//! `b`, `b#2` (retry timers `a/retry1`, ...), `timer#1`, `signal#1`, `approval#1`,
//! `now#1`, `uuid#1`, `random#1`, `child#1`, patches `p` and `q`, published key
//! `stage`.
#![allow(dead_code)]

use std::time::Duration;

use reel::testing::{Replayed, replay};
use reel::{Ctx, Error, Event, RetryPolicy, Workflow};

/// Signal names the handlers wait on (the generators draw from these too).
pub(crate) const SIGNAL_NAMES: [&str; 4] = ["go", "msg", "approval:boss", "x"];

/// Ids the handlers' primitives get.
pub(crate) const IDS: [&str; 23] = [
    "a",
    "a#2",
    "a#3",
    "b",
    "b#2",
    "a/retry1",
    "a/retry2",
    "a#2/retry1",
    "timer#1",
    "timer#2",
    "signal#1",
    "signal#2",
    "approval#1",
    "now#1",
    "uuid#1",
    "random#1",
    "child#1",
    "child#2",
    "kid",
    "replay",
    "p",
    "q",
    "stage",
];

/// Sequential steps, a sleep, a signal wait and a timed signal wait.
#[derive(Clone, Copy)]
pub(crate) struct Sequential;
impl Workflow for Sequential {
    const NAME: &'static str = "sequential";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let x: u32 = ctx
            .step("a", |_| async move { Ok::<_, String>(n + 1) })
            .await?;
        ctx.sleep(Duration::from_millis(5)).await?;
        let s: String = ctx.wait_for_signal("go").await?;
        let y: u32 = ctx
            .step("a", |_| async move { Ok::<_, String>(x * 2) })
            .await?;
        let late: Option<String> = ctx
            .wait_for_signal_timeout("msg", Duration::from_millis(5))
            .await?;
        Ok(format!("{x}|{s}|{y}|{late:?}"))
    }
}

/// A `try_join!` of two branches with two steps each.
#[derive(Clone, Copy)]
pub(crate) struct Join;
impl Workflow for Join {
    const NAME: &'static str = "join";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let left = async {
            let a: u32 = ctx.step("a", |_| async { Ok::<_, String>(1u32) }).await?;
            let b: u32 = ctx.step("a", |_| async { Ok::<_, String>(2u32) }).await?;
            Ok::<_, Error>(a + b)
        };
        let right = async {
            let a: String = ctx
                .step("b", |_| async { Ok::<_, String>("x".to_owned()) })
                .await?;
            let b: String = ctx
                .step("b", |_| async { Ok::<_, String>("y".to_owned()) })
                .await?;
            Ok::<_, Error>(a + &b)
        };
        let (l, r) = futures::try_join!(left, right)?;
        Ok(format!("{l}|{r}"))
    }
}

/// A `tokio::select!` of a timer and a signal wait, then a step.
#[derive(Clone, Copy)]
pub(crate) struct Select;
impl Workflow for Select {
    const NAME: &'static str = "select";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, input: String) -> reel::Result<String> {
        let won = tokio::select! {
            r = ctx.sleep(Duration::from_millis(5)) => { r?; "timer".to_owned() }
            s = ctx.wait_for_signal::<String>("go") => s?,
        };
        let x: String = ctx
            .step("a", |_| {
                let out = format!("{input}-{won}");
                async move { Ok::<_, String>(out) }
            })
            .await?;
        Ok(x)
    }
}

/// A loop over `step_with` with retries; a step failure is caught once.
#[derive(Clone, Copy)]
pub(crate) struct Retries;
impl Workflow for Retries {
    const NAME: &'static str = "retries";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let policy = RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
            multiplier: 2.0,
        };
        let mut total = 0u32;
        for i in 0..3u32 {
            let r = ctx
                .step_with("a", policy.clone(), move |s| async move {
                    if s.attempt() < 2 {
                        Err(format!("attempt {} fails", s.attempt()))
                    } else {
                        Ok(n.wrapping_add(i))
                    }
                })
                .await;
            match r {
                Ok(v) => total = total.wrapping_add(v),
                Err(Error::Step { .. }) if i == 0 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(total)
    }
}

/// `now`, `uuid`, `random_u64`.
#[derive(Clone, Copy)]
pub(crate) struct Recorded;
impl Workflow for Recorded {
    const NAME: &'static str = "recorded";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let t = ctx.now().await?;
        let u = ctx.uuid().await?;
        let r = ctx.random_u64().await?;
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(Error::failed)?
            .as_millis();
        Ok(format!("{ms}|{u}|{r}"))
    }
}

/// An approval, then a step.
#[derive(Clone, Copy)]
pub(crate) struct Approve;
impl Workflow for Approve {
    const NAME: &'static str = "approve";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let a = ctx.approval("boss").await?;
        if !a.approved {
            return Err(Error::failed("rejected"));
        }
        let s: String = ctx
            .step("a", |_| async { Ok::<_, String>("done".to_owned()) })
            .await?;
        Ok(format!("{s}|{:?}", a.feedback))
    }
}

/// The child workflow of [`Parent`].
#[derive(Clone, Copy)]
pub(crate) struct Leaf;
impl Workflow for Leaf {
    const NAME: &'static str = "leaf";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("a", |_| async move { Ok::<_, String>(n * 3) })
            .await
    }
}

/// A child call, then a step.
#[derive(Clone, Copy)]
pub(crate) struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let c = ctx.child::<Leaf>("kid", n).await?;
        let d: u32 = ctx
            .step("a", |_| async move { Ok::<_, String>(c + 1) })
            .await?;
        Ok(d)
    }
}

/// A patch, a deprecated patch and published values around a step and a wait.
#[derive(Clone, Copy)]
pub(crate) struct Patches;
impl Workflow for Patches {
    const NAME: &'static str = "patches";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let p = ctx.patched("p");
        ctx.publish("stage", &n).await?;
        let x: u32 = if p {
            ctx.step("a", |_| async move { Ok::<_, String>(n + 1) })
                .await?
        } else {
            ctx.step("b", |_| async move { Ok::<_, String>(n + 2) })
                .await?
        };
        ctx.deprecate_patch("q");
        let s: String = ctx.wait_for_signal("go").await?;
        let again = ctx.patched("p");
        ctx.publish("stage", &s).await?;
        Ok(format!("{p}|{again}|{x}|{s}"))
    }
}

/// How many handlers [`replay_with`] knows.
pub(crate) const HANDLERS: usize = 9;

/// The name of handler `i`.
pub(crate) fn handler_name(i: usize) -> &'static str {
    match i % HANDLERS {
        0 => Sequential::NAME,
        1 => Join::NAME,
        2 => Select::NAME,
        3 => Retries::NAME,
        4 => Recorded::NAME,
        5 => Approve::NAME,
        6 => Parent::NAME,
        7 => Leaf::NAME,
        _ => Patches::NAME,
    }
}

/// How a replay ended, as text, or why that breaks the property.
pub(crate) type Checked = Result<String, String>;

fn check<O: std::fmt::Debug>(r: reel::Result<Replayed<O>>) -> Checked {
    match r {
        Ok(Replayed::Completed(o)) => Ok(format!("completed {o:?}")),
        Ok(Replayed::Failed(e)) => Ok(format!("failed {e}")),
        Ok(Replayed::Pending(w)) => Ok(format!("pending on {w}")),
        Ok(Replayed::ContinuedAsNew { version }) => Ok(format!("continued as new ({version})")),
        Err(
            e @ (Error::ReplayDivergence { .. }
            | Error::Codec(_)
            | Error::Corrupt { .. }
            | Error::VersionMismatch { .. }
            | Error::UnknownWorkflow(_)),
        ) => Ok(format!("error {e}")),
        Err(e) => Err(format!("unexpected error kind: {e:?}")),
    }
}

/// Replays `log` against handler `i` (mod [`HANDLERS`]).
pub(crate) async fn replay_with(i: usize, log: &[Event]) -> Checked {
    match i % HANDLERS {
        0 => check(replay(Sequential, log).await),
        1 => check(replay(Join, log).await),
        2 => check(replay(Select, log).await),
        3 => check(replay(Retries, log).await),
        4 => check(replay(Recorded, log).await),
        5 => check(replay(Approve, log).await),
        6 => check(replay(Parent, log).await),
        7 => check(replay(Leaf, log).await),
        _ => check(replay(Patches, log).await),
    }
}

/// Replays `log` against every handler, each on a fresh current-thread runtime in a
/// thread of its own, bounded by `limit` (tokio's timeout, and the thread's answer
/// waited for twice as long in case the replay spins without yielding). A panic, a
/// hang or an unexpected error kind is returned as `Err` naming the handler.
pub(crate) fn replay_all(log: &[Event], limit: Duration) -> Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(HANDLERS);
    for i in 0..HANDLERS {
        let events = log.to_vec();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .map_err(|e| format!("runtime: {e}"))?;
                rt.block_on(async {
                    tokio::time::timeout(limit, replay_with(i, &events))
                        .await
                        .unwrap_or_else(|_| Err(format!("replay hung for {limit:?}")))
                })
            }));
            let r = r.unwrap_or_else(|p| {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic".to_owned());
                Err(format!("panicked: {msg}"))
            });
            let _ = tx.send(r);
        });
        let r = rx
            .recv_timeout(limit * 2 + Duration::from_secs(1))
            .unwrap_or_else(|_| Err(format!("replay spun without yielding for {limit:?}")));
        match r {
            Ok(s) => out.push(s),
            Err(e) => return Err(format!("handler `{}`: {e}", handler_name(i))),
        }
    }
    Ok(out)
}
