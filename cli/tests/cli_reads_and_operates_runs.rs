//! The `reel` binary against a live host's admin endpoint (list, show, events,
//! watch, signal, cancel; errors as the endpoint's message and a failing exit
//! code), and read-only against the store directory once the host is gone (a
//! clear error while a host holds it).

use std::process::{Command, Output};
use std::time::Duration;

use reel::{Ctx, Host, RunStatus, Workflow};
use reel_inspector::{InspectorOptions, router};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(10);

/// Waits for the signal `go` and returns it.
struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = Value;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Value> {
        ctx.step("prepare", |_| async { Ok::<_, String>(1) })
            .await?;
        ctx.wait_for_signal("go").await
    }
}

async fn host(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder().path(dir).register(Waiter).build().await
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

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_and_operates_runs_through_a_host_and_reads_a_store() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = dir.path().to_str().expect("utf-8 path").to_owned();
    let h = host(dir.path()).await?;
    for id in ["a", "b", "c"] {
        let r = h.start::<Waiter>(id, ()).await?;
        tokio::time::timeout(LIMIT, r.wait_until_suspended()).await??;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/admin", listener.local_addr()?);
    let app = axum::Router::new().nest("/admin", router(h.clone(), InspectorOptions::default()));
    tokio::spawn(async move { axum::serve(listener, app).await });

    // runs: a table, JSON, and pages.
    let table = ok(&reel(&["--url", &url, "runs"]));
    assert!(table.starts_with("RUN"), "{table}");
    assert!(
        table.contains("waiter v1") && table.contains("suspended"),
        "{table}"
    );
    let page: Value = serde_json::from_str(&ok(&reel(&[
        "--url", &url, "--json", "runs", "--limit", "2", "--order", "asc",
    ])))?;
    assert_eq!(page["runs"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["runs"][1]["run_id"], "b");
    let cursor = page["next"].as_str().expect("a next cursor").to_owned();
    let rest: Value = serde_json::from_str(&ok(&reel(&[
        "--url", &url, "--json", "runs", "--order", "asc", "--cursor", &cursor,
    ])))?;
    assert_eq!(rest["runs"][0]["run_id"], "c");

    // show, events.
    let show: Value = serde_json::from_str(&ok(&reel(&["--url", &url, "--json", "show", "a"])))?;
    assert_eq!(show["status"], "suspended");
    let shown = ok(&reel(&["--url", &url, "show", "a"]));
    assert!(
        shown.contains("waiting_on") && shown.contains("signal `go`"),
        "{shown}"
    );
    let events = json_lines(&ok(&reel(&["--url", &url, "--json", "events", "a"])));
    assert_eq!(events[0]["kind"], "RunStarted");
    assert!(events.iter().any(|e| e["kind"] == "SignalAwaited"));

    // signal, then watch to the end.
    ok(&reel(&[
        "--url",
        &url,
        "signal",
        "a",
        "go",
        r#"{"from":"cli"}"#,
        "--id",
        "s1",
    ]));
    assert_eq!(
        tokio::time::timeout(LIMIT, h.run("a").result::<Value>()).await??,
        json!({"from": "cli"})
    );
    let watched = json_lines(&ok(&reel(&["--url", &url, "--json", "watch", "a"])));
    assert_eq!(
        watched.last().map(|r| r["kind"].clone()),
        Some(json!("RunCompleted"))
    );
    assert!(
        watched
            .iter()
            .any(|r| r["kind"] == "SignalReceived" && r["payload"] == json!({"from": "cli"}))
    );

    // cancel.
    ok(&reel(&[
        "--url",
        &url,
        "cancel",
        "b",
        "--reason",
        "from the cli",
    ]));
    let b = h.run("b");
    assert!(
        tokio::time::timeout(LIMIT, b.result::<Value>())
            .await?
            .is_err()
    );
    assert_eq!(b.status().await?, RunStatus::Cancelled);

    // Errors: the endpoint's message, a failing exit code.
    let err = failed(&reel(&["--url", &url, "show", "nope"]));
    assert!(err.contains("unknown run `nope` (HTTP 404)"), "{err}");
    let err = failed(&reel(&["--url", &url, "signal", "c", "go", "{not json"]));
    assert!(err.contains("the payload is not JSON"), "{err}");
    let err = failed(&reel(&["--url", &url, "signal", "a", "go"]));
    assert!(err.contains("has finished (HTTP 409)"), "{err}");
    let err = failed(&reel(&["--url", &url, "resume", "c"]));
    assert!(
        err.contains("cannot resume run `c`") && err.contains("HTTP 409"),
        "{err}"
    );
    let err = failed(&reel(&["runs"]));
    assert!(err.contains("--url") && err.contains("--store"), "{err}");

    // The store, while the host holds it: a clear error.
    let err = failed(&reel(&["--store", &store, "runs"]));
    assert!(err.contains("in use by another host"), "{err}");
    h.shutdown().await?;
    drop(h);

    // Read-only on the store once the host is gone.
    let page: Value = serde_json::from_str(&ok(&reel(&["--store", &store, "--json", "runs"])))?;
    let states: Vec<(&str, &str)> = page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            (
                r["run_id"].as_str().unwrap_or(""),
                r["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        states,
        [("a", "completed"), ("b", "cancelled"), ("c", "suspended")]
    );
    let table = ok(&reel(&["--store", &store, "runs", "--status", "suspended"]));
    assert!(
        table.contains('c') && !table.contains("completed"),
        "{table}"
    );
    let show: Value =
        serde_json::from_str(&ok(&reel(&["--store", &store, "--json", "show", "b"])))?;
    assert_eq!(show["status"], "cancelled");
    let events = json_lines(&ok(&reel(&["--store", &store, "--json", "events", "a"])));
    assert_eq!(
        events.last().map(|e| e["output"].clone()),
        Some(json!({"from": "cli"}))
    );
    let lines = ok(&reel(&["--store", &store, "events", "a"]));
    assert!(lines.contains("RunCompleted"), "{lines}");
    let err = failed(&reel(&["--store", &store, "show", "nope"]));
    assert!(err.contains("unknown run `nope`"), "{err}");
    let err = failed(&reel(&["--store", &store, "cancel", "c"]));
    assert!(err.contains("read-only"), "{err}");
    Ok(())
}
