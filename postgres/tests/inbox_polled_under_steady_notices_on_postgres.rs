//! The inbox is read periodically whatever the notices do: a letter whose notice
//! was lost is applied within a few polls even while other notices keep arriving
//! (before, each notice restarted the poll's wait, so a steady stream of them
//! kept the poll from ever running).

mod support;

use std::time::Duration;

use reel::{Ctx, Host, RunStatus, Workflow};
use reel_postgres::{ClusterConfig, PgStore, partition_of};
use reel_storage::{Mail, Payload};

/// Waits for one signal and returns it.
struct Echo;

impl Workflow for Echo {
    const NAME: &'static str = "echo";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.wait_for_signal("say").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_polled_under_steady_notices_on_postgres() -> anyhow::Result<()> {
    let url = support::database("steady_notices").await;
    let store = PgStore::join(
        &url,
        ClusterConfig::new("host-a").lease_ttl(Duration::from_secs(600)),
    )
    .await?;
    let host = Host::builder().store(store).register(Echo).build().await?;
    support::spread_leases(&url, "host-", 1, 256).await;
    let run = host.start::<Echo>("echo-1", ()).await?;
    while !matches!(
        run.wait_until_suspended().await?,
        RunStatus::Suspended { .. }
    ) {}

    // A steady stream of notices (of a run nobody waits for), every 100 ms.
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(conn);
    let noise = tokio::spawn(async move {
        loop {
            if client
                .execute("SELECT pg_notify('reel_changed', 'noise')", &[])
                .await
                .is_err()
            {
                return client;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // The signal lands in the inbox without its notice (as if it was lost).
    let mail = Mail::Signal {
        name: "say".into(),
        signal_id: "s-1".into(),
        payload: Payload(rmp_serde::to_vec(&"hello")?),
    };
    support::execute(
        &url,
        &format!(
            "INSERT INTO reel_inbox (part, run_id, mail) VALUES ({}, 'echo-1', '\\x{}')",
            partition_of("echo-1"),
            mail.encode()?
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ),
    )
    .await;
    let out = tokio::time::timeout(Duration::from_secs(20), run.result())
        .await
        .map_err(|_| anyhow::anyhow!("the letter was never read: the inbox poll did not run"))??;
    assert_eq!(out, "hello");
    noise.abort();
    let _ = noise.await;
    task.abort();
    host.shutdown().await?;
    Ok(())
}
