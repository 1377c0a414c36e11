//! `Host::run` gives an untyped handle: a tool that has no Rust type for a run can
//! signal it with a JSON value, read its status, records and output as JSON, and
//! cancel it; `typed` checks the workflow before handing out a `RunHandle`; an
//! unknown run answers `UnknownRun`.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Error, RunStatus, StatusKind, Workflow};
use serde::{Deserialize, Serialize};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(10);

#[derive(Serialize, Deserialize)]
struct Item {
    sku: String,
    qty: u32,
}

#[derive(Serialize, Deserialize)]
struct Receipt {
    lines: Vec<Item>,
    total: u32,
}

/// Collects items until `close`.
struct Cart;
impl Workflow for Cart {
    const NAME: &'static str = "cart";
    type Input = ();
    type Output = Receipt;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Receipt> {
        let mut lines = Vec::new();
        loop {
            let item: Option<Item> = ctx.wait_for_signal("item").await?;
            match item {
                Some(item) => lines.push(item),
                None => break,
            }
        }
        let total = lines.iter().map(|l| l.qty).sum();
        Ok(Receipt { lines, total })
    }
}

/// Another workflow, for the type check.
struct Other;
impl Workflow for Other {
    const NAME: &'static str = "other";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untyped_handle_signals_reads_and_checks_the_type() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_two(dir.path(), Cart, Other).await?;
    host.start::<Cart>("c1", ()).await?;

    let run = host.run("c1");
    assert_eq!(run.id(), "c1");
    within(LIMIT, "the run to wait", run.wait_until_suspended()).await??;
    run.signal("item", &json!({"sku": "tea", "qty": 2}), "s1")
        .await?;
    run.signal("item", &json!({"sku": "jam", "qty": 1}), "s2")
        .await?;
    run.signal("item", &serde_json::Value::Null, "s3").await?;

    let output: serde_json::Value = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(
        output,
        json!({"lines": [{"sku": "tea", "qty": 2}, {"sku": "jam", "qty": 1}], "total": 3})
    );
    assert_eq!(run.status().await?, RunStatus::Completed);
    assert_eq!(run.status().await?.kind(), StatusKind::Completed);
    assert!(!run.records().await?.is_empty());

    // The typed handle is handed out only for the right workflow.
    let typed = run.typed::<Cart>().await?;
    assert_eq!(typed.result().await?.total, 3);
    match run.typed::<Other>().await {
        Err(Error::WorkflowMismatch {
            run_id,
            expected,
            found,
        }) => {
            assert_eq!(
                (run_id.as_str(), expected.as_str(), found.as_str()),
                ("c1", "other", "cart")
            );
        }
        other => panic!("expected WorkflowMismatch, got {other:?}"),
    }

    // A signal whose JSON does not fit the wait's type parks nothing else: the
    // run reads it as a decode error; here the run is finished, so it is refused.
    assert!(matches!(
        run.signal("item", &json!({"sku": 1}), "s4").await,
        Err(Error::RunFinished(_))
    ));

    let unknown = host.run("nope");
    assert!(matches!(unknown.status().await, Err(Error::UnknownRun(r)) if r == "nope"));
    assert!(matches!(
        unknown.typed::<Cart>().await,
        Err(Error::UnknownRun(_))
    ));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untyped_handle_cancels() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Cart).await?;
    host.start::<Cart>("c2", ()).await?;
    let run = host.run("c2");
    within(LIMIT, "the run to wait", run.wait_until_suspended()).await??;
    within(LIMIT, "the cancel", run.cancel("operator")).await??;
    assert_eq!(run.status().await?, RunStatus::Cancelled);
    assert!(matches!(
        run.result::<serde_json::Value>().await,
        Err(Error::Cancelled(r)) if r == "operator"
    ));
    host.shutdown().await?;
    Ok(())
}
