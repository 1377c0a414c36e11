//! The runs of the churn tests (many runs started, ended every way, deleted and
//! started again from many tasks), and their settling before the counts and
//! listings are checked against them: `counts_and_listings_survive_kills_mid_churn.rs`,
//! `listings_and_counts_agree_with_runs_after_concurrent_churn.rs`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::future::{join_all, try_join_all};
use reel::{Ctx, Error, Host, RunInfo, RunStatus, StepError, Workflow};

/// How many `Leaf` children a mode-4 `Job` starts.
pub const CHILDREN: u32 = 3;

/// 0: completes at once; 1: fails in the handler; 2: two steps, then completes;
/// 3: waits for `go`; 4: starts `CHILDREN` leaf children `<id>/c<j>` in one join
/// (`Leaf` must be registered); 5: a step fails for good.
pub struct Job;
impl Workflow for Job {
    const NAME: &'static str = "job";
    type Input = (u32, u32);
    type Output = u32;
    async fn run(&self, ctx: Ctx, (mode, tag): (u32, u32)) -> reel::Result<u32> {
        match mode {
            0 => Ok(tag),
            1 => Err(Error::failed(format!("job {tag} failed"))),
            2 => {
                let a: u32 = ctx
                    .step("a", |_| async move { Ok::<_, String>(tag) })
                    .await?;
                let b: u32 = ctx.step("b", |_| async move { Ok::<_, String>(a) }).await?;
                Ok(b)
            }
            3 => ctx.wait_for_signal::<u32>("go").await,
            4 => {
                let calls = (0..CHILDREN).map(|j| {
                    let id = format!("{}/c{j}", ctx.run_id());
                    let ctx = ctx.clone();
                    async move { ctx.child::<Leaf>(&id, tag + j).await }
                });
                Ok(try_join_all(calls).await?.into_iter().sum())
            }
            _ => {
                ctx.step("bad", |_| async move {
                    Err::<u32, _>(StepError::non_retryable(format!("step of {tag}")))
                })
                .await
            }
        }
    }
}

/// One step, then completes with its input.
pub struct Leaf;
impl Workflow for Leaf {
    const NAME: &'static str = "leaf";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("s", |_| async move { Ok::<_, String>(n) }).await
    }
}

/// What `info()` says of every id of `ids` that has a run, after waiting (polling,
/// for at most `limit`) until nothing moves: no run running, and no run waiting on
/// anything but a `go` signal.
pub async fn settled(
    host: &Host,
    ids: &[String],
    limit: Duration,
) -> anyhow::Result<BTreeMap<String, RunInfo>> {
    let deadline = Instant::now() + limit;
    loop {
        let infos = join_all(
            ids.iter()
                .map(|id| async move { host.run(id).info().await }),
        )
        .await;
        let mut all = BTreeMap::new();
        let mut moving = None;
        for (id, info) in ids.iter().zip(infos) {
            match info {
                Ok(info) => {
                    let settled = match &info.status {
                        RunStatus::Running => false,
                        RunStatus::Suspended { waiting_on } => waiting_on.contains("go"),
                        _ => true,
                    };
                    if !settled {
                        moving = Some(format!("{id}: {:?}", info.status));
                    }
                    all.insert(id.clone(), info);
                }
                Err(Error::UnknownRun(_)) => {}
                Err(e) => anyhow::bail!("info of {id}: {e}"),
            }
        }
        match moving {
            None => return Ok(all),
            Some(what) if Instant::now() > deadline => {
                anyhow::bail!("runs still moving after {limit:?}: {what}")
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
