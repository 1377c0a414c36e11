//! `Host::signal_with_start` on two hosts sharing a database (`PgStore::join`): a
//! call on the host that does not own the run's partition creates the run with its
//! signal (the owner runs it, woken by mail), later calls from either host reach
//! it in the order they were made (a signal the owner delivers itself waits for
//! the letters posted before it), a retried signal id is delivered once, and calls
//! racing from both hosts on a new id create one run and deliver both signals. So
//! do plain starts racing from both hosts: one creates the run, the other finds it
//! (the writer reports the duplicate key as such, not the aborted transaction
//! that the statements pipelined after it get). Sixty signals sent at once from
//! both hosts (the owner applying letters before each of its own) all return and
//! all land once, before a last signal sent afterwards.

mod support;
// The cart of reel's own signal-with-start tests.
#[allow(unreachable_pub)]
#[path = "../../tests/common/cart.rs"]
mod cart;

use std::time::Duration;

use cart::{Cart, received};
use reel::{Ctx, Host, Workflow};
use reel_postgres::partition_of;

async fn host(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Cart)
        .register(Counter)
        .build()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_with_start_across_hosts_on_postgres() -> anyhow::Result<()> {
    let url = support::database("signal_with_start").await;
    let hosts = [host(&url, "host-0").await?, host(&url, "host-1").await?];
    let owners = support::spread_leases(&url, "host-", 2, 128).await;

    for n in 0..12 {
        let id = format!("cart-{n}");
        let owner = owners[partition_of(&id) as usize];
        let (mine, other) = (&hosts[owner], &hosts[1 - owner]);
        // Created by the host that does not own it; the owner runs it.
        other
            .signal_with_start::<Cart, _>(&id, format!("owner-{n}"), "add", "apple", "m-1")
            .await
            .map_err(|e| anyhow::anyhow!("create {id}: {e}"))?;
        // To the existing run, by mail from the other host, then retried.
        other
            .signal_with_start::<Cart, _>(&id, "ignored".into(), "add", "pear", "m-2")
            .await?;
        other
            .signal_with_start::<Cart, _>(&id, "ignored".into(), "add", "pear", "m-2")
            .await?;
        mine.signal_with_start::<Cart, _>(&id, "ignored".into(), "add", "checkout", "m-3")
            .await?;
        let cart = other.handle::<Cart>(&id);
        let items = tokio::time::timeout(Duration::from_secs(60), cart.result())
            .await
            .map_err(|_| anyhow::anyhow!("{id} did not complete"))??;
        assert_eq!(
            items,
            [format!("owner-{n}"), "apple".into(), "pear".into()],
            "{id}"
        );
        assert_eq!(
            received(&cart.events().await?),
            ["m-1", "m-2", "m-3"],
            "{id}"
        );
    }

    // Both hosts at once on new ids: one run each, both signals in it.
    for n in 0..8 {
        let id = format!("race-{n}");
        let (a, b) = tokio::join!(
            hosts[0].signal_with_start::<Cart, _>(&id, "from-a".into(), "add", "a", "from-a"),
            hosts[1].signal_with_start::<Cart, _>(&id, "from-b".into(), "add", "b", "from-b"),
        );
        a.map_err(|e| anyhow::anyhow!("race a {id}: {e}"))?;
        b.map_err(|e| anyhow::anyhow!("race b {id}: {e}"))?;
        hosts[0]
            .handle::<Cart>(&id)
            .signal("add", "checkout", "done")
            .await?;
        let cart = hosts[1].handle::<Cart>(&id);
        let items = tokio::time::timeout(Duration::from_secs(60), cart.result())
            .await
            .map_err(|_| anyhow::anyhow!("{id} did not complete"))??;
        assert_eq!(
            items.len(),
            3,
            "{id}: its creator's input and both items: {items:?}"
        );
        let mut ids = received(&cart.events().await?);
        ids.sort();
        assert_eq!(ids, ["done", "from-a", "from-b"], "{id}");
    }
    for h in hosts {
        h.shutdown().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_racing_on_two_hosts_make_one_run_on_postgres() -> anyhow::Result<()> {
    let url = support::database("start_race").await;
    let hosts = [host(&url, "host-0").await?, host(&url, "host-1").await?];
    support::spread_leases(&url, "host-", 2, 128).await;
    for n in 0..16 {
        let id = format!("order-{n}");
        let (a, b) = tokio::join!(
            hosts[0].start::<Cart>(&id, "from-a".into()),
            hosts[1].start::<Cart>(&id, "from-b".into()),
        );
        a.map_err(|e| anyhow::anyhow!("start on host-0 of {id}: {e}"))?;
        b.map_err(|e| anyhow::anyhow!("start on host-1 of {id}: {e}"))?;
        hosts[n % 2]
            .handle::<Cart>(&id)
            .signal("add", "checkout", "done")
            .await?;
        let items = tokio::time::timeout(
            Duration::from_secs(60),
            hosts[1 - n % 2].handle::<Cart>(&id).result(),
        )
        .await
        .map_err(|_| anyhow::anyhow!("{id} did not complete"))??;
        assert_eq!(items.len(), 1, "{id}: one run, one creator: {items:?}");
    }
    for h in hosts {
        h.shutdown().await?;
    }
    Ok(())
}

/// Counts `tick` signals until one says `stop`.
struct Counter;
impl Workflow for Counter {
    const NAME: &'static str = "counter";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let mut n = 0;
        while ctx.wait_for_signal::<bool>("tick").await? {
            n += 1;
        }
        Ok(n)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_signals_from_both_hosts_all_arrive_on_postgres() -> anyhow::Result<()> {
    let url = support::database("signal_storm").await;
    let hosts = [host(&url, "host-0").await?, host(&url, "host-1").await?];
    let owners = support::spread_leases(&url, "host-", 2, 128).await;
    let id = "storm";
    let owner = owners[partition_of(id) as usize];
    hosts[1 - owner].start::<Counter>(id, ()).await?;
    // The owner delivers its own signals while letters from the other host keep
    // arriving: every call returns, and every signal lands once.
    let sends = (0..60).map(|i| {
        let host = &hosts[i % 2];
        async move {
            host.handle::<Counter>(id)
                .signal("tick", &true, &format!("t-{i}"))
                .await
        }
    });
    tokio::time::timeout(
        Duration::from_secs(60),
        futures::future::try_join_all(sends),
    )
    .await
    .map_err(|_| anyhow::anyhow!("signals did not return"))??;
    hosts[owner]
        .handle::<Counter>(id)
        .signal("tick", &false, "stop")
        .await?;
    let n = tokio::time::timeout(
        Duration::from_secs(60),
        hosts[1 - owner].handle::<Counter>(id).result(),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the run did not complete"))??;
    assert_eq!(n, 60, "every tick counted once");
    for h in hosts {
        h.shutdown().await?;
    }
    Ok(())
}
