//! Adversarial input to the admin router, driven with `oneshot`: malformed run
//! ids (empty, NUL, too long) in paths and fork bodies, garbage cursors, wrong
//! methods, unknown routes, a bad `Last-Event-ID`, and a fork of a run whose
//! workflow version this host does not register. Each is a 4xx with a message,
//! never a 500 or a panic, and changes nothing.

mod common;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{Waiter, call, host};
use reel::{Ctx, Host, RunStatus, Workflow};
use reel_inspector::{InspectorOptions, router};
use serde_json::json;
use tower::ServiceExt;

const LIMIT: Duration = Duration::from_secs(10);

fn message(v: &serde_json::Value) -> &str {
    v["error"].as_str().unwrap_or("")
}

async fn raw(app: &Router, req: Request<Body>) -> anyhow::Result<(StatusCode, String)> {
    let res = app.clone().oneshot(req).await?;
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX).await?;
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

async fn waiting_host(dir: &std::path::Path) -> anyhow::Result<Host> {
    let h = host(dir).await?;
    let w = h.start::<Waiter>("w", json!(1)).await?;
    tokio::time::timeout(LIMIT, w.wait_until_suspended()).await??;
    Ok(h)
}

/// A fork whose `new_run_id` is not a valid run id (empty, over 512 bytes, with
/// NUL) is a 400: `Host::fork` reports it as `Error::InvalidArgument` (it was
/// `Error::Storage`, a 500).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_to_an_invalid_run_id_is_a_400() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = waiting_host(dir.path()).await?;
    let app = router(h.clone(), InspectorOptions::default());
    let long = "x".repeat(600);
    for bad in ["", "a\u{0}b", long.as_str()] {
        let body = json!({ "at_seq": 1, "new_run_id": bad }).to_string();
        let (s, v) = call(&app, "POST", "/api/runs/w/fork", &body).await;
        assert!(
            s.is_client_error(),
            "fork to {:?}: {s} {v}",
            bad.chars().take(8).collect::<String>()
        );
        assert!(!message(&v).is_empty(), "{v}");
    }
    h.shutdown().await?;
    Ok(())
}

/// Run ids in paths that cannot be run ids (NUL, over 512 bytes) are 4xx on the
/// reads and the actions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_run_ids_in_paths_are_4xx() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = waiting_host(dir.path()).await?;
    let app = router(h.clone(), InspectorOptions::default());
    let long = "y".repeat(600);
    for id in ["a%00b", long.as_str()] {
        for (method, route, body) in [
            ("GET", "", ""),
            ("GET", "/records", ""),
            ("GET", "/watch", ""),
            ("POST", "/signal", r#"{"name":"go"}"#),
            ("POST", "/cancel", ""),
            ("POST", "/terminate", ""),
            ("POST", "/pause", ""),
            ("POST", "/resume", ""),
            ("POST", "/retry", ""),
            ("POST", "/delete", ""),
            ("POST", "/fork", r#"{"at_seq":1,"new_run_id":"z"}"#),
        ] {
            let uri = format!("/api/runs/{id}{route}");
            let (s, v) = call(&app, method, &uri, body).await;
            assert!(
                s.is_client_error(),
                "{method} {}…{route}: {s} {v}",
                &id[..4]
            );
        }
    }
    assert!(matches!(
        h.run("w").status().await?,
        RunStatus::Suspended { .. }
    ));
    h.shutdown().await?;
    Ok(())
}

/// Garbage cursors, wrong methods, unknown routes and a bad `Last-Event-ID` are
/// 4xx; a zero `limit` on records is an empty page, not a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_methods_routes_and_headers_are_checked() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = waiting_host(dir.path()).await?;
    let app = router(h.clone(), InspectorOptions::default());
    for cursor in ["garbage", "%FF%FE", "0", "-1", "a:b:c:d"] {
        let (s, v) = call(&app, "GET", &format!("/api/runs?cursor={cursor}"), "").await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "cursor {cursor}: {v}");
        assert!(!message(&v).is_empty(), "{v}");
    }
    // A real cursor from one page works on the next.
    for i in 0..3 {
        h.start::<common::Quick>(&format!("q{i}"), i).await?;
    }
    let (s, v) = call(&app, "GET", "/api/runs?limit=2", "").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let next = v["next"].as_str().unwrap_or_default().to_owned();
    assert!(!next.is_empty(), "{v}");
    let (s, v) = call(&app, "GET", &format!("/api/runs?limit=2&cursor={next}"), "").await;
    assert_eq!(s, StatusCode::OK, "{v}");

    for (method, uri) in [
        ("GET", "/api/runs/w/pause"),
        ("GET", "/api/runs/w/delete"),
        ("POST", "/api/count"),
        ("POST", "/api/runs/w"),
        ("DELETE", "/api/runs/w"),
        ("PUT", "/api/runs/w/signal"),
    ] {
        let (s, _) = call(&app, method, uri, "").await;
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
    }
    for uri in ["/api/nope", "/api/runs/w/explode", "/api/runs/w/records/1"] {
        let (s, _) = call(&app, "GET", uri, "").await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{uri}");
    }
    // As the listing's: an empty page with no `next` would read as the end.
    let (s, v) = call(&app, "GET", "/api/runs/w/records?limit=0", "").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = call(
        &app,
        "GET",
        "/api/runs/w/records?after=18446744073709551615",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");

    let req = Request::builder()
        .uri("/api/runs/w/watch")
        .header("last-event-id", "not-a-number")
        .body(Body::empty())?;
    let (s, text) = raw(&app, req).await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("Last-Event-ID"), "{text}");
    assert!(matches!(
        h.run("w").status().await?,
        RunStatus::Suspended { .. }
    ));
    h.shutdown().await?;
    Ok(())
}

/// Registered only on the first host.
struct Gone;
impl Workflow for Gone {
    const NAME: &'static str = "gone";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal("go").await
    }
}

/// Version 2 of `gone`: the only version of it on the second host.
struct Gone2;
impl Workflow for Gone2 {
    const NAME: &'static str = "gone";
    const VERSION: u32 = 2;
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

/// Forking a run whose workflow version this host does not register is a
/// refusal about the run (`Error::VersionMismatch` / `UnknownWorkflow`), not a
/// failure of the host: a 409 (it was the catch-all 500).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_an_unregistered_version_is_a_4xx() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let first = Host::builder()
        .path(dir.path())
        .register(Gone)
        .build()
        .await?;
    let run = first.start::<Gone>("g", ()).await?;
    tokio::time::timeout(LIMIT, run.wait_until_suspended()).await??;
    first.shutdown().await?;

    let h = Host::builder()
        .path(dir.path())
        .register(Gone2)
        .build()
        .await?;
    let app = router(h.clone(), InspectorOptions::default());
    let (s, v) = call(
        &app,
        "POST",
        "/api/runs/g/fork",
        r#"{"at_seq":1,"new_run_id":"g2"}"#,
    )
    .await;
    assert!(s.is_client_error(), "{s} {v}");
    assert!(message(&v).contains("gone"), "{v}");
    let (s, _) = call(&app, "GET", "/api/runs/g2", "").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    h.shutdown().await?;
    Ok(())
}
