//! reel's crash torture (`tests/torture/mod.rs`: a child process killed by SIGKILL
//! at random points, then every invariant checked) on a PostgreSQL database, with
//! each child a member of a cluster (`PgStore::join`, a host id of its own): the
//! leases of a killed child expire and the next child takes its partitions over
//! (recovering their runs and their overdue timers), and until then what it starts
//! or signals goes to the dead owner's inbox, to be read by the taker. So
//! takeover, recovery by partition, the inbox and the write fence are tortured
//! along with the rest. The parent checks the database through a plain
//! `PgStore::connect` once every child is gone.

mod support;
#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/torture/mod.rs"]
mod torture;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reel_postgres::{ClusterConfig, PgStore};

/// The children's lease time: short, so that a child takes over the partitions of
/// the one killed before it soon after it opened.
const LEASE: Duration = Duration::from_millis(300);

/// Kill delays: a child opens in well under 250 ms, takes the partitions over once
/// the previous child's leases expired (up to `LEASE` after that kill), and then
/// works; some kills land before the takeover, while it only posts mail.
const KILL_MS: (u64, u64) = (250, 700);

/// Makes the database the children share; its URL goes to `<dir>/url`.
fn prepare(dir: &Path) {
    let url = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(support::database("torture"));
    std::fs::write(dir.join("url"), url).expect("url file");
}

fn store(dir: PathBuf) -> torture::StoreFuture {
    Box::pin(async move {
        let url = std::fs::read_to_string(dir.join("url")).expect("url file");
        let store: Arc<dyn reel::Store> = if torture::in_child() {
            // A new host id for each process, as a restarted service gets.
            let me = format!("torture-{}", std::process::id());
            PgStore::join(&url, ClusterConfig::new(me).lease_ttl(LEASE))
                .await
                .expect("join")
        } else {
            PgStore::connect(&url).await.expect("connect")
        };
        store
    })
}

#[test]
fn crash_torture_on_postgres() {
    torture::run(torture::Backend {
        test: "crash_torture_on_postgres",
        prepare: Some(prepare),
        store: Some(store),
        kill_ms: KILL_MS,
    });
}
