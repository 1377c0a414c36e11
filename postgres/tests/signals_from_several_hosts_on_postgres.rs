//! Signals to one run from several hosts: each sender's order holds, every
//! signal lands once, duplicates through different hosts are one delivery, and a
//! signal queued for an owner that then shuts down is applied by the taker.

mod support;

use reel::{Ctx, Host, Workflow};
use support::hosts::{owned_by, result_of, shutdown_all, spread, suspended, until_status};

/// Collects `msg` signals until one is `stop`.
struct Collect;
impl Workflow for Collect {
    const NAME: &'static str = "collect";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let mut got = Vec::new();
        loop {
            let m: String = ctx.wait_for_signal("msg").await?;
            if m == "stop" {
                return Ok(got);
            }
            got.push(m);
        }
    }
}

async fn host(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Collect)
        .build()
        .await?)
}

/// Three senders (two non-owners and the owner), each sending 15 signals one
/// after another, concurrently with each other: all 45 land once and each
/// sender's signals are in its order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_senders_order_holds_across_hosts() -> anyhow::Result<()> {
    let url = support::database("hunt_e_order").await;
    let (hosts, owners) = spread::<3>(&url, 80, host).await?;
    let id = &owned_by(&owners, 2, "col", 1)[0];
    hosts[0].start::<Collect>(id, ()).await?;
    until_status(&hosts[1], id, "waited", suspended).await;
    const N: usize = 15;
    let sender = |h: usize| {
        let handle = hosts[h].handle::<Collect>(id);
        async move {
            for i in 0..N {
                handle
                    .signal("msg", &format!("{h}:{i}"), &format!("s-{h}-{i}"))
                    .await?;
            }
            Ok::<_, reel::Error>(())
        }
    };
    let (a, b, c) = tokio::join!(sender(0), sender(1), sender(2));
    a?;
    b?;
    c?;
    hosts[1]
        .handle::<Collect>(id)
        .signal("msg", "stop", "stop")
        .await?;
    let got = result_of::<Collect>(&hosts[0], id).await??;
    assert_eq!(got.len(), 3 * N, "{got:?}");
    for h in 0..3 {
        let mine: Vec<&String> = got
            .iter()
            .filter(|m| m.starts_with(&format!("{h}:")))
            .collect();
        let want: Vec<String> = (0..N).map(|i| format!("{h}:{i}")).collect();
        assert_eq!(
            mine.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            want.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            "sender host-{h}'s order; all: {got:?}"
        );
    }
    shutdown_all(hosts).await
}

/// One signal id sent through all three hosts at once (a retried webhook
/// landing on different replicas) is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_signal_id_through_three_hosts_is_one_delivery() -> anyhow::Result<()> {
    let url = support::database("hunt_e_dedup").await;
    let (hosts, owners) = spread::<3>(&url, 80, host).await?;
    let id = &owned_by(&owners, 1, "dd", 1)[0];
    hosts[2].start::<Collect>(id, ()).await?;
    until_status(&hosts[0], id, "waited", suspended).await;
    for round in 0..5 {
        let sends = hosts.iter().map(|h| {
            let handle = h.handle::<Collect>(id);
            async move {
                handle
                    .signal("msg", &format!("r{round}"), &format!("sig-{round}"))
                    .await
            }
        });
        futures::future::try_join_all(sends).await?;
    }
    hosts[0]
        .handle::<Collect>(id)
        .signal("msg", "stop", "stop")
        .await?;
    let got = result_of::<Collect>(&hosts[2], id).await??;
    assert_eq!(got, vec!["r0", "r1", "r2", "r3", "r4"]);
    shutdown_all(hosts).await
}

/// A signal sent through host-0 to a run owned by host-1, and host-1 shuts down
/// right after: the signal (answered Ok, queued in the inbox) is applied by the
/// host that takes the partition over, before a signal sent later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_queued_for_an_owner_that_shuts_down_is_applied() -> anyhow::Result<()> {
    let url = support::database("hunt_e_inbox_move").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let ids = owned_by(&owners, 1, "mv", 4);
    for id in &ids {
        hosts[0].start::<Collect>(id, ()).await?;
    }
    for id in &ids {
        until_status(&hosts[0], id, "waited", suspended).await;
    }
    let [h0, h1] = hosts;
    for id in &ids {
        h0.handle::<Collect>(id)
            .signal("msg", "first", "first")
            .await?;
    }
    h1.shutdown().await?;
    for id in &ids {
        h0.handle::<Collect>(id)
            .signal("msg", "second", "second")
            .await?;
        h0.handle::<Collect>(id)
            .signal("msg", "stop", "stop")
            .await?;
    }
    for id in &ids {
        let got = result_of::<Collect>(&h0, id).await??;
        assert_eq!(got, vec!["first", "second"], "{id}");
    }
    h0.shutdown().await?;
    Ok(())
}
