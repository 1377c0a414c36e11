//! Helpers of the tests that run several hosts on one database: opening them and
//! waiting for their leases to spread, picking run ids by owner, waiting for a
//! status, shutting them down.

use std::time::{Duration, Instant};

use reel::{Host, HostBuilder, RunStatus};
use reel_postgres::partition_of;

/// Opens the hosts `host-0` to `host-{N-1}` on `url` with `open`, one after
/// another, then waits until each leases at least `min_each` partitions; returns
/// them and each partition's owner (see [`super::spread_leases`]).
pub async fn spread<const N: usize>(
    url: &str,
    min_each: i64,
    open: impl AsyncFn(&str, &str) -> anyhow::Result<Host>,
) -> anyhow::Result<([Host; N], Vec<usize>)> {
    let mut hosts = Vec::with_capacity(N);
    for i in 0..N {
        hosts.push(open(url, &format!("host-{i}")).await?);
    }
    let hosts: [Host; N] = hosts
        .try_into()
        .map_err(|_| anyhow::anyhow!("opened a wrong number of hosts"))?;
    let owners = super::spread_leases(url, "host-", N, min_each).await;
    Ok((hosts, owners))
}

/// A host builder over the database at `url`, joined as the host `name` with
/// [`super::TEST_LEASE`].
pub async fn joined(url: &str, name: &str) -> anyhow::Result<HostBuilder> {
    Ok(Host::builder().store(super::join(url, name).await?))
}

/// The first `count` ids `<prefix>-<i>` whose partition `owners` gives to the
/// host with index `owner`.
pub fn owned_by(owners: &[usize], owner: usize, prefix: &str, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|id| owners[partition_of(id) as usize] == owner)
        .take(count)
        .collect()
}

/// Waits (15 s at most) until `check` holds of the run's status as `host` reads
/// it; panics naming `what` the run never did.
pub async fn until_status(
    host: &Host,
    run_id: &str,
    what: &str,
    check: impl Fn(&RunStatus) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = host.run(run_id).status().await;
        if let Ok(s) = &status
            && check(s)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{run_id} never {what}; it is {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the run waits (on anything).
pub fn suspended(s: &RunStatus) -> bool {
    matches!(s, RunStatus::Suspended { .. })
}

/// Whether the run ended cancelled.
pub fn cancelled(s: &RunStatus) -> bool {
    matches!(s, RunStatus::Cancelled)
}

/// Shuts every host down, in order.
pub async fn shutdown_all(hosts: impl IntoIterator<Item = Host>) -> anyhow::Result<()> {
    for h in hosts {
        h.shutdown().await?;
    }
    Ok(())
}

/// Awaits the result of the run `id` (of type `W`) through `host`, for 15 s at
/// most: a hang becomes an error naming the run.
pub async fn result_of<W: reel::Workflow>(
    host: &Host,
    id: &str,
) -> anyhow::Result<reel::Result<W::Output>> {
    tokio::time::timeout(Duration::from_secs(15), host.handle::<W>(id).result())
        .await
        .map_err(|_| anyhow::anyhow!("{id} did not end"))
}

/// Gives the lease of the partition of `run_id` to a host with no heartbeat, for
/// an hour: as if its owner had been cut off long enough for the lease to expire
/// and be taken. Locked `FOR UPDATE` first, as a takeover does: a write under
/// way (which holds the row `FOR KEY SHARE`) commits before the move.
pub async fn lease_elsewhere(url: &str, run_id: &str) {
    let part = partition_of(run_id);
    super::execute(
        url,
        &format!(
            "UPDATE reel_leases SET owner = 'elsewhere', expires_at = now() + interval '1 hour' \
             WHERE part = (SELECT part FROM reel_leases WHERE part = {part} FOR UPDATE)"
        ),
    )
    .await;
}

/// Frees the lease of the partition of `run_id`: a host takes it at its next
/// renewal.
pub async fn free_lease(url: &str, run_id: &str) {
    let part = partition_of(run_id);
    super::execute(
        url,
        &format!(
            "UPDATE reel_leases SET owner = NULL, expires_at = '-infinity' WHERE part = {part}"
        ),
    )
    .await;
}
