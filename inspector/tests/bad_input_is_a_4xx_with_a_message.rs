//! Bad input to the admin router is a 4xx with a JSON message and changes nothing:
//! unknown runs 404, malformed JSON and queries 400, a finished run 409, actions
//! in read-only mode 403, operations the run's state refuses 409, and a
//! service's auth layer in front blocks every route.

mod common;

use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use common::{Quick, Waiter, call, host, text};
use reel::RunStatus;
use reel_inspector::{InspectorOptions, router};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(10);

fn message(v: &serde_json::Value) -> &str {
    v["error"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_answers_4xx_and_changes_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = host(dir.path()).await?;
    let done = h.start::<Quick>("done", 1).await?;
    tokio::time::timeout(LIMIT, done.result()).await??;
    let w = h.start::<Waiter>("w", json!(1)).await?;
    tokio::time::timeout(LIMIT, w.wait_until_suspended()).await??;
    let app = router(h.clone(), InspectorOptions::default());

    // Unknown run: 404 on every route that names a run.
    for (method, uri, body) in [
        ("GET", "/api/runs/nope", ""),
        ("GET", "/api/runs/nope/records", ""),
        ("GET", "/api/runs/nope/watch", ""),
        ("POST", "/api/runs/nope/signal", r#"{"name":"go"}"#),
        ("POST", "/api/runs/nope/cancel", ""),
        ("POST", "/api/runs/nope/terminate", ""),
        ("POST", "/api/runs/nope/pause", ""),
        (
            "POST",
            "/api/runs/nope/fork",
            r#"{"at_seq":1,"new_run_id":"x"}"#,
        ),
    ] {
        let (s, v) = call(&app, method, uri, body).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{method} {uri}: {v}");
        assert_eq!(message(&v), "unknown run `nope`", "{method} {uri}");
    }

    // Malformed JSON bodies: 400 with serde's sentence.
    for body in [
        "{",
        r#"{"payload": 1}"#,
        r#"{"name": 5}"#,
        r#"{"name":"go","extra":1}"#,
        "[]",
    ] {
        let (s, v) = call(&app, "POST", "/api/runs/w/signal", body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert!(message(&v).starts_with("malformed JSON body"), "{v}");
    }
    let (s, v) = call(&app, "POST", "/api/runs/w/fork", r#"{"at_seq":"x"}"#).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = call(&app, "POST", "/api/runs/w/cancel", r#"{"reason": 3}"#).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = call(
        &app,
        "POST",
        "/api/runs/w/signal",
        r#"{"name":"approval:x"}"#,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(message(&v).contains("reserved"), "{v}");

    // Malformed queries: 400.
    for uri in [
        "/api/runs?limit=x",
        "/api/runs?limit=0",
        "/api/runs?limit=100000",
        "/api/runs?status=sleeping",
        "/api/runs?order=sideways",
        "/api/runs?created_after=yesterday",
        "/api/runs/w/records?after=-1",
        "/api/runs/w/watch?after=x",
    ] {
        let (s, v) = call(&app, "GET", uri, "").await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{uri}: {v}");
        assert!(!message(&v).is_empty(), "{uri}");
    }

    // A finished run: 409 with the reason.
    let (s, v) = call(&app, "POST", "/api/runs/done/signal", r#"{"name":"go"}"#).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(message(&v), "run `done` has finished");

    // Operations the run's state does not allow: 409, naming run and state.
    for (op, run, state) in [
        ("pause", "done", "completed"),
        ("resume", "w", "suspended"),
        ("retry", "w", "suspended"),
        ("delete", "w", "suspended"),
    ] {
        let (s, v) = call(&app, "POST", &format!("/api/runs/{run}/{op}"), "").await;
        assert_eq!(s, StatusCode::CONFLICT, "{op}: {v}");
        assert_eq!(
            message(&v),
            format!("cannot {op} run `{run}`: it is {state}"),
            "{v}"
        );
    }

    // Nothing of that changed the waiting run.
    assert_eq!(w.status().await?.kind(), reel::StatusKind::Suspended);

    // Read-only: every action 403, reads still work, nothing changes.
    let ro = router(
        h.clone(),
        InspectorOptions {
            read_only: true,
            ..InspectorOptions::default()
        },
    );
    for action in [
        "signal",
        "cancel",
        "terminate",
        "pause",
        "resume",
        "retry",
        "fork",
        "delete",
    ] {
        let (s, v) = call(
            &ro,
            "POST",
            &format!("/api/runs/w/{action}"),
            r#"{"name":"go"}"#,
        )
        .await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{action}: {v}");
        assert!(message(&v).contains("read-only"), "{v}");
    }
    let (s, _) = call(&ro, "GET", "/api/runs/w", "").await;
    assert_eq!(s, StatusCode::OK);
    let (_, page) = text(&ro, "/").await;
    assert!(page.contains("const READ_ONLY = true;"));
    assert!(matches!(w.status().await?, RunStatus::Suspended { .. }));

    // A service's auth layer in front of the router blocks every route.
    async fn deny(req: Request, next: Next) -> Result<Response, StatusCode> {
        if req.headers().contains_key("x-admin") {
            Ok(next.run(req).await)
        } else {
            Err(StatusCode::UNAUTHORIZED)
        }
    }
    let guarded = axum::Router::new().nest(
        "/admin",
        router(h.clone(), InspectorOptions::default()).layer(middleware::from_fn(deny)),
    );
    for (method, uri) in [
        ("GET", "/admin"),
        ("GET", "/admin/api/runs"),
        ("GET", "/admin/api/count"),
        ("GET", "/admin/api/runs/w"),
        ("GET", "/admin/api/runs/w/records"),
        ("GET", "/admin/api/runs/w/watch"),
        ("POST", "/admin/api/runs/w/signal"),
        ("POST", "/admin/api/runs/w/cancel"),
    ] {
        let (s, _) = call(&guarded, method, uri, r#"{"name":"go"}"#).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {uri}");
    }
    assert!(matches!(w.status().await?, RunStatus::Suspended { .. }));
    h.shutdown().await?;
    Ok(())
}
