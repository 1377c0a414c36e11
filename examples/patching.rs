//! Changing a workflow's code while runs are in flight, with `ctx.patched`.
//!
//! ```text
//! cargo run --example patching
//! ```
//!
//! Version 1 of an order workflow charges the card and waits for the warehouse's
//! `shipped` signal. A run is started and waits. Then the code changes: a receipt
//! email is to be sent between the charge and the wait. The host is shut down and
//! "redeployed" on the same store with the patched code (same workflow name, same
//! `VERSION`): the old run, woken by its signal, replays its log. Where the patch is
//! asked its log already has the signal wait, so `ctx.patched` answers false and it
//! takes the old branch (no email: that would not match what it recorded). A run
//! started on the new code reaches the patch for the first time: it records a
//! `Patched` marker and takes the new branch, and keeps taking it on every replay.
//!
//! A `VERSION` bump would do the same by keeping both definitions registered; a
//! patch keeps one definition with both branches, and the old branch is deleted
//! (`ctx.deprecate_patch`) once the old runs have finished.

use anyhow::{Context, ensure};
use reel::{Ctx, Event, Host, Workflow};

const DATA_DIR: &str = "reel-data/patching";

/// The code first deployed.
struct OrderV1;

impl Workflow for OrderV1 {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;

    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        let charge = ctx
            .step("charge", |s| {
                let key = s.idempotency_key().to_owned();
                async move { Ok::<_, String>(format!("charge {cents} ({key})")) }
            })
            .await?;
        let tracking: String = ctx.wait_for_signal("shipped").await?;
        Ok(format!("{charge}, no receipt, shipped as {tracking}"))
    }
}

/// The same workflow with a receipt email patched in.
struct OrderV2;

impl Workflow for OrderV2 {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;

    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        let charge = ctx
            .step("charge", |s| {
                let key = s.idempotency_key().to_owned();
                async move { Ok::<_, String>(format!("charge {cents} ({key})")) }
            })
            .await?;
        // True for runs that reach this point with this code, false for runs that
        // recorded something else here before the patch.
        let receipt = if ctx.patched("receipt-email") {
            ctx.step("email-receipt", |_| async move {
                println!("  (sending a receipt for {cents} cents)");
                Ok::<_, String>("receipt sent".to_owned())
            })
            .await?
        } else {
            "no receipt".to_owned()
        };
        let tracking: String = ctx.wait_for_signal("shipped").await?;
        Ok(format!("{charge}, {receipt}, shipped as {tracking}"))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match std::fs::remove_dir_all(DATA_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context(format!("wiping {DATA_DIR}")),
    }

    println!("deploying version 1");
    let host = Host::builder()
        .path(DATA_DIR)
        .register(OrderV1)
        .build()
        .await?;
    let old = host.start::<OrderV1>("order-old", 1999).await?;
    println!("order-old: {:?}", old.wait_until_suspended().await?);
    host.shutdown().await?;

    println!("redeploying with the receipt patch (same name, same VERSION)");
    let host = Host::builder()
        .path(DATA_DIR)
        .register(OrderV2)
        .build()
        .await?;
    let new = host.start::<OrderV2>("order-new", 4200).await?;
    println!("order-new: {:?}", new.wait_until_suspended().await?);

    let old = host.handle::<OrderV2>("order-old");
    old.signal("shipped", "TRACK-1", "ship-old").await?;
    new.signal("shipped", "TRACK-2", "ship-new").await?;
    let (old_out, new_out) = (old.result().await?, new.result().await?);
    println!("order-old -> {old_out}");
    println!("order-new -> {new_out}");
    ensure!(
        old_out.contains("no receipt"),
        "the old run took the new branch"
    );
    ensure!(
        new_out.contains("receipt sent"),
        "the new run took the old branch"
    );

    let markers = |events: Vec<Event>| {
        events
            .iter()
            .filter(|e| matches!(e, Event::Patched { .. }))
            .count()
    };
    let (old_markers, new_markers) = (markers(old.events().await?), markers(new.events().await?));
    println!("Patched markers: order-old {old_markers}, order-new {new_markers}");
    ensure!((old_markers, new_markers) == (0, 1));
    host.shutdown().await?;
    Ok(())
}
