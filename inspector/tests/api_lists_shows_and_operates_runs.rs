//! Through the admin router: a listing pages with a cursor and filters by status
//! and workflow, counts group by status, one run shows its status and children,
//! its records come with payloads as JSON, its watch streams them as server-sent
//! events, and a signal and a cancel sent over HTTP move runs. The runs and their
//! logs read the same through a new host on the same store.

mod common;

use std::time::Duration;

use common::{Failing, Quick, Waiter, call, host, text};
use reel::RunStatus;
use reel_inspector::{InspectorOptions, router};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(10);

fn ids(v: &Value) -> Vec<String> {
    v["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["run_id"].as_str().expect("id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_lists_shows_and_operates_runs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = host(dir.path()).await?;
    for i in 0..3 {
        let r = h.start::<Quick>(&format!("q{i}"), i).await?;
        tokio::time::timeout(LIMIT, r.result()).await??;
    }
    let failed = h.start::<Failing>("f1", ()).await?;
    assert!(tokio::time::timeout(LIMIT, failed.result()).await?.is_err());
    let w1 = h.start::<Waiter>("w1", json!({"order": 7})).await?;
    let w2 = h.start::<Waiter>("w2", json!(null)).await?;
    tokio::time::timeout(LIMIT, w1.wait_until_suspended()).await??;
    tokio::time::timeout(LIMIT, w2.wait_until_suspended()).await??;
    let app = router(h.clone(), InspectorOptions::default());

    // Paging: three pages of two, each named by the cursor of the one before,
    // together the whole listing in start order.
    let (s, all) = call(&app, "GET", "/api/runs?limit=100&order=asc", "").await;
    assert_eq!(s, 200, "{all}");
    let all = ids(&all);
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(sorted, ["f1", "q0", "q1", "q2", "w1", "w2"]);
    let (s, p1) = call(&app, "GET", "/api/runs?limit=2&order=asc", "").await;
    assert_eq!(s, 200, "{p1}");
    let next = p1["next"].as_str().expect("a next page");
    let (_, p2) = call(
        &app,
        "GET",
        &format!("/api/runs?limit=2&order=asc&cursor={next}"),
        "",
    )
    .await;
    let next = p2["next"].as_str().expect("a third page");
    let (_, p3) = call(
        &app,
        "GET",
        &format!("/api/runs?limit=2&order=asc&cursor={next}"),
        "",
    )
    .await;
    assert_eq!(p3["next"], Value::Null);
    let paged: Vec<String> = [ids(&p1), ids(&p2), ids(&p3)].concat();
    assert_eq!(paged, all);

    // Filters.
    let (_, f) = call(
        &app,
        "GET",
        "/api/runs?status=suspended,failed&order=asc",
        "",
    )
    .await;
    assert_eq!(ids(&f), ["f1", "w1", "w2"]);
    let (_, f) = call(&app, "GET", "/api/runs?workflow=quick&order=desc", "").await;
    assert_eq!(ids(&f), ["q2", "q1", "q0"]);
    assert_eq!(f["runs"][0]["status"], "completed");

    let (_, c) = call(&app, "GET", "/api/count", "").await;
    assert_eq!(c["total"], 6);
    assert_eq!(c["by_status"]["completed"], 3);
    assert_eq!(c["by_status"]["failed"], 1);
    assert_eq!(c["by_status"]["suspended"], 2);

    // One run, and the failed one's error.
    let (s, run) = call(&app, "GET", "/api/runs/w1", "").await;
    assert_eq!(s, 200);
    assert_eq!(run["workflow"], "waiter");
    assert_eq!(run["status"], "suspended");
    assert!(run["created_at"].as_u64().is_some_and(|t| t > 0));
    let (_, f1) = call(&app, "GET", "/api/runs/f1", "").await;
    assert!(
        f1["error"]
            .as_str()
            .is_some_and(|e| e.contains("card declined")),
        "{f1}"
    );

    // Records with the payloads as JSON; paging by sequence number.
    let (_, recs) = call(&app, "GET", "/api/runs/w1/records", "").await;
    let recs = recs["records"].as_array().expect("records").clone();
    assert_eq!(recs[0]["kind"], "RunStarted");
    assert_eq!(recs[0]["input"], json!({"order": 7}));
    assert!(
        recs.iter()
            .any(|r| r["kind"] == "StepCompleted" && r["output"] == json!({"ready": true}))
    );
    let (_, tail) = call(&app, "GET", "/api/runs/w1/records?after=0&limit=1", "").await;
    assert_eq!(tail["records"][0]["seq"], recs[1]["seq"]);

    // The watch: the records as server-sent events, ids = sequence numbers; it
    // stays open while the run waits and ends after the record that ends it.
    let live = tokio::spawn({
        let app = app.clone();
        async move { text(&app, "/api/runs/w1/watch").await }
    });

    // A signal over HTTP finishes w1; its output is in the records.
    let (s, ok) = call(
        &app,
        "POST",
        "/api/runs/w1/signal",
        r#"{"name":"go","payload":{"by":"http"}}"#,
    )
    .await;
    assert_eq!(s, 202, "{ok}");
    tokio::time::timeout(LIMIT, w1.result()).await??;
    let (s, sse) = tokio::time::timeout(LIMIT, live).await??;
    assert_eq!(s, 200);
    assert!(sse.contains("event: record"), "{sse}");
    assert!(sse.contains("\"kind\":\"RunStarted\""), "{sse}");
    assert!(sse.contains("id: 0"), "{sse}");
    assert!(sse.contains("\"kind\":\"RunCompleted\""), "{sse}");
    let (_, recs) = call(&app, "GET", "/api/runs/w1/records", "").await;
    let last = recs["records"]
        .as_array()
        .and_then(|r| r.last())
        .expect("last")
        .clone();
    assert_eq!(last["kind"], "RunCompleted");
    assert_eq!(last["output"]["go"], json!({"by": "http"}));
    // Only the records after the one it names come through a watch that resumes.
    let seq = last["seq"].as_u64().expect("seq");
    let (_, sse) = text(&app, &format!("/api/runs/w1/watch?after={}", seq - 1)).await;
    assert_eq!(sse.matches("event: record").count(), 1, "{sse}");
    // Kept to the run created when its info says: none of another run's records.
    let (_, info) = call(&app, "GET", "/api/runs/w1", "").await;
    let created = info["created_at"].as_u64().expect("created_at");
    let at = |created: u64| format!("/api/runs/w1/watch?after={}&created_at={created}", seq - 1);
    let (_, sse) = text(&app, &at(created)).await;
    assert_eq!(sse.matches("event: record").count(), 1, "{sse}");
    let (_, sse) = text(&app, &at(created + 1)).await;
    assert_eq!(sse.matches("event: record").count(), 0, "{sse}");

    // A cancel over HTTP ends w2.
    let (s, _) = call(
        &app,
        "POST",
        "/api/runs/w2/cancel",
        r#"{"reason":"operator"}"#,
    )
    .await;
    assert_eq!(s, 202);
    assert!(tokio::time::timeout(LIMIT, w2.result()).await?.is_err());
    assert_eq!(w2.status().await?, RunStatus::Cancelled);
    h.shutdown().await?;

    // A new host on the same store shows the same.
    let h = host(dir.path()).await?;
    let app = router(h.clone(), InspectorOptions::default());
    let (_, c) = call(&app, "GET", "/api/count", "").await;
    assert_eq!(c["by_status"]["completed"], 4);
    assert_eq!(c["by_status"]["cancelled"], 1);
    let (_, again) = call(&app, "GET", "/api/runs/w1/records", "").await;
    assert_eq!(
        again["records"].as_array().and_then(|r| r.last()),
        Some(&last)
    );
    let (s, page) = text(&app, "/").await;
    assert_eq!(s, 200);
    assert!(page.contains("reel inspector") && page.contains("EventSource"));
    h.shutdown().await?;
    Ok(())
}
