//! Every process that joins a database is a new host id (`HostBuilder::postgres`
//! makes one up), so each crash leaves a heartbeat row in `reel_hosts` that no
//! clean shutdown deletes. A live host's renewal deletes the rows whose heartbeat
//! ran out more than an hour ago, and keeps the recent ones.

mod support;

use std::time::{Duration, Instant};

use reel::Host;

async fn hosts(url: &str) -> Vec<String> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let rows = client
        .query("SELECT host_id FROM reel_hosts ORDER BY host_id", &[])
        .await
        .expect("select");
    drop(client);
    let _ = task.await;
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_deletes_heartbeats_dead_for_an_hour() -> anyhow::Result<()> {
    let url = support::database("prune").await;
    let host = Host::builder()
        .store(support::join(&url, "live").await?)
        .build()
        .await?;
    support::execute(
        &url,
        "INSERT INTO reel_hosts (host_id, expires_at) VALUES \
         ('crashed-yesterday', now() - interval '1 day'), \
         ('crashed-a-minute-ago', now() - interval '1 minute')",
    )
    .await;
    // Renewals come every third of the test lease (half a second).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = hosts(&url).await;
        if !now.iter().any(|h| h == "crashed-yesterday") {
            assert_eq!(
                now,
                ["crashed-a-minute-ago", "live"],
                "the recent ones stay"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no renewal deleted the day-old heartbeat: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    host.shutdown().await?;
    assert_eq!(
        hosts(&url).await,
        ["crashed-a-minute-ago"],
        "a shutdown removes its own"
    );
    Ok(())
}
