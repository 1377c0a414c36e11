//! The listing endpoint's parameters: an unknown one (a typo such as `stauts`)
//! is a 400 naming it, where it used to be ignored and the page listed every
//! run; `version` filters by workflow version, as `RunFilter::version` does.

mod common;

use std::time::Duration;

use common::{Waiter, call, host};
use reel_inspector::{InspectorOptions, router};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_parameters_are_refused_and_version_filters() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let h = host(dir.path()).await?;
    let w = h.start::<Waiter>("w", json!(1)).await?;
    tokio::time::timeout(LIMIT, w.wait_until_suspended()).await??;
    let app = router(h.clone(), InspectorOptions::default());

    let (s, v) = call(&app, "GET", "/api/runs?stauts=failed", "").await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|m| m.contains("stauts")),
        "{v}"
    );

    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["runs"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .filter_map(|r| r["run_id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (s, v) = call(&app, "GET", "/api/runs?version=1", "").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(ids(&v), ["w"]);
    let (s, v) = call(&app, "GET", "/api/runs?version=2", "").await;
    assert_eq!(s, 200, "{v}");
    assert!(ids(&v).is_empty(), "{v}");
    let (s, v) = call(&app, "GET", "/api/runs?version=x", "").await;
    assert_eq!(s, 400, "{v}");
    // Empty values still mean "no filter", as the web page sends them.
    let (s, v) = call(&app, "GET", "/api/runs?workflow=&parent=&cursor=", "").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(ids(&v), ["w"]);
    h.shutdown().await?;
    Ok(())
}
