//! Publishing a run's progress with `ctx.publish`, read from outside with
//! `RunHandle::wait_published` and `RunHandle::published`.
//!
//! ```text
//! cargo run --example progress
//! ```
//!
//! An order workflow publishes each stage it reaches under a key of its own:
//! `paid` (the amount charged), `packed` (the parcel count) and `shipped` (the
//! tracking number), and its current stage under `stage`, where the latest value
//! wins. A reader task waits for each stage in turn with `wait_published`, which
//! answers at once if the run has published the key, else waits until it does:
//! nobody polls. The warehouse waits for `packed` the same way before it sends
//! the `shipped` signal. Published values are events of the run's durable log, so
//! they can still be read after the run has finished or the host has restarted,
//! and a replay does not publish them twice.

use std::time::Duration;

use anyhow::{Context, ensure};
use reel::{Ctx, Event, Host, Workflow};

const DATA_DIR: &str = "reel-data/progress";

struct Order;

impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;

    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        let charged = ctx
            .step("charge", |_| async move { Ok::<_, String>(cents) })
            .await?;
        ctx.publish("paid", &charged).await?;
        ctx.publish("stage", "paid").await?;
        let parcels = ctx
            .step("pack", |_| async {
                // Some work, during which readers see the "paid" stage.
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, String>(2u32)
            })
            .await?;
        ctx.publish("packed", &parcels).await?;
        ctx.publish("stage", "packed").await?;
        let tracking: String = ctx.wait_for_signal("shipped").await?;
        ctx.publish("shipped", &tracking).await?;
        ctx.publish("stage", "shipped").await?;
        Ok(format!(
            "{cents} cents, {parcels} parcels, shipped as {tracking}"
        ))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match std::fs::remove_dir_all(DATA_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context(format!("wiping {DATA_DIR}")),
    }
    let host = Host::builder()
        .path(DATA_DIR)
        .register(Order)
        .build()
        .await?;
    let run = host.start::<Order>("order-7", 2500).await?;

    // The reader: waits for each stage in turn.
    let reader = tokio::spawn({
        let run = run.clone();
        async move {
            let paid: u32 = run.wait_published("paid").await?;
            println!("reader: paid {paid} cents");
            let parcels: u32 = run.wait_published("packed").await?;
            println!("reader: packed in {parcels} parcels");
            let tracking: String = run.wait_published("shipped").await?;
            println!("reader: shipped as {tracking}");
            anyhow::Ok(tracking)
        }
    });

    // The warehouse ships once the order is packed.
    let parcels: u32 = run.wait_published("packed").await?;
    let stage: Option<String> = run.published("stage").await?;
    println!("warehouse: stage {stage:?}, {parcels} parcels to ship");
    run.signal("shipped", "TRACK-7", "ship-1").await?;
    println!("result: {}", run.result().await?);

    ensure!(reader.await?? == "TRACK-7");
    let stage: Option<String> = run.published("stage").await?;
    println!("stage, read after the end: {stage:?}");
    ensure!(stage.as_deref() == Some("shipped"));
    host.shutdown().await?;

    // After a restart the values are still there, once each in the log.
    let host = Host::builder()
        .path(DATA_DIR)
        .register(Order)
        .build()
        .await?;
    let run = host.handle::<Order>("order-7");
    let stage: Option<String> = run.published("stage").await?;
    let published = run
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, Event::Published { .. }))
        .count();
    println!("after a restart: stage {stage:?}, {published} Published events");
    ensure!(stage.as_deref() == Some("shipped") && published == 6);
    host.shutdown().await?;
    Ok(())
}
