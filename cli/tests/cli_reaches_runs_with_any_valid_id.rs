//! Any string a host accepts as a run id (not empty, at most 512 bytes, no NUL,
//! not `.` or `..`) is one the `reel` binary can show, read and operate through
//! the admin endpoint: ids holding `/`, `%`, `?`, `#` and spaces. The ids `.` and
//! `..` are refused to new runs: an HTTP client takes them for dot segments of the
//! path even percent-encoded, so no URL reaches such a run.

use std::process::{Command, Output};
use std::time::Duration;

use reel::{Ctx, Host, Workflow};
use reel_inspector::{InspectorOptions, router};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(20);

/// Waits for `go` and returns it.
struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = Value;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Value> {
        ctx.wait_for_signal("go").await
    }
}

fn reel(args: &[&str]) -> Output {
    tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_reel"))
            .args(args)
            .env_remove("REEL_URL")
            .env_remove("REEL_STORE")
            .output()
            .expect("the reel binary runs")
    })
}

async fn serve(ids: &[&str]) -> anyhow::Result<(tempfile::TempDir, Host, String)> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Waiter)
        .build()
        .await?;
    for id in ids {
        let r = host.start::<Waiter>(id, ()).await?;
        tokio::time::timeout(LIMIT, r.wait_until_suspended()).await??;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/admin", listener.local_addr()?);
    let app = axum::Router::new().nest("/admin", router(host.clone(), InspectorOptions::default()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((dir, host, url))
}

async fn check(url: &str, host: &Host, id: &str) -> anyhow::Result<()> {
    let out = reel(&["--url", url, "--json", "show", id]);
    assert!(
        out.status.success(),
        "show {id:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(shown["run_id"], id);
    let out = reel(&["--url", url, "--json", "events", id]);
    assert!(
        out.status.success(),
        "events {id:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = reel(&["--url", url, "signal", id, "go", "1", "--id", "s"]);
    assert!(
        out.status.success(),
        "signal {id:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = tokio::time::timeout(LIMIT, host.run(id).result()).await??;
    assert_eq!(got, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_with_reserved_characters_reach_their_run() -> anyhow::Result<()> {
    let ids = ["a/b", "100%", "q?x#y", "with space", "a/../b"];
    let (_dir, host, url) = serve(&ids).await?;
    for id in ids {
        check(&url, &host, id).await?;
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ids_dot_and_dot_dot_are_refused_to_new_runs() -> anyhow::Result<()> {
    let (_dir, host, _url) = serve(&[]).await?;
    for id in [".", ".."] {
        let started = host.start::<Waiter>(id, ()).await;
        assert!(
            matches!(&started, Err(reel::Error::InvalidArgument(m)) if m.contains("`..`")),
            "start {id:?}: {:?}",
            started.map(|r| r.id().to_owned())
        );
        assert!(
            matches!(host.run(id).status().await, Err(reel::Error::UnknownRun(_))),
            "nothing stored for {id:?}"
        );
    }
    host.shutdown().await?;
    Ok(())
}
