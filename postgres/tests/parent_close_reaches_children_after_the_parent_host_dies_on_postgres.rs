//! Parent-close across hosts when the parent's host dies: parents on a child
//! process call children on a host that stays up and return without waiting for
//! them (on one timer instant, all at once); their host is SIGKILLed just after
//! the first parents' ends are committed. A parent's unfinished children are
//! cancelled by mail its host posts after the parent's end is written, so some of
//! those posts never happen. Every child must still end cancelled: its parent is
//! completed in the database (and, finished, is not recovered by the taker).

mod procs;
mod support;

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use reel::{Ctx, Host, RunStatus, Workflow};

const CHILD_ENV: &str = "REEL_PG_PARENT_CLOSE_KILLED_CHILD_DIR";
const TEST: &str = "parent_close_reaches_children_after_the_parent_host_dies_on_postgres";
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

/// Calls its child `<child>` without waiting for it, sleeps until the epoch ms
/// it is given, and returns: its child is to be cancelled (parent-close).
#[derive(Clone)]
struct Leaves;

impl Workflow for Leaves {
    const NAME: &'static str = "leaves";
    type Input = (String, u64);
    type Output = u64;
    async fn run(&self, ctx: Ctx, (child, at): (String, u64)) -> reel::Result<u64> {
        let _pending = ctx.child::<Kid>(&child, ());
        ctx.sleep_until(UNIX_EPOCH + Duration::from_millis(at))
            .await?;
        Ok(at)
    }
}

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Kid)
        .register(Leaves)
        .build()
        .await?)
}

fn child(dir: &Path) {
    procs::idle_host(open(dir, "host-0"));
}

#[test]
fn parent_close_reaches_children_after_the_parent_host_dies_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let (rt, dir, url, victim) = procs::joined_process(TEST, CHILD_ENV, "parent_close_lost");
    let (host, pairs) = rt.block_on(async {
        let host = open(dir.path(), "host-1").await.expect("host 1");
        let owners = support::spread_leases(&url, "host-", 2, 100).await;
        let parents = procs::ids_on(&owners, 0, "p", PARENTS);
        let kids = procs::ids_on(&owners, 1, "c", PARENTS);
        let at = procs::epoch_ms() + 6000;
        for (p, c) in parents.iter().zip(&kids) {
            host.start::<Leaves>(p, (c.clone(), at))
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
        assert!(
            procs::epoch_ms() < at,
            "the children were not all waiting before their timer"
        );
        // The first parents' ends land: kill their host at once.
        procs::until_one_ended(&url, "p-", "completed", "parents").await;
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
            "{} of {PARENTS} children of completed parents were never cancelled:\n{}",
            hung.len(),
            hung.join("\n")
        );
    });
}
