//! Acceptance: the inspector's routes as its doc table describes them: read-only
//! mode, the listing's parent and creation-time filters, the run view, the
//! operating actions (pause, resume, terminate, delete) and signal ids over HTTP.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use common::{Waiter, call};
use reel::testing::TestClock;
use reel::{Ctx, Host, RunStatus, Workflow};
use reel_inspector::{InspectorOptions, router};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(20);

/// Starts the child `Waiter` named by its input and returns the child's output.
struct Mom;
impl Workflow for Mom {
    const NAME: &'static str = "mom";
    type Input = String;
    type Output = Value;
    async fn run(&self, ctx: Ctx, kid: String) -> reel::Result<Value> {
        ctx.child::<Waiter>(&kid, json!("from mom")).await
    }
}

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .expect("after epoch")
        .as_millis() as u64
}

async fn host(dir: &std::path::Path, clock: &TestClock) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .clock(clock.clone())
        .register(Waiter)
        .register(Mom)
        .build()
        .await
}

async fn waiting(host: &Host, id: &str) -> anyhow::Result<()> {
    let run = host.run(id);
    tokio::time::timeout(LIMIT, async {
        loop {
            if let Ok(RunStatus::Suspended { .. }) = run.status().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("{id} never waited"))
}

fn ids(v: &Value) -> Vec<String> {
    v["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["run_id"].as_str().expect("id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_refuses_every_action_and_changes_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = host(dir.path(), &clock).await?;
    host.start::<Waiter>("w", json!(1)).await?;
    waiting(&host, "w").await?;
    let before = host.run("w").events().await?.len();
    let app: Router = router(
        host.clone(),
        InspectorOptions {
            read_only: true,
            ..InspectorOptions::default()
        },
    );
    let bodies = [
        ("signal", r#"{"name":"go","payload":1}"#),
        ("cancel", "{}"),
        ("terminate", "{}"),
        ("pause", ""),
        ("resume", ""),
        ("retry", ""),
        ("fork", r#"{"at_seq":1,"new_run_id":"w2"}"#),
        ("delete", ""),
    ];
    for (action, body) in bodies {
        let (status, v) = call(&app, "POST", &format!("/api/runs/w/{action}"), body).await;
        assert_eq!(status.as_u16(), 403, "{action}: {v}");
        assert!(v["error"].is_string(), "{action}: {v}");
    }
    assert_eq!(
        host.run("w").events().await?.len(),
        before,
        "nothing recorded"
    );
    assert!(matches!(
        host.run("w").status().await?,
        RunStatus::Suspended { .. }
    ));
    assert_eq!(host.runs().await?.len(), 1, "no fork");
    // Reading still works, and the run view says the inspector is read-only.
    let (status, v) = call(&app, "GET", "/api/runs/w", "").await;
    assert_eq!(status.as_u16(), 200, "{v}");
    assert_eq!(v["read_only"], json!(true));
    assert_eq!(v["status"], json!("suspended"));
    let (status, _) = call(&app, "GET", "/api/runs/w/records", "").await;
    assert_eq!(status.as_u16(), 200);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_filters_by_parent_and_creation_time() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = host(dir.path(), &clock).await?;
    host.start::<Waiter>("early", json!(0)).await?;
    clock.advance(Duration::from_secs(10));
    host.start::<Mom>("mom-1", "kid-1".into()).await?;
    waiting(&host, "kid-1").await?;
    clock.advance(Duration::from_secs(10));
    host.start::<Waiter>("late", json!(0)).await?;
    let app = router(host.clone(), InspectorOptions::default());

    let (status, v) = call(&app, "GET", "/api/runs?parent=mom-1", "").await;
    assert_eq!(status.as_u16(), 200, "{v}");
    assert_eq!(ids(&v), ["kid-1"]);
    assert_eq!(v["runs"][0]["parent"], json!("mom-1"));

    let after = ms(t0() + Duration::from_secs(5));
    let before = ms(t0() + Duration::from_secs(15));
    let (status, v) = call(
        &app,
        "GET",
        &format!("/api/runs?created_after={after}&created_before={before}&order=asc"),
        "",
    )
    .await;
    assert_eq!(status.as_u16(), 200, "{v}");
    let mut got = ids(&v);
    got.sort();
    assert_eq!(got, ["kid-1", "mom-1"]);
    let (status, v) = call(
        &app,
        "GET",
        &format!("/api/runs?created_before={after}"),
        "",
    )
    .await;
    assert_eq!(status.as_u16(), 200, "{v}");
    assert_eq!(ids(&v), ["early"]);

    // The parent's view lists its child.
    let (status, v) = call(&app, "GET", "/api/runs/mom-1", "").await;
    assert_eq!(status.as_u16(), 200, "{v}");
    let kids: Vec<&str> = v["children"]
        .as_array()
        .expect("children")
        .iter()
        .map(|c| c["run_id"].as_str().expect("id"))
        .collect();
    assert_eq!(kids, ["kid-1"]);
    assert_eq!(v["created_at"], json!(ms(t0() + Duration::from_secs(10))));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_delete_and_terminate_over_http() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = host(dir.path(), &clock).await?;
    host.start::<Waiter>("p", json!("in")).await?;
    host.start::<Waiter>("t", json!("in")).await?;
    waiting(&host, "p").await?;
    waiting(&host, "t").await?;
    let app = router(host.clone(), InspectorOptions::default());

    let (status, v) = call(&app, "POST", "/api/runs/p/pause", "").await;
    assert_eq!(status.as_u16(), 202, "{v}");
    let (_, v) = call(&app, "GET", "/api/runs/p", "").await;
    assert_eq!(v["status"], json!("paused"), "{v}");
    let (_, v) = call(&app, "GET", "/api/count", "").await;
    assert_eq!(v["by_status"]["paused"], json!(1), "{v}");
    assert_eq!(v["total"], json!(2), "{v}");
    // A run that has not ended cannot be deleted: the state stands in the way.
    let (status, v) = call(&app, "POST", "/api/runs/p/delete", "").await;
    assert_eq!(status.as_u16(), 409, "{v}");
    // A signal to the paused run is recorded and applied on resume.
    let (status, v) = call(
        &app,
        "POST",
        "/api/runs/p/signal",
        r#"{"name":"go","payload":"x","signal_id":"s-1"}"#,
    )
    .await;
    assert_eq!(status.as_u16(), 202, "{v}");
    let (status, v) = call(&app, "POST", "/api/runs/p/resume", "").await;
    assert_eq!(status.as_u16(), 202, "{v}");
    let out =
        tokio::time::timeout(LIMIT, host.run("p").typed::<Waiter>().await?.result()).await??;
    assert_eq!(out["go"], json!("x"));
    let (status, v) = call(&app, "POST", "/api/runs/p/delete", "").await;
    assert_eq!(status.as_u16(), 202, "{v}");
    let (status, v) = call(&app, "GET", "/api/runs/p", "").await;
    assert_eq!(status.as_u16(), 404, "{v}");
    assert!(v["error"].is_string(), "{v}");

    let (status, v) = call(
        &app,
        "POST",
        "/api/runs/t/terminate",
        r#"{"reason":"enough"}"#,
    )
    .await;
    assert_eq!(status.as_u16(), 202, "{v}");
    let run = host.run("t");
    tokio::time::timeout(LIMIT, async {
        while run.status().await.ok() != Some(RunStatus::Cancelled) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    // An ended run takes no signal: 409, and nothing is recorded.
    let before = run.events().await?.len();
    let (status, v) = call(&app, "POST", "/api/runs/t/signal", r#"{"name":"go"}"#).await;
    assert_eq!(status.as_u16(), 409, "{v}");
    assert_eq!(run.events().await?.len(), before);
    // Unknown runs are 404 for actions too.
    let (status, v) = call(&app, "POST", "/api/runs/nobody/pause", "").await;
    assert_eq!(status.as_u16(), 404, "{v}");
    let (status, v) = call(&app, "POST", "/api/runs/nobody/signal", r#"{"name":"go"}"#).await;
    assert_eq!(status.as_u16(), 404, "{v}");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_id_sent_twice_over_http_is_one_delivery() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = host(dir.path(), &clock).await?;
    host.start::<Waiter>("d", json!(0)).await?;
    waiting(&host, "d").await?;
    let app = router(host.clone(), InspectorOptions::default());
    for _ in 0..2 {
        let (status, v) = call(
            &app,
            "POST",
            "/api/runs/d/signal",
            r#"{"name":"other","payload":1,"signal_id":"once"}"#,
        )
        .await;
        assert_eq!(status.as_u16(), 202, "{v}");
    }
    let received = host
        .run("d")
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, reel::Event::SignalReceived { .. }))
        .count();
    assert_eq!(received, 1);
    // A reserved (approval) name is bad input, not a delivery.
    let (status, v) = call(
        &app,
        "POST",
        "/api/runs/d/signal",
        r#"{"name":"approval:ship","payload":{"approved":true,"feedback":null}}"#,
    )
    .await;
    assert_eq!(status.as_u16(), 400, "{v}");
    host.shutdown().await?;
    Ok(())
}
