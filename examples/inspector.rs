//! The run inspector: a few hundred runs of several workflows (some finished, some
//! failed after retries, some waiting for an approval, parents with children) and
//! the inspector's page and JSON endpoints served next to them.
//!
//! ```text
//! cargo run --example inspector
//! ```
//!
//! Open the address it prints (`http://127.0.0.1:7878/admin`, or another free
//! port when 7878 is taken). While it runs, an approval arrives every two seconds,
//! so open a waiting order to watch its timeline move. Stop it with Ctrl-C;
//! `REEL_EXAMPLE_SECS=N` stops it after N seconds (CI runs it briefly that way).
//! The store lives in `./reel-data/inspector`, wiped at start.

use std::ops::Deref;
use std::time::Duration;

use anyhow::{Context, ensure};
use reel::{Ctx, Host, RetryPolicy, StatusKind, StepError, Workflow};
use reel_inspector::InspectorOptions;
use serde::{Deserialize, Serialize};

const DATA_DIR: &str = "reel-data/inspector";

#[derive(Clone, Serialize, Deserialize)]
struct Order {
    id: u32,
    cents: u64,
    items: Vec<String>,
}

/// Reserves, charges, then waits for a human approval before shipping.
struct Checkout;
impl Workflow for Checkout {
    const NAME: &'static str = "checkout";
    type Input = Order;
    type Output = String;
    async fn run(&self, ctx: Ctx, order: Order) -> reel::Result<String> {
        let items = order.items.clone();
        ctx.step("reserve", move |_| {
            let items = items.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, String>(items.len())
            }
        })
        .await?;
        let cents = order.cents;
        let charge: String = ctx
            .step("charge", move |_| async move {
                tokio::time::sleep(Duration::from_millis(40)).await;
                Ok::<_, String>(format!("ch_{cents}"))
            })
            .await?;
        if order.id % 3 == 0 {
            let approval = ctx.approval("ship").await?;
            if !approval.approved {
                return Ok(format!("order {} held: {:?}", order.id, approval.feedback));
            }
        }
        ctx.sleep(Duration::from_millis(50)).await?;
        Ok(format!("order {} shipped, {charge}", order.id))
    }
}

/// A payment whose provider declines every few orders: three attempts, then it fails.
struct Payment;
impl Workflow for Payment {
    const NAME: &'static str = "payment";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let policy = RetryPolicy::default()
            .with_max_attempts(3)
            .with_backoff(Duration::from_millis(30), Duration::from_millis(100));
        ctx.step_with("authorize", policy, move |s| async move {
            if n % 4 == 0 {
                Err(StepError::retryable(format!(
                    "provider declined (attempt {})",
                    s.attempt()
                )))
            } else {
                Ok(n)
            }
        })
        .await
    }
}

/// A nightly report that fans out to one child per region.
struct Report;
impl Workflow for Report {
    const NAME: &'static str = "report";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let mut total = 0;
        for region in ["eu", "us", "ap"] {
            total += ctx
                .child::<Payment>(&format!("report-{n}-{region}"), n * 10 + 1)
                .await?;
        }
        Ok(total)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(DATA_DIR);
    let host = Host::builder()
        .path(DATA_DIR)
        .register(Checkout)
        .register(Payment)
        .register(Report)
        .build()
        .await?;

    let (mut waiting, mut ending) = (Vec::new(), Vec::new());
    for i in 0..240u32 {
        let order = Order {
            id: i,
            cents: 1_000 + u64::from(i) * 7,
            items: vec!["tea".into(); (i % 4 + 1) as usize],
        };
        waiting.push(
            host.start::<Checkout>(&format!("order-{i:04}"), order)
                .await?
                .deref()
                .clone(),
        );
    }
    for i in 0..60u32 {
        ending.push(
            host.start::<Payment>(&format!("payment-{i:04}"), i)
                .await?
                .deref()
                .clone(),
        );
    }
    for i in 0..10u32 {
        ending.push(
            host.start::<Report>(&format!("report-{i:02}"), i)
                .await?
                .deref()
                .clone(),
        );
    }
    // Payments and reports end (some fail); orders end or wait for their approval.
    let limit = Duration::from_secs(60);
    for h in &ending {
        let _ = tokio::time::timeout(limit, h.result::<serde_json::Value>()).await;
    }
    for h in &waiting {
        let _ = tokio::time::timeout(limit, h.wait_until_suspended()).await;
    }
    let counts = count(&host).await?;
    println!("runs: {counts:?}");
    for kind in [
        StatusKind::Completed,
        StatusKind::Failed,
        StatusKind::Suspended,
    ] {
        ensure!(
            counts.iter().any(|(k, n)| *k == kind && *n > 0),
            "no {} runs",
            kind.as_str()
        );
    }

    let app = axum::Router::new().nest(
        "/admin",
        reel_inspector::router(host.clone(), InspectorOptions::default()),
    );
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:7878").await {
        Ok(l) => l,
        Err(_) => tokio::net::TcpListener::bind("127.0.0.1:0").await?,
    };
    println!("inspector: http://{}/admin", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    // An approval every two seconds, so the page has something moving.
    let approver = host.clone();
    tokio::spawn(async move {
        for i in (0..240u32).step_by(3) {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let run = approver.run(&format!("order-{i:04}"));
            let _ = run
                .approve("ship", i % 2 == 0, Some("looked fine".into()))
                .await;
        }
    });

    match std::env::var("REEL_EXAMPLE_SECS") {
        Ok(secs) => {
            let secs: u64 = secs
                .parse()
                .context("REEL_EXAMPLE_SECS is a number of seconds")?;
            tokio::time::sleep(Duration::from_secs(secs)).await;
        }
        Err(_) => tokio::signal::ctrl_c().await?,
    }
    host.shutdown().await?;
    Ok(())
}

async fn count(host: &Host) -> anyhow::Result<Vec<(StatusKind, usize)>> {
    let runs = host.runs().await?;
    Ok(StatusKind::ALL
        .iter()
        .map(|k| (*k, runs.iter().filter(|r| r.status.kind() == *k).count()))
        .filter(|(_, n)| *n > 0)
        .collect())
}
