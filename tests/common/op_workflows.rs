//! What the model test of the operating API drives and checks, shared by its
//! fjall driver (`tests/operations_follow_a_model.rs`) and its Postgres driver
//! (`postgres/tests/operations_follow_a_model_on_postgres.rs`): the four
//! workflows, the check of an answer against the model's, and the statuses a
//! moving run may be seen at.

use super::op_model::{St, Want, Wf};
use reel::{Ctx, Error, RunStatus, StatusKind, Workflow};

use super::NAP;

pub(crate) fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------
// Workflows.

/// Step `a` (input + 1), a wait for signal `go`, step `b`: returns input + 1 + go.
pub(crate) struct Steps;
impl Workflow for Steps {
    const NAME: &'static str = Wf::Steps.name();
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, input: u32) -> reel::Result<u32> {
        let a = ctx
            .step("a", move |_| async move { Ok::<_, String>(input + 1) })
            .await?;
        let v: u32 = ctx.wait_for_signal("go").await?;
        ctx.step("b", move |_| async move { Ok::<_, String>(a + v) })
            .await
    }
}

/// Step `a` (input * 2), then a one-hour timer: returns input * 2.
pub(crate) struct Sleeper;
impl Workflow for Sleeper {
    const NAME: &'static str = Wf::Sleeper.name();
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, input: u32) -> reel::Result<u32> {
        let d = ctx
            .step("a", move |_| async move { Ok::<_, String>(input * 2) })
            .await?;
        ctx.sleep(NAP).await?;
        Ok(d)
    }
}

/// Panics outside a step: with a restart limit of 0 it parks at once (and again
/// after each retry or host restart).
pub(crate) struct Crashy;
impl Workflow for Crashy {
    const NAME: &'static str = Wf::Crashy.name();
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, _: u32) -> reel::Result<u32> {
        panic!("{CRASH}");
    }
}

pub(crate) const CRASH: &str = "m-crashy crashes on purpose";

/// Keeps `Crashy`'s expected panics out of the output; every other panic is
/// reported as usual.
pub(crate) fn quiet_expected_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = (payload.downcast_ref::<&str>().copied())
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        // Exactly the workflow's own panic: a test's failure report that quotes
        // it (a result naming the crash) is still shown.
        if text != Some(CRASH) {
            report(info);
        }
    }));
}

/// Waits on child `<own id>-kid` (a `Steps` of the same input): returns its
/// output + 1000, fails if it was cancelled.
pub(crate) struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = Wf::Parent.name();
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, input: u32) -> reel::Result<u32> {
        let kid = format!("{}-kid", ctx.run_id());
        match ctx.child::<Steps>(&kid, input).await {
            Ok(v) => Ok(v + 1000),
            Err(Error::Cancelled(r)) => Err(Error::failed(format!("kid cancelled: {r}"))),
            Err(e) => Err(e),
        }
    }
}

// ---------------------------------------------------------------------------------
// Checks.

pub(crate) type Check = Result<(), String>;

pub(crate) fn check_answer(want: Want, got: &reel::Result<()>) -> Check {
    let ok = match (want, got) {
        (Want::Ok | Want::OkNoChange | Want::Blocks, Ok(())) => true,
        (
            Want::Mismatch(id, handle, run),
            Err(Error::WorkflowMismatch {
                run_id,
                expected,
                found,
            }),
        ) => run_id == id && expected == handle.name() && found == run.name(),
        (Want::Unknown(id), Err(Error::UnknownRun(r))) => r == id,
        (Want::Invalid(id, k), Err(Error::InvalidState { run_id, state, .. })) => {
            run_id == id && *state == k
        }
        (Want::Finished(id), Err(Error::RunFinished(r))) => r == id,
        (Want::Exists(id, wf), Err(Error::RunExists { run_id, workflow })) => {
            run_id == id && workflow == wf.name()
        }
        (Want::UnknownOrExists(from, _, _), Err(Error::UnknownRun(r))) => r == from,
        (Want::UnknownOrExists(_, to, wf), Err(Error::RunExists { run_id, workflow })) => {
            run_id == to && workflow == wf.name()
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("answer {got:?}, the contract says {want:?}"))
    }
}

/// Whether a run that stood at `prev` may be seen at `seen` while it moves to `want`.
pub(crate) fn allowed(id: &str, prev: Option<St>, want: StatusKind, seen: &RunStatus) -> Check {
    let kind = seen.kind();
    let finished = |k| {
        matches!(
            k,
            StatusKind::Completed | StatusKind::Failed | StatusKind::Cancelled
        )
    };
    let bad = match prev {
        Some(St::Done(e)) => kind != St::Done(e).kind(),
        Some(St::Paused) if want == StatusKind::Paused => kind != StatusKind::Paused,
        _ if kind == StatusKind::Enqueued => true,
        _ if kind == StatusKind::Parked => want != StatusKind::Parked,
        _ if finished(kind) => kind != want,
        Some(St::Paused) => false,
        _ => kind == StatusKind::Paused && want != StatusKind::Paused,
    };
    if bad {
        Err(format!(
            "`{id}`: seen {seen:?} on its way from {prev:?} to {want:?}"
        ))
    } else {
        Ok(())
    }
}
