//! The tour of reel: an order checkout that charges a card, sleeps durably, waits for
//! a payment signal and a human approval, then ships.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! The store lives in `./reel-data/quickstart` (wiped at start, so reruns begin
//! afresh). At the end the run's durable event log is printed as a timeline: that log
//! is all reel keeps, and everything the handler did can be read back from it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use reel::{Ctx, Event, Host, RunHandle, RunStatus, Workflow};
use serde::{Deserialize, Serialize};

const DATA_DIR: &str = "reel-data/quickstart";

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Order {
    id: String,
    cents: u64,
    items: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Payment {
    provider_ref: String,
    cents: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Receipt {
    order: String,
    charge_id: String,
    payment_ref: String,
    tracking: String,
    approver_note: Option<String>,
}

/// The workflow. `executions` only counts how often the handler is (re)run, to show
/// that every wake-up replays it from the top.
struct Checkout {
    executions: Arc<AtomicU32>,
}

impl Workflow for Checkout {
    const NAME: &'static str = "checkout";
    type Input = Order;
    type Output = Receipt;

    async fn run(&self, ctx: Ctx, order: Order) -> reel::Result<Receipt> {
        // Logging is the one side effect that may repeat on replay: it shows that the
        // handler runs again from the top on every wake-up.
        let n = self.executions.fetch_add(1, Ordering::SeqCst) + 1;
        println!("  [handler] execution #{n} of run `{}`", ctx.run_id());

        // A step: its body runs at least once, and never again once its result is
        // recorded. The idempotency key is stable across retries and crashes, so a
        // payment provider can deduplicate with it.
        let cents = order.cents;
        let charge_id = ctx
            .step("charge-card", |s| async move {
                println!(
                    "  [step charge-card] attempt {}, idempotency key `{}`, charging {cents} cents",
                    s.attempt(),
                    s.idempotency_key()
                );
                Ok::<_, String>(format!("ch_{cents}"))
            })
            .await?;

        // A durable sleep: a timer in the store, not a tokio sleep. It survives a
        // restart and fires at once if it came due while the process was down.
        ctx.sleep(Duration::from_millis(200)).await?;

        // Waits for a signal sent by someone else (a webhook handler, say). A signal
        // sent before the wait is buffered, so the order of the two does not matter.
        let payment: Payment = ctx.wait_for_signal("payment").await?;
        if payment.cents != order.cents {
            return Err(reel::Error::failed(format!(
                "paid {} cents for an order of {}",
                payment.cents, order.cents
            )));
        }

        // A human decision.
        let decision = ctx.approval("ship").await?;
        if !decision.approved {
            return Err(reel::Error::failed("shipping was not approved"));
        }

        let items = order.items.len();
        let tracking = ctx
            .step("ship", |s| async move {
                println!(
                    "  [step ship] shipping {items} item(s), idempotency key `{}`",
                    s.idempotency_key()
                );
                Ok::<_, String>(format!("TRACK-{items}-0042"))
            })
            .await?;

        Ok(Receipt {
            order: order.id,
            charge_id,
            payment_ref: payment.provider_ref,
            tracking,
            approver_note: decision.feedback,
        })
    }
}

/// Polls the run (printing each status change) until it is suspended on a wait for
/// the signal `name`, as its log shows. Polling keeps the example short; a service
/// would simply send the signal, which is buffered if the run is not waiting yet.
async fn wait_until_awaiting(h: &RunHandle<Checkout>, name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = None;
    loop {
        let status = h.status().await?;
        if last.as_ref() != Some(&status) {
            println!("status: {status:?}");
            last = Some(status.clone());
        }
        match &status {
            RunStatus::Suspended { .. } => {
                let awaited = h
                    .events()
                    .await?
                    .iter()
                    .any(|e| matches!(e, Event::SignalAwaited { name: n, .. } if n == name));
                if awaited {
                    return Ok(());
                }
            }
            RunStatus::Running => {}
            other => bail!("run ended while waiting for `{name}`: {other:?}"),
        }
        ensure!(
            Instant::now() < deadline,
            "run did not start waiting for `{name}` within 10 s (status {status:?})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One line of the timeline: the event kind and its key fields. `Payload`'s Debug
/// prints the decoded MessagePack value.
fn describe(e: &Event) -> String {
    match e {
        Event::RunStarted {
            workflow,
            version,
            input,
        } => format!("{workflow} v{version}, input {input:?}"),
        Event::StepStarted { id, attempt } => format!("step `{id}` attempt {attempt}"),
        Event::StepCompleted { id, output } => format!("step `{id}` -> {output:?}"),
        Event::StepFailed {
            id,
            attempt,
            error,
            retry_at,
        } => format!("step `{id}` attempt {attempt} failed: {error} (retry at {retry_at:?})"),
        Event::TimerScheduled { id, fire_at } => format!("timer `{id}` due at {fire_at} ms"),
        Event::TimerFired { id } => format!("timer `{id}`"),
        Event::SignalAwaited { id, name, deadline } => match deadline {
            Some(d) => format!("`{id}` waits for `{name}` until {d} ms"),
            None => format!("`{id}` waits for `{name}`"),
        },
        Event::SignalReceived {
            name,
            signal_id,
            payload,
        } => format!("`{name}` (signal id `{signal_id}`): {payload:?}"),
        Event::Recorded { id, kind, value } => format!("{kind} `{id}` = {value:?}"),
        Event::ChildStarted {
            id,
            workflow,
            run_id,
            ..
        } => format!("`{id}`: {workflow} run `{run_id}`"),
        Event::ChildCompleted { id, result } => format!("`{id}` -> {result:?}"),
        Event::CancelRequested { reason } | Event::RunCancelled { reason } => {
            format!("reason: {reason}")
        }
        Event::RunCompleted { output } => format!("output {output:?}"),
        Event::RunFailed { error } => format!("error: {error}"),
        // `Event` is non-exhaustive: a newer reel may add kinds.
        other => format!("{other:?}"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    match std::fs::remove_dir_all(DATA_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context(format!("wiping {DATA_DIR}")),
    }

    let executions = Arc::new(AtomicU32::new(0));
    let host = Host::builder()
        .path(DATA_DIR)
        .register(Checkout {
            executions: executions.clone(),
        })
        .build()
        .await
        .context("opening the host")?;
    println!("host open on ./{DATA_DIR}");

    let order = Order {
        id: "order-42".into(),
        cents: 1999,
        items: vec!["book".into(), "lamp".into()],
    };
    // `start` is idempotent on the run id: calling it again returns the same run.
    let h = host.start::<Checkout>("order-42", order).await?;
    println!("started run `{}`", h.id());

    wait_until_awaiting(&h, "payment").await?;
    let payment = Payment {
        provider_ref: "psp-7781".into(),
        cents: 1999,
    };
    println!("main: sending signal `payment` with id `evt-1`");
    h.signal("payment", &payment, "evt-1").await?;
    // A retried delivery with the same signal id is dropped, so webhooks can retry.
    h.signal("payment", &payment, "evt-1").await?;
    println!("main: sent it again with the same id: deduplicated");

    wait_until_awaiting(&h, "approval:ship").await?;
    println!("main: approving `ship`");
    h.approve("ship", true, Some("looks good".into())).await?;

    let receipt = h.result().await?;
    println!("status: {:?}", h.status().await?);
    println!("result: {receipt:#?}");
    ensure!(receipt.approver_note.as_deref() == Some("looks good"));
    ensure!(receipt.payment_ref == "psp-7781");

    let events = h.events().await?;
    println!();
    println!(
        "event log of `{}` ({} events; the handler ran {} times, each a replay from the top):",
        h.id(),
        events.len(),
        executions.load(Ordering::SeqCst)
    );
    println!("{:>4}  {:<15} details", "seq", "event");
    for (seq, e) in events.iter().enumerate() {
        println!("{seq:>4}  {:<15} {}", e.kind(), describe(e));
    }
    let payments = events
        .iter()
        .filter(|e| matches!(e, Event::SignalReceived { name, .. } if name == "payment"))
        .count();
    ensure!(payments == 1, "the duplicate signal was not dropped");

    host.shutdown().await?;
    println!();
    println!("done in {:.2?}", started.elapsed());
    Ok(())
}
