//! A long-lived run: a shopping cart that takes operations as signals for as long
//! as the customer shops, and continues as new every 200 operations so that its
//! wake-ups stay cheap.
//!
//! ```text
//! cargo run --release --example entity
//! ```
//!
//! The cart applies each `add` through a step, so every operation is recorded once
//! and never applied twice. Without `continue_as_new`, each wake-up of the run
//! would replay every operation it ever took; with it, a wake-up replays at most
//! one segment of 200. The example sends 2,000 operations one after another
//! (each waits until the cart has applied the previous one), prints the time per
//! operation for the first and the last 200, shuts the host down half-way and
//! reopens it, and checks the total, the number of segments and that the old
//! segments are still readable.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use reel::{Ctx, Event, Host, Workflow};
use serde::{Deserialize, Serialize};

const DATA_DIR: &str = "reel-data/entity";
const OPS: u64 = 2_000;
const PER_SEGMENT: u64 = 200;

struct Cart;

#[derive(Serialize, Deserialize)]
struct CartState {
    items: u64,
    ops: u64,
}

impl Workflow for Cart {
    const NAME: &'static str = "cart";
    type Input = CartState;
    type Output = u64;

    async fn run(&self, ctx: Ctx, mut cart: CartState) -> reel::Result<u64> {
        for _ in 0..PER_SEGMENT {
            let add: u64 = ctx.wait_for_signal("add").await?;
            if add == 0 {
                return Ok(cart.items);
            }
            let items = cart.items;
            cart.items = ctx
                .step("add", move |_| async move { Ok::<_, String>(items + add) })
                .await?;
            cart.ops += 1;
        }
        ctx.continue_as_new::<Cart>(cart).await
    }
}

async fn open() -> reel::Result<Host> {
    Host::builder().path(DATA_DIR).register(Cart).build().await
}

/// Sends operations `from..to` one after another, each once the cart has applied
/// the previous one and waits again; returns the time each took.
async fn shop(host: &Host, from: u64, to: u64) -> anyhow::Result<Vec<Duration>> {
    let cart = host.handle::<Cart>("cart-1");
    let mut times = Vec::new();
    for op in from..to {
        let t = Instant::now();
        cart.signal("add", &1u64, &format!("op-{op}")).await?;
        // The signal flips the run to running; it suspends again once applied.
        cart.wait_until_suspended().await?;
        times.push(t.elapsed());
    }
    Ok(times)
}

fn mean_ms(times: &[Duration]) -> f64 {
    times.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / times.len().max(1) as f64
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(DATA_DIR);
    let host = open().await?;
    host.start::<Cart>("cart-1", CartState { items: 0, ops: 0 })
        .await?;
    let mut times = shop(&host, 0, OPS / 2).await?;
    host.shutdown().await?;

    // A restart half-way: the cart goes on from its current segment.
    let host = open().await?;
    times.extend(shop(&host, OPS / 2, OPS).await?);
    let cart = host.handle::<Cart>("cart-1");
    cart.signal("add", &0u64, "checkout").await?;
    let items = cart.result().await.context("the cart's result")?;
    ensure!(items == OPS, "the cart holds {items} items, not {OPS}");

    let info = cart.info().await?;
    let events = cart.events().await?;
    let segments = events
        .iter()
        .filter(|e| matches!(e, Event::ContinuedAsNew { .. }))
        .count() as u64;
    ensure!(segments == OPS / PER_SEGMENT, "{segments} segments");
    ensure!(
        u64::from(info.segment) == segments,
        "info says {}",
        info.segment
    );
    let log = info.log.context("the segment's size")?;
    let window = PER_SEGMENT as usize;
    println!(
        "{OPS} operations in {} segments: {:.3} ms per operation for the first {window}, \
         {:.3} ms for the last {window}; the log holds {} events, the current segment {} \
         ({} bytes)",
        segments + 1,
        mean_ms(&times[..window]),
        mean_ms(&times[times.len() - window..]),
        events.len(),
        log.events,
        log.bytes,
    );
    host.shutdown().await?;
    Ok(())
}
