//! The workflows and waits of the tests of waiters across continue-as-new, on fjall
//! (`tests/waiters_follow_a_run_across_continue_as_new.rs`) and on Postgres
//! (`postgres/tests/waiters_follow_a_run_across_continue_as_new_on_postgres.rs`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// How the last segment of a [`Hopper`] ends.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub(crate) enum End {
    Complete,
    Fail,
    /// Waits on `never`; the test cancels it.
    Cancel,
}

/// Each segment waits for `go` (a string) and adds it to what it gathered;
/// while hops remain it continues as new, then ends as `End` says.
pub(crate) struct Hopper;
impl Workflow for Hopper {
    const NAME: &'static str = "hopper";
    type Input = (u32, Vec<String>, End);
    type Output = String;
    async fn run(&self, ctx: Ctx, (hops, mut got, end): Self::Input) -> reel::Result<String> {
        let go: String = ctx.wait_for_signal("go").await?;
        got.push(go);
        if hops > 0 {
            return ctx.continue_as_new::<Hopper>((hops - 1, got, end)).await;
        }
        match end {
            End::Complete => Ok(got.join(",")),
            End::Fail => Err(Error::failed(format!("failed after {}", got.join(",")))),
            End::Cancel => {
                ctx.wait_for_signal::<()>("never").await?;
                Ok("never".into())
            }
        }
    }
}

/// Waits (`ctx.child`) on the hopper it is given: started by it when `own`,
/// otherwise one the service started (an attached wait). Before that, while
/// `hops` remain, it races the call against a `hop` signal and continues as new
/// when the signal wins. Returns what the call answered, as text.
pub(crate) struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = (String, u32, End, u32);
    type Output = String;
    async fn run(&self, ctx: Ctx, (kid, kid_hops, end, hops): Self::Input) -> reel::Result<String> {
        let call = ctx.child::<Hopper>(&kid, (kid_hops, Vec::new(), end));
        if hops > 0 {
            let hop = ctx.wait_for_signal::<()>("hop");
            tokio::select! {
                biased;
                r = call => return Ok(format!("{r:?}")),
                r = hop => r?,
            }
            return ctx
                .continue_as_new::<Waiter>((kid, kid_hops, end, hops - 1))
                .await;
        }
        Ok(format!("{:?}", call.await))
    }
}

/// The gate of a run's `hold` step: the step waits until the test adds a permit.
pub(crate) fn gate(key: &str) -> Arc<Semaphore> {
    static GATES: LazyLock<Mutex<HashMap<String, Arc<Semaphore>>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    GATES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(key.to_owned())
        .or_insert_with(|| Arc::new(Semaphore::new(0)))
        .clone()
}

/// Segment 0 runs a step held by the test's gate, then continues as new;
/// segment 1 waits for `go` and returns it.
pub(crate) struct Held;
impl Workflow for Held {
    const NAME: &'static str = "held";
    type Input = (String, u32);
    type Output = String;
    async fn run(&self, ctx: Ctx, (key, segment): Self::Input) -> reel::Result<String> {
        if segment == 0 {
            let k = key.clone();
            ctx.step("hold", move |_| {
                let g = gate(&k);
                async move {
                    g.acquire().await.map_err(|e| e.to_string())?.forget();
                    Ok::<_, String>(())
                }
            })
            .await?;
            return ctx.continue_as_new::<Held>((key, 1)).await;
        }
        let go: String = ctx.wait_for_signal("go").await?;
        Ok(format!("{key}:{go}"))
    }
}

/// Segment 0 waits for `switch`, then continues as new. Segment 1 waits for
/// `end`, then takes every `x` signal it has (a short timed wait each, which a
/// buffered signal answers at once), and returns them in order.
pub(crate) struct Collector;
impl Workflow for Collector {
    const NAME: &'static str = "collector";
    type Input = u32;
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, segment: u32) -> reel::Result<Vec<u32>> {
        if segment == 0 {
            ctx.wait_for_signal::<()>("switch").await?;
            return ctx.continue_as_new::<Collector>(1).await;
        }
        ctx.wait_for_signal::<()>("end").await?;
        let mut got = Vec::new();
        while let Some(x) = ctx
            .wait_for_signal_timeout::<u32>("x", Duration::from_millis(200))
            .await?
        {
            got.push(x);
        }
        Ok(got)
    }
}

/// How long a test waits for what it expects.
pub(crate) const LIMIT: Duration = Duration::from_secs(20);

pub(crate) fn ended(s: &RunStatus) -> bool {
    matches!(
        s,
        RunStatus::Completed | RunStatus::Failed { .. } | RunStatus::Cancelled
    )
}

pub(crate) fn count(events: &[Event], kind: &str) -> usize {
    events.iter().filter(|e| e.kind() == kind).count()
}

/// Waits (looking every `nap`) until the run, as `host` reads it, is in segment
/// `segment` and suspended there.
pub(crate) async fn until_segment(
    host: &Host,
    id: &str,
    segment: u32,
    nap: Duration,
) -> anyhow::Result<RunStatus> {
    let run = host.run(id);
    let wait = async {
        loop {
            let info = match run.info().await {
                // A child its parent has not started yet.
                Err(Error::UnknownRun(_)) => {
                    tokio::time::sleep(nap).await;
                    continue;
                }
                info => info?,
            };
            if info.segment == segment && matches!(info.status, RunStatus::Suspended { .. }) {
                return anyhow::Ok(info.status);
            }
            if info.segment > segment || ended(&info.status) {
                anyhow::bail!("{id} went past segment {segment}: {info:?}");
            }
            tokio::time::sleep(nap).await;
        }
    };
    tokio::time::timeout(LIMIT, wait)
        .await
        .map_err(|_| anyhow::anyhow!("{id} never waited in segment {segment}"))?
}
