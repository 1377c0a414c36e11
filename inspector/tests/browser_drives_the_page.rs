//! The inspector page in a real browser (headless Chromium): the runs table loads
//! with its counts and filters, a run's timeline shows its steps and wait, and
//! updates by itself when a signal is sent; the page's cancel button (after its
//! confirmation dialog) cancels a run. Screenshots go to
//! `target/inspector-screenshots/`. Fails, naming the install command, when
//! Chromium is missing.

#[path = "common/cdp.rs"]
mod cdp;
mod common;

use std::path::PathBuf;
use std::time::Duration;

use cdp::Browser;
use common::{Failing, Quick, Waiter, host, serve};
use reel::RunStatus;
use reel_inspector::{InspectorOptions, router};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(15);

fn rows() -> &'static str {
    "document.querySelectorAll('#runs tbody tr[data-run]').length"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_shows_updates_and_cancels_runs() -> anyhow::Result<()> {
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../inspector-screenshots");
    std::fs::create_dir_all(&shots)?;
    let shots = shots.canonicalize()?;
    println!("screenshots in {}", shots.display());

    let dir = tempfile::tempdir()?;
    let h = host(dir.path()).await?;
    for i in 0..3 {
        let q = h.start::<Quick>(&format!("quick-{i}"), i).await?;
        tokio::time::timeout(LIMIT, q.result()).await??;
    }
    let f = h.start::<Failing>("charge-1", ()).await?;
    assert!(tokio::time::timeout(LIMIT, f.result()).await?.is_err());
    let order = h
        .start::<Waiter>("order-1", json!({"sku": "tea", "qty": 2}))
        .await?;
    let doomed = h.start::<Waiter>("order-2", json!({"sku": "jam"})).await?;
    tokio::time::timeout(LIMIT, order.wait_until_suspended()).await??;
    tokio::time::timeout(LIMIT, doomed.wait_until_suspended()).await??;
    let app = axum::Router::new().nest("/admin", router(h.clone(), InspectorOptions::default()));
    let addr = serve(app).await?;
    let base = format!("http://{addr}/admin");

    let mut b = tokio::task::block_in_place(Browser::launch)?;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        // The runs table, with counts per status.
        b.navigate(&base)?;
        b.wait_for("six runs", &format!("{} === 6", rows()))?;
        b.wait_for(
            "the counts",
            "document.querySelector('[data-status=suspended] b')?.textContent === '2'",
        )?;
        b.screenshot(&shots.join("runs.png"))?;
        // A status filter.
        b.eval("document.querySelector('[data-status=failed]').click()")?;
        b.wait_for(
            "the failed run only",
            &format!(
                "{} === 1 && document.querySelector('#runs tbody tr').dataset.run === 'charge-1'",
                rows()
            ),
        )?;
        // Open a run from the table.
        b.eval("location.hash = '#/'")?;
        b.wait_for("six runs again", &format!("{} === 6", rows()))?;
        b.eval("document.querySelector('tr[data-run=\"order-1\"] a').click()")?;
        b.wait_for(
            "its timeline",
            "document.querySelector('[data-row=\"step prepare\"] .bar.step.ok') \
            && document.querySelector('[data-row=\"wait signal go\"] .bar.open')",
        )?;
        b.wait_for(
            "suspended",
            "document.querySelector('#status').textContent === 'suspended'",
        )?;
        Ok(())
    })?;

    // A signal from outside the page: the timeline moves by itself.
    order.signal("go", &json!({"paid": true}), "pay-1").await?;
    tokio::time::timeout(LIMIT, order.result()).await??;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        b.wait_for(
            "the signal in the records",
            "document.querySelector('#events tr[data-kind=SignalReceived]')",
        )?;
        b.wait_for(
            "the finish step",
            "document.querySelector('[data-row=\"step finish\"] .bar.step.ok')",
        )?;
        b.wait_for(
            "completed",
            "document.querySelector('#events tr[data-kind=RunCompleted]') \
            && document.querySelector('#status').textContent === 'completed'",
        )?;
        let payload = b.eval(
            "document.querySelector('#events tr[data-kind=SignalReceived] pre').textContent",
        )?;
        assert!(
            payload
                .as_str()
                .is_some_and(|p| p.contains("\"paid\": true")),
            "{payload}"
        );
        b.screenshot(&shots.join("run.png"))?;

        // Cancel a run with the page's button, through its confirmation.
        b.eval("location.hash = '#/run/order-2'")?;
        b.wait_for(
            "the cancel button",
            "document.querySelector('[data-action=cancel]') \
            && document.querySelector('#status').textContent === 'suspended'",
        )?;
        b.eval("document.querySelector('[data-action=cancel]').click()")?;
        assert_eq!(b.dialogs, ["cancel run order-2?"]);
        b.wait_for(
            "cancelled",
            "document.querySelector('#status').textContent === 'cancelled'",
        )?;
        b.wait_for(
            "the cancel in the records",
            "document.querySelector('#events tr[data-kind=RunCancelled]')",
        )?;
        b.screenshot(&shots.join("cancelled.png"))?;
        Ok(())
    })?;
    assert_eq!(doomed.status().await?, RunStatus::Cancelled);
    drop(b);
    h.shutdown().await?;
    Ok(())
}
