//! `StepCtx::idempotency_key()` is distinct between steps of different runs even when
//! run ids and step names contain the separator: step `charge` of run
//! `order-1/refund` and step `refund/charge` of run `order-1` get different keys, so a
//! downstream API deduplicating on the key does not drop one charge as a retry of the
//! other.
//!
//! Why it fails without the fix: the key is `format!("{run_id}/{step_id}")`, and
//! both pairs join to `order-1/refund/charge`.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Host, Workflow};

/// Runs one step, named by its input, and returns that step's idempotency key.
struct KeyOf;

impl Workflow for KeyOf {
    const NAME: &'static str = "key-of";
    /// The step's name.
    type Input = String;
    type Output = String;

    async fn run(&self, ctx: Ctx, step: String) -> reel::Result<String> {
        ctx.step(&step, |s| {
            let key = s.idempotency_key().to_owned();
            async move { Ok::<_, String>(key) }
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_differ_when_run_ids_and_step_names_contain_the_separator() -> anyhow::Result<()> {
    let host = Host::builder().in_memory().register(KeyOf).build().await?;
    let limit = Duration::from_secs(3);
    let refund = host
        .start::<KeyOf>("order-1/refund", "charge".to_owned())
        .await?;
    let refund = within(limit, "run `order-1/refund`", refund.result()).await??;
    let order = host
        .start::<KeyOf>("order-1", "refund/charge".to_owned())
        .await?;
    let order = within(limit, "run `order-1`", order.result()).await??;
    assert_ne!(
        refund, order,
        "run `order-1/refund` step `charge` and run `order-1` step `refund/charge` share a key"
    );
    host.shutdown().await?;
    Ok(())
}
