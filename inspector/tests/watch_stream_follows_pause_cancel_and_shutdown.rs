//! The watch route as a live stream (read frame by frame while the run moves, as
//! a browser's `EventSource` does): a paused and resumed run's records keep
//! coming with ids that are their sequence numbers; a cancel ends the stream
//! right after `RunCancelled`; a host that shuts down ends it with an `error`
//! event. Resuming with `Last-Event-ID` past a finished run's end closes at once.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use common::{Waiter, host, text};
use futures::StreamExt;
use reel::RunStatus;
use reel_inspector::{InspectorOptions, router};
use serde_json::{Value, json};
use tower::ServiceExt;

const LIMIT: Duration = Duration::from_secs(20);

/// Server-sent events as they arrive: `(event, id, data)`.
struct Events {
    body: futures::stream::BoxStream<'static, Result<axum::body::Bytes, axum::Error>>,
    buf: String,
}

impl Events {
    async fn open(app: &axum::Router, uri: &str) -> anyhow::Result<Events> {
        let req = Request::builder().uri(uri).body(Body::empty())?;
        let res = app.clone().oneshot(req).await?;
        anyhow::ensure!(res.status() == 200, "{uri}: {}", res.status());
        Ok(Events {
            body: res.into_body().into_data_stream().boxed(),
            buf: String::new(),
        })
    }

    /// The next event with data, or `None` when the stream ends.
    async fn next(&mut self) -> anyhow::Result<Option<(String, Option<u64>, String)>> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = ("message".to_owned(), None, None);
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data = Some(v.trim().to_owned());
                    }
                }
                match data {
                    Some(d) => return Ok(Some((event, id, d))),
                    None => continue, // the `retry:` preamble
                }
            }
            match tokio::time::timeout(LIMIT, self.body.next()).await? {
                Some(chunk) => self.buf.push_str(&String::from_utf8_lossy(&chunk?)),
                None => return Ok(None),
            }
        }
    }

    /// Records until one of `kind`; their `(id, kind)`.
    async fn until(&mut self, kind: &str) -> anyhow::Result<Vec<(u64, String)>> {
        let mut got = Vec::new();
        loop {
            let Some((event, id, data)) = self.next().await? else {
                anyhow::bail!("the stream ended before {kind}: {got:?}");
            };
            anyhow::ensure!(event == "record", "{event}: {data}");
            let v: Value = serde_json::from_str(&data)?;
            let k = v["kind"].as_str().unwrap_or("").to_owned();
            anyhow::ensure!(id == v["seq"].as_u64(), "id {id:?} for {v}");
            got.push((id.unwrap_or(0), k.clone()));
            if k == kind {
                return Ok(got);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_watch_follows_pause_resume_and_ends_after_a_cancel() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = host(dir.path()).await?;
    let app = router(h.clone(), InspectorOptions::default());
    let run = h.start::<Waiter>("w", json!(1)).await?;
    tokio::time::timeout(LIMIT, run.wait_until_suspended()).await??;

    let mut ev = Events::open(&app, "/api/runs/w/watch").await?;
    let mut seen = ev.until("SignalAwaited").await?;
    run.pause().await?;
    run.signal("go", &json!("while paused"), "s1").await?;
    seen.extend(ev.until("SignalReceived").await?);
    assert!(matches!(run.status().await?, RunStatus::Paused));
    run.resume().await?;
    // The run goes on (its last step) and ends.
    seen.extend(ev.until("RunCompleted").await?);
    assert!(ev.next().await?.is_none(), "the stream ends after the end");
    let all: Vec<u64> = run.records().await?.iter().map(|r| r.seq).collect();
    assert_eq!(seen.iter().map(|(s, _)| *s).collect::<Vec<_>>(), all);

    // Another run, cancelled while watched.
    let run = h.start::<Waiter>("c", json!(2)).await?;
    tokio::time::timeout(LIMIT, run.wait_until_suspended()).await??;
    let mut ev = Events::open(&app, "/api/runs/c/watch").await?;
    ev.until("SignalAwaited").await?;
    let (s, v) = common::call(&app, "POST", "/api/runs/c/cancel", r#"{"reason":"op"}"#).await;
    assert_eq!(s, 202, "{v}");
    let tail = ev.until("RunCancelled").await?;
    assert!(tail.iter().any(|(_, k)| k == "CancelRequested"), "{tail:?}");
    assert!(
        ev.next().await?.is_none(),
        "the stream ends after RunCancelled"
    );

    // Resuming past the end of a finished run closes at once, with no records.
    let last = run.records().await?.last().map(|r| r.seq).unwrap_or(0);
    let (s, sse) = text(&app, &format!("/api/runs/c/watch?after={last}")).await;
    assert_eq!(s, 200);
    assert!(!sse.contains("event: record"), "{sse}");
    h.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_watch_ends_with_an_error_event_when_the_host_shuts_down() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = host(dir.path()).await?;
    let app = router(h.clone(), InspectorOptions::default());
    let run = h.start::<Waiter>("w", json!(1)).await?;
    tokio::time::timeout(LIMIT, run.wait_until_suspended()).await??;
    let mut ev = Events::open(&app, "/api/runs/w/watch").await?;
    ev.until("SignalAwaited").await?;
    h.shutdown().await?;
    let Some((event, _, data)) = ev.next().await? else {
        anyhow::bail!("the stream ended without an error event");
    };
    assert_eq!(event, "error", "{data}");
    assert!(data.contains("shut down"), "{data}");
    assert!(ev.next().await?.is_none());
    // The router answers 503 now.
    let (s, v) = common::call(&app, "GET", "/api/runs/w", "").await;
    assert_eq!(s, 503, "{v}");
    Ok(())
}
