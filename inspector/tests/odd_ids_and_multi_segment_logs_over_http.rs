//! The admin router with what real services throw at it: run ids holding `/`,
//! spaces, `?`, `#`, `%`, `:` and non-ASCII (percent-encoded in paths, also in
//! the listing's cursor), and runs that continued as new several times. Every
//! route finds the run by its id; paging a log with `after`/`limit` walks every
//! record of every segment once; a watch resumed with `Last-Event-ID` in any
//! segment goes on from there to the end; a listing paged one row at a time
//! walks every odd id once.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{Waiter, call, text};
use reel::{Ctx, Host, Workflow};
use reel_inspector::{InspectorOptions, router};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(20);

/// Percent-encodes everything but unreserved characters.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Continues as new until `n` reaches 0, a step and a signal wait per segment.
struct Segments;
impl Workflow for Segments {
    const NAME: &'static str = "segments";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("work", |_| async { Ok::<_, String>(n) }).await?;
        if n == 0 {
            return Ok(99);
        }
        let _: Value = ctx.wait_for_signal("next").await?;
        ctx.continue_as_new::<Segments>(n - 1).await
    }
}

const ODD: [&str; 9] = [
    "a/b",
    "with space",
    "q?x=1&y=2",
    "hash#frag",
    "100%",
    "colon:in:id",
    "ünïcödé-✓",
    "a+b",
    "%2F",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_run_ids_reach_their_run_on_every_route() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = common::host(dir.path()).await?;
    let app = router(h.clone(), InspectorOptions::default());
    for id in ODD {
        let r = h.start::<Waiter>(id, json!(id)).await?;
        tokio::time::timeout(LIMIT, r.wait_until_suspended()).await??;
    }
    for id in ODD {
        let e = enc(id);
        let (s, v) = call(&app, "GET", &format!("/api/runs/{e}"), "").await;
        assert_eq!(s, 200, "{id}: {v}");
        assert_eq!(v["run_id"], id);
        let (s, v) = call(&app, "GET", &format!("/api/runs/{e}/records"), "").await;
        assert_eq!(s, 200, "{id}: {v}");
        assert_eq!(v["records"][0]["input"], json!(id));
        let body = json!({ "name": "go", "payload": id, "signal_id": "s" }).to_string();
        let (s, v) = call(&app, "POST", &format!("/api/runs/{e}/signal"), &body).await;
        assert_eq!(s, 202, "{id}: {v}");
        let out: Value = tokio::time::timeout(LIMIT, h.run(id).result()).await??;
        assert_eq!(out["go"], json!(id), "{id}");
        let (s, sse) = text(&app, &format!("/api/runs/{e}/watch")).await;
        assert_eq!(s, 200, "{id}");
        assert!(sse.contains("RunCompleted"), "{id}: {sse}");
    }

    // A listing one row a page: the cursors hold the odd ids, sent encoded.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let uri = match &cursor {
            Some(c) => format!("/api/runs?limit=1&order=asc&cursor={}", enc(c)),
            None => "/api/runs?limit=1&order=asc".to_owned(),
        };
        let (s, v) = call(&app, "GET", &uri, "").await;
        assert_eq!(s, 200, "{uri}: {v}");
        for r in v["runs"].as_array().expect("runs") {
            seen.push(r["run_id"].as_str().expect("id").to_owned());
        }
        match v["next"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "{seen:?}");
    let expected: HashSet<String> = ODD.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(seen.into_iter().collect::<HashSet<_>>(), expected);
    h.shutdown().await?;
    Ok(())
}

async fn segments_host(dir: &std::path::Path) -> anyhow::Result<Host> {
    Ok(Host::builder().path(dir).register(Segments).build().await?)
}

/// The `(seq, kind)` of every `record` event of a server-sent event stream.
fn sse_records(sse: &str) -> Vec<(u64, String)> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .map(|v| {
            (
                v["seq"].as_u64().expect("seq"),
                v["kind"].as_str().expect("kind").to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_and_watch_page_through_every_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = segments_host(dir.path()).await?;
    let app = router(h.clone(), InspectorOptions::default());
    let run = h.start::<Segments>("s", 3).await?;
    for i in 0..3 {
        tokio::time::timeout(LIMIT, run.wait_until_suspended()).await??;
        run.signal("next", &i, &format!("n{i}")).await?;
        let deadline = std::time::Instant::now() + LIMIT;
        while run.info().await?.segment <= i {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert_eq!(tokio::time::timeout(LIMIT, run.result()).await??, 99);
    let all: Vec<(u64, String)> = run
        .records()
        .await?
        .iter()
        .map(|r| {
            let v = reel_inspector::record_to_json(r);
            (r.seq, v["kind"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    assert_eq!(all.iter().filter(|(_, k)| k == "ContinuedAsNew").count(), 3);

    // Records, page by page, with every page size.
    for limit in 1..=4 {
        let mut got = Vec::new();
        let mut after: Option<u64> = None;
        for _ in 0..200 {
            let uri = match after {
                Some(a) => format!("/api/runs/s/records?limit={limit}&after={a}"),
                None => format!("/api/runs/s/records?limit={limit}"),
            };
            let (s, v) = call(&app, "GET", &uri, "").await;
            assert_eq!(s, 200, "{uri}: {v}");
            let page = v["records"].as_array().expect("records");
            assert!(page.len() <= limit);
            for r in page {
                got.push((
                    r["seq"].as_u64().expect("seq"),
                    r["kind"].as_str().expect("kind").to_owned(),
                ));
            }
            match v["next"].as_u64() {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(got, all, "limit {limit}");
    }

    // The watch of the whole log, then resumed after each record in turn.
    let (_, sse) = text(&app, "/api/runs/s/watch").await;
    assert_eq!(sse_records(&sse), all);
    for (i, (seq, _)) in all.iter().enumerate() {
        let req = axum::http::Request::builder()
            .uri("/api/runs/s/watch")
            .header("last-event-id", seq.to_string())
            .body(axum::body::Body::empty())?;
        let res = tower::ServiceExt::oneshot(app.clone(), req).await?;
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX).await?;
        let got = sse_records(&String::from_utf8_lossy(&bytes));
        assert_eq!(got, all[i + 1..], "resumed after {seq}");
    }
    h.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_limit_on_records_does_not_read_as_the_end() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = segments_host(dir.path()).await?;
    let app = router(h.clone(), InspectorOptions::default());
    let run = h.start::<Segments>("s", 0).await?;
    tokio::time::timeout(LIMIT, run.result()).await??;
    let (s, v) = call(&app, "GET", "/api/runs/s/records?limit=0", "").await;
    // Either refused as the listing refuses limit=0, or a page that says more
    // follows.
    assert!(
        s == 400 || !v["next"].is_null(),
        "limit=0 answered {s} {v}: an empty page with no `next` says the log is empty"
    );
    h.shutdown().await?;
    Ok(())
}
