//! Workflows and HTTP helpers the inspector's tests share.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use reel::{Ctx, Host, StepError, Workflow};
use serde_json::{Value, json};
use tower::ServiceExt;

/// Prepares, waits for the signal `go`, then finishes with what it got.
pub struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: Ctx, input: Value) -> reel::Result<Value> {
        let prepared: Value = ctx
            .step("prepare", |_| async {
                Ok::<_, String>(json!({"ready": true}))
            })
            .await?;
        let go: Value = ctx.wait_for_signal("go").await?;
        ctx.step("finish", |_| async { Ok::<_, String>(()) })
            .await?;
        Ok(json!({ "input": input, "prepared": prepared, "go": go }))
    }
}

/// Fails its only step for good.
pub struct Failing;
impl Workflow for Failing {
    const NAME: &'static str = "failing";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.step("charge", |_| async {
            Err::<(), _>(StepError::non_retryable("card declined"))
        })
        .await
    }
}

/// Returns at once.
pub struct Quick;
impl Workflow for Quick {
    const NAME: &'static str = "quick";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n * 2)
    }
}

pub async fn host(path: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(path)
        .register(Waiter)
        .register(Failing)
        .register(Quick)
        .build()
        .await
}

/// Sends one request to `app` and reads the JSON answer (`Value::Null` for a body
/// that is not JSON).
pub async fn call(app: &Router, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request");
    let res = app.clone().oneshot(req).await.expect("infallible");
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The raw text of an answer (the page, a server-sent event stream).
pub async fn text(app: &Router, uri: &str) -> (StatusCode, String) {
    let req = Request::builder()
        .uri(uri)
        .body(Body::empty())
        .expect("request");
    let res = app.clone().oneshot(req).await.expect("infallible");
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Serves `app` on 127.0.0.1 at a free port.
pub async fn serve(app: Router) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}
