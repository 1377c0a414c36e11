//! A cancel of parents across hosts when the parents' host dies: parents on a
//! child process wait for children on a host that stays up; all of them are
//! cancelled at once through that host, and the parents' host is SIGKILLed just
//! after the first parent ends cancelled. A cancelled parent's children are
//! cancelled by mail its host posts after the request is written, so some of
//! those posts never happen; the taker runs the cancel to its end without
//! passing it on. Every child must still end cancelled.

mod procs;
mod support;

use std::path::Path;
use std::time::Duration;

use reel::{Ctx, Host, RunStatus, Workflow};

const CHILD_ENV: &str = "REEL_PG_PARENT_CANCEL_KILLED_CHILD_DIR";
const TEST: &str = "parent_cancel_reaches_children_after_the_parent_host_dies_on_postgres";
const PARENTS: usize = 100;

/// Waits for a signal `go` that never comes.
#[derive(Clone)]
struct Kid;

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

/// Waits for its child `<child>`.
#[derive(Clone)]
struct Waits;

impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = (String, u64);
    type Output = u32;
    async fn run(&self, ctx: Ctx, (child, _): (String, u64)) -> reel::Result<u32> {
        ctx.child::<Kid>(&child, ()).await
    }
}

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Kid)
        .register(Waits)
        .build()
        .await?)
}

fn child(dir: &Path) {
    procs::idle_host(open(dir, "host-0"));
}

#[test]
fn parent_cancel_reaches_children_after_the_parent_host_dies_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let (rt, dir, url, victim) = procs::joined_process(TEST, CHILD_ENV, "parent_cancel_lost");
    let (host, pairs) = rt.block_on(async {
        let host = open(dir.path(), "host-1").await.expect("host 1");
        let owners = support::spread_leases(&url, "host-", 2, 100).await;
        let parents = procs::ids_on(&owners, 0, "p", PARENTS);
        let kids = procs::ids_on(&owners, 1, "c", PARENTS);
        let at = procs::epoch_ms() + 6000;
        for (p, c) in parents.iter().zip(&kids) {
            host.start::<Waits>(p, (c.clone(), at))
                .await
                .expect("start");
        }
        for c in &kids {
            let kid = host.run(c);
            procs::until("the children to wait", Duration::from_secs(60), || async {
                matches!(kid.status().await, Ok(RunStatus::Suspended { .. }))
            })
            .await;
        }
        let _ = at;
        for p in &parents {
            let run = host.run(p);
            procs::until("the parents to wait", Duration::from_secs(60), || async {
                matches!(run.status().await, Ok(RunStatus::Suspended { .. }))
            })
            .await;
        }
        let cancels = parents.iter().map(|p| {
            let run = host.run(p);
            async move { run.request_cancel("called off").await }
        });
        for r in futures::future::join_all(cancels).await {
            r.expect("request cancel");
        }
        // The first parents end cancelled: kill their host at once.
        procs::until_one_ended(&url, "p-", "cancelled", "parents").await;
        (host, parents.into_iter().zip(kids).collect::<Vec<_>>())
    });
    victim.kill();
    rt.block_on(async {
        // The parents' host is gone and its partitions are taken within a few
        // seconds; give every child 20 s from now, all at once.
        let hung = procs::not_cancelled(&host, &pairs).await;
        host.shutdown().await.expect("shutdown");
        assert!(
            hung.is_empty(),
            "{} of {PARENTS} children of cancelled parents were never cancelled:\n{}",
            hung.len(),
            hung.join("\n")
        );
    });
}
