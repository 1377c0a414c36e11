//! A host that still believes it owns a partition another host has taken (and
//! already scanned) starts a run there. The run must not be left with nobody
//! running it: the creating transaction wakes the real owner (the creator holds no
//! lease of the partition), the creator's own execution is refused and hands the
//! run over, and the owner runs it to its end.

mod support;

use std::time::{Duration, Instant};

use reel::{Ctx, Host, Workflow};
use reel_postgres::{ClusterConfig, PgStore, partition_of};

/// One step, recording the host that ran it.
#[derive(Clone)]
struct Named {
    host: String,
}

impl Workflow for Named {
    const NAME: &'static str = "named";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let host = self.host.clone();
        ctx.step("work", move |_| {
            let host = host.clone();
            async move { Ok::<_, String>(host) }
        })
        .await
    }
}

async fn host(url: &str, name: &str, lease: Duration) -> anyhow::Result<Host> {
    let store = PgStore::join(url, ClusterConfig::new(name).lease_ttl(lease)).await?;
    Ok(Host::builder()
        .store(store)
        .register(Named {
            host: name.to_owned(),
        })
        .build()
        .await?)
}

/// The expiry of partition `part`'s lease, in ms since the epoch.
async fn expiry(client: &tokio_postgres::Client, part: i16) -> f64 {
    client
        .query_one(
            "SELECT extract(epoch FROM expires_at)::float8 * 1000 FROM reel_leases WHERE part = $1",
            &[&part],
        )
        .await
        .expect("lease")
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_created_by_a_stale_owner_runs_on_postgres() -> anyhow::Result<()> {
    let url = support::database("stale_owner").await;
    // `host-a` renews every 200 s: through the test it believes it holds every
    // partition it took at the start.
    let a = host(&url, "host-a", Duration::from_secs(600)).await?;
    support::spread_leases(&url, "host-", 1, 256).await;
    let b = host(&url, "host-b", Duration::from_millis(1500)).await?;

    // The run's partition goes to `host-b` behind `host-a`'s back (as if `host-a`
    // had been cut off while its lease expired and was taken).
    let id = "stale-0";
    let part = partition_of(id);
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(conn);
    // The expiry planted here, as written: read back after the update, it could
    // already be `host-b`'s first renewal (it renews every 500 ms), which would
    // then never be seen to come below it.
    let planted: f64 = client
        .query_one(
            "UPDATE reel_leases SET owner = 'host-b', expires_at = now() + interval '1 hour' \
             WHERE part = $1 RETURNING extract(epoch FROM expires_at)::float8 * 1000",
            &[&part],
        )
        .await?
        .get(0);
    // Two renewals by `host-b`: after the first (an expiry below the planted one)
    // it holds the partition, and its recovery of the partition (which finds no
    // run yet) is over by the second (a later expiry still).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = planted;
    let mut renewals = 0;
    while renewals < 2 {
        assert!(Instant::now() < deadline, "host-b never renewed the lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = expiry(&client, part).await;
        if now < seen || (renewals > 0 && now > seen) {
            renewals += 1;
        }
        seen = now;
    }
    drop(client);
    let _ = task.await;

    // `host-a` creates the run as if it owned it.
    a.start::<Named>(id, ()).await?;
    let out = tokio::time::timeout(Duration::from_secs(30), b.handle::<Named>(id).result())
        .await
        .map_err(|_| anyhow::anyhow!("nobody ran the run the stale owner created"))??;
    assert_eq!(out, "host-b", "the owner ran it");
    a.shutdown().await?;
    b.shutdown().await?;
    Ok(())
}
