//! reel's crash torture (`tests/torture/mod.rs`: a child process killed by SIGKILL
//! at random points, then every invariant checked) on a PostgreSQL database.

mod support;
#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/torture/mod.rs"]
mod torture;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use reel_postgres::PgStore;

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
        let store: Arc<dyn reel::Store> = PgStore::connect(&url).await.expect("connect");
        store
    })
}

#[test]
fn crash_torture_on_postgres() {
    torture::run(torture::Backend {
        test: "crash_torture_on_postgres",
        prepare: Some(prepare),
        store: Some(store),
    });
}
