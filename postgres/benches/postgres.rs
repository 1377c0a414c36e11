//! reel over PostgreSQL (`PgStore`) against raw inserts into the same database, in
//! the same run: `cargo bench -p reel-postgres`.
//!
//! 1. sequential: one run of 1,000 no-op steps, time per step, against one
//!    single-row `INSERT` committed on its own (one synchronous commit).
//! 2. throughput: 1,000 runs x 10 steps started at once, durable events/s, against
//!    batches of 2,048 ~100-byte rows inserted with one statement and one commit;
//!    on one host of its own, then on 1 and on 3 hosts joined to the database
//!    (`PgStore::join`, in this process, the partitions shared out first).
//!
//! 3. starts of runs waiting on a signal (one host of its own, three joined
//!    hosts), reopening a database full of them, an entity looping signal +
//!    step, waking a passivated run with a long log (`scenarios/waiting.rs`).
//!
//! The server is a private cluster (`initdb` + `postgres`, fsync on) in a temporary
//! directory, or `REEL_PG_URL`. `REEL_BENCH_QUICK=1` scales both down to a smoke
//! run. Figures are printed, not asserted.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "scenarios/waiting.rs"]
mod waiting;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reel::{Ctx, Host, Workflow};
use reel_postgres::{ClusterConfig, PgStore};

pub(crate) type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// `n` no-op steps, returns `n`.
struct Steps;
impl Workflow for Steps {
    const NAME: &'static str = "bench-steps";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        for _ in 0..n {
            ctx.step("noop", |_| async { Ok::<_, String>(()) }).await?;
        }
        Ok(n)
    }
}

async fn host(url: &str) -> BenchResult<Host> {
    let store = PgStore::connect(url).await?;
    Ok(Host::builder().store(store).register(Steps).build().await?)
}

pub(crate) async fn raw_client(url: &str) -> BenchResult<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS raw_log (run_id text, seq bigint, record bytea, \
             PRIMARY KEY (run_id, seq))",
        )
        .await?;
    Ok(client)
}

/// Per-step time of one run of `n` steps, and per-insert time of `n` raw commits.
async fn sequential(url: &str, n: u32) -> BenchResult<(Duration, Duration)> {
    let host = host(url).await?;
    host.start::<Steps>("warmup", 10).await?.result().await?;
    let start = Instant::now();
    let out = host.start::<Steps>("sequential", n).await?.result().await?;
    let reel = start.elapsed() / n;
    assert_eq!(out, n);
    host.shutdown().await?;

    let client = raw_client(url).await?;
    let insert = client
        .prepare("INSERT INTO raw_log (run_id, seq, record) VALUES ($1, $2, $3)")
        .await?;
    let value = vec![7u8; 100];
    let start = Instant::now();
    for seq in 0..i64::from(n) {
        client
            .execute(&insert, &[&"sequential", &seq, &value])
            .await?;
    }
    Ok((reel, start.elapsed() / n))
}

/// `n` hosts sharing the database (`PgStore::join`), once every one leases a
/// share of the partitions; `n == 0`: one host of its own (`PgStore::connect`).
async fn hosts(url: &str, n: usize) -> BenchResult<Vec<Arc<Host>>> {
    Ok(hosts_and_owners(url, n).await?.0)
}

/// [`hosts`], with the index of the host that leases each partition.
async fn hosts_and_owners(url: &str, n: usize) -> BenchResult<(Vec<Arc<Host>>, Vec<usize>)> {
    if n == 0 {
        return Ok((vec![Arc::new(host(url).await?)], vec![0; 256]));
    }
    let mut hosts = Vec::new();
    for i in 0..n {
        let config = ClusterConfig::new(format!("bench-{i}")).lease_ttl(Duration::from_secs(3));
        let store = PgStore::join(url, config).await?;
        hosts.push(Arc::new(
            Host::builder().store(store).register(Steps).build().await?,
        ));
    }
    let owners = support::spread_leases(url, "bench-", n, (256 / n as i64) - 8).await;
    Ok((hosts, owners))
}

/// Durable events/s of `runs` runs of `steps` steps started at once, round-robin
/// over `hosts`, each awaited on the host that started it.
async fn reel_throughput(
    hosts: Vec<Arc<Host>>,
    prefix: &str,
    runs: usize,
    steps: u32,
) -> BenchResult<(f64, usize)> {
    let n = hosts.len();
    reel_throughput_on(hosts, prefix, runs, steps, |i, _| i % n).await
}

/// [`reel_throughput`] with each run started on the host `pick` names for it
/// (by index and run id).
async fn reel_throughput_on(
    hosts: Vec<Arc<Host>>,
    prefix: &str,
    runs: usize,
    steps: u32,
    pick: impl Fn(usize, &str) -> usize,
) -> BenchResult<(f64, usize)> {
    for (i, h) in hosts.iter().enumerate() {
        let warmup = format!("{prefix}-warmup-{i}");
        h.start::<Steps>(&warmup, 1).await?.result().await?;
    }
    let start = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            let host = hosts[pick(i, &id)].clone();
            tokio::spawn(async move { host.start::<Steps>(&id, steps).await?.result().await })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await??, steps);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let per_run = hosts[0]
        .handle::<Steps>(&format!("{prefix}-0"))
        .events()
        .await?
        .len();
    for h in hosts {
        let h = Arc::try_unwrap(h).map_err(|_| "host still shared")?;
        h.shutdown().await?;
    }
    Ok(((runs * per_run) as f64 / elapsed, per_run))
}

/// Rows/s of raw batches of 2,048 ~100-byte rows, `total` rows.
async fn raw_throughput(url: &str, total: usize) -> BenchResult<f64> {
    let client = raw_client(url).await?;
    let value = vec![7u8; 100];
    let start = Instant::now();
    let mut seq = 0i64;
    while (seq as usize) < total {
        let n = 2_048.min(total - seq as usize);
        let runs: Vec<String> = (0..n).map(|i| format!("raw-{}", i % 1000)).collect();
        let seqs: Vec<i64> = (seq..seq + n as i64).collect();
        let values: Vec<&[u8]> = (0..n).map(|_| value.as_slice()).collect();
        client
            .execute(
                "INSERT INTO raw_log (run_id, seq, record) \
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])",
                &[&runs, &seqs, &values],
            )
            .await?;
        seq += n as i64;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

fn main() {
    let quick = std::env::var("REEL_BENCH_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
    let (seq_steps, runs) = if quick { (50, 50) } else { (1_000, 1_000) };
    let sizes = if quick {
        waiting::Sizes {
            waiting: 100,
            in_flight: 16,
            signals: 20,
            replay_steps: 50,
        }
    } else {
        waiting::Sizes {
            waiting: 10_000,
            in_flight: 512,
            signals: 1_000,
            replay_steps: 2_500,
        }
    };
    support::DURABLE.store(true, Ordering::SeqCst);
    let base = support::cluster().base.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "reel-postgres bench ({} mode) on {base}",
        if quick { "quick" } else { "full" }
    );
    let result: BenchResult<()> = rt.block_on(async {
        let url = support::database("bench_seq").await;
        let (reel, raw) = sequential(&url, seq_steps).await?;
        let url = support::database("bench_tp").await;
        let (reel_tp, per_run) = reel_throughput(hosts(&url, 0).await?, "tp", runs, 10).await?;
        let url = support::database("bench_tp1").await;
        let (one_tp, _) = reel_throughput(hosts(&url, 1).await?, "tp1", runs, 10).await?;
        let url = support::database("bench_tp3").await;
        let (three_tp, _) = reel_throughput(hosts(&url, 3).await?, "tp3", runs, 10).await?;
        let url = support::database("bench_tp3o").await;
        let (three, owners) = hosts_and_owners(&url, 3).await?;
        let owner = |_: usize, id: &str| owners[reel_postgres::partition_of(id) as usize];
        let (routed_tp, _) = reel_throughput_on(three, "tp3o", runs, 10, owner).await?;
        let raw_tp = raw_throughput(&url, runs * per_run).await?;
        println!("| scenario | reel on Postgres | raw Postgres | ratio |");
        println!("| --- | --- | --- | --- |");
        println!(
            "| sequential, {seq_steps} steps, per step | {:.3} ms | {:.3} ms per insert | {:.2}x |",
            reel.as_secs_f64() * 1e3,
            raw.as_secs_f64() * 1e3,
            reel.as_secs_f64() / raw.as_secs_f64()
        );
        println!(
            "| throughput, {runs} runs x 10 steps | {reel_tp:.0} events/s | {raw_tp:.0} rows/s (batches of 2,048) | {:.2}x |",
            reel_tp / raw_tp
        );
        for (hosts, tp) in [
            ("1 joined host", one_tp),
            ("3 joined hosts, runs started round-robin", three_tp),
            ("3 joined hosts, each run started on its owner", routed_tp),
        ] {
            println!(
                "| throughput, {runs} runs x 10 steps, {hosts} (in this process) | {tp:.0} events/s | {raw_tp:.0} rows/s | {:.2}x |",
                tp / raw_tp
            );
        }
        waiting::run(&sizes).await
    });
    if let Err(e) = result {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}
