//! Parents on a host that stays up wait for children that run on another host
//! process; that process is SIGKILLed just after the children's ends are
//! committed (they all end at once, on one timer instant). A child's end reaches
//! its parent as mail the child's host posts after the end is written, so some
//! of those posts never happen. Every parent must still get its child's result:
//! the children are finished in the database, and nothing else about the parents
//! changes (they are not re-executed: their partitions never move).

mod procs;
mod support;

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use reel::{Ctx, Host, RunStatus, Workflow};

const CHILD_ENV: &str = "REEL_PG_CHILD_END_CHILD_DIR";
const TEST: &str = "child_end_reaches_a_live_parent_after_the_child_host_dies_on_postgres";
const PARENTS: usize = 100;

/// Sleeps until the epoch ms it is given, then returns it.
#[derive(Clone)]
struct Sleepy;

impl Workflow for Sleepy {
    const NAME: &'static str = "sleepy";
    type Input = u64;
    type Output = u64;
    async fn run(&self, ctx: Ctx, at: u64) -> reel::Result<u64> {
        ctx.sleep_until(UNIX_EPOCH + Duration::from_millis(at))
            .await?;
        Ok(at)
    }
}

/// Waits for its child `<child>` and returns the child's result.
#[derive(Clone)]
struct Waits;

impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = (String, u64);
    type Output = u64;
    async fn run(&self, ctx: Ctx, (child, at): (String, u64)) -> reel::Result<u64> {
        ctx.child::<Sleepy>(&child, at).await
    }
}

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Sleepy)
        .register(Waits)
        .build()
        .await?)
}

fn child(dir: &Path) {
    procs::idle_host(open(dir, "host-0"));
}

#[test]
fn child_end_reaches_a_live_parent_after_the_child_host_dies_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let (rt, dir, url, victim) = procs::joined_process(TEST, CHILD_ENV, "child_end_lost");
    let (host, parents) = rt.block_on(async {
        let host = open(dir.path(), "host-1").await.expect("host 1");
        let owners = support::spread_leases(&url, "host-", 2, 100).await;
        let parents = procs::ids_on(&owners, 1, "p", PARENTS);
        let kids = procs::ids_on(&owners, 0, "c", PARENTS);
        let at = procs::epoch_ms() + 6000;
        for (p, c) in parents.iter().zip(&kids) {
            host.start::<Waits>(p, (c.clone(), at))
                .await
                .expect("start");
        }
        for c in &kids {
            let kid = host.run(c);
            procs::until("the children to wait", Duration::from_secs(30), || async {
                matches!(kid.status().await, Ok(RunStatus::Suspended { .. }))
            })
            .await;
        }
        assert!(
            procs::epoch_ms() < at,
            "the children were not all waiting before their timer"
        );
        // The first children's ends land: kill their host at once.
        procs::until_one_ended(&url, "c-", "completed", "children").await;
        (host, parents)
    });
    victim.kill();
    rt.block_on(async {
        // The children's host is gone and its partitions are taken within a few
        // seconds; give every parent 20 s from now, all at once.
        let waits = parents.iter().map(|p| {
            let host = &host;
            async move {
                let run = host.handle::<Waits>(p);
                match tokio::time::timeout(Duration::from_secs(20), run.result()).await {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(format!("{p}: {e}")),
                    Err(_) => {
                        let info = host.run(p).children().await.expect("children");
                        Some(format!(
                            "{p}: {:?}, its child {:?}",
                            run.status().await,
                            info.iter()
                                .map(|c| (c.run_id.clone(), c.status.clone()))
                                .collect::<Vec<_>>()
                        ))
                    }
                }
            }
        });
        let hung: Vec<String> = futures::future::join_all(waits)
            .await
            .into_iter()
            .flatten()
            .collect();
        host.shutdown().await.expect("shutdown");
        assert!(
            hung.is_empty(),
            "{} of {PARENTS} parents never got their finished child's result:\n{}",
            hung.len(),
            hung.join("\n")
        );
    });
}
