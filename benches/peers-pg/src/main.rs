//! reel on PostgreSQL against dbos (DBOS Transact for Rust, 0.5.0) on the same
//! private PostgreSQL server (fsync on), in the same run, each engine on a database
//! of its own:
//!
//! 1. sequential: one run of N no-op steps (N = 1,000 unless `PEERS_PG_SEQ_STEPS`);
//!    time per step, start to result.
//! 2. throughput: R runs x 10 no-op steps started at once, every result awaited
//!    (R = 1,000 unless `PEERS_PG_RUNS`); steps/s.
//! 3. the throughput scenario on three reel hosts joined to one database
//!    (`PgStore::join`, in this process), each run started on the host that owns
//!    it, and round-robin.
//!
//! A no-op step is `ctx.step("noop", ..)` in reel and `dbos::step("noop", ..)` in
//! dbos. dbos runs with its defaults (its own connection pool, `app_version` set, as
//! it requires); reel with its defaults over `PgStore`.
//!
//! `cargo run --release --manifest-path benches/peers-pg/Cargo.toml`; `PEERS_PG_QUICK=1`
//! for a smoke run. Figures are printed, not asserted.

#[path = "../../../postgres/tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reel::{Ctx, Host, Workflow};
use reel_postgres::{ClusterConfig, PgStore, partition_of};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BenchResult<T> = Result<T, BoxError>;

const STEPS_PER_RUN: u32 = 10;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` no-op steps, returns `n`.
struct Steps;

impl Workflow for Steps {
    const NAME: &'static str = "steps";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        for _ in 0..n {
            ctx.step("noop", |_| async { Ok::<_, String>(()) }).await?;
        }
        Ok(n)
    }
}

/// The dbos workflow: `n` no-op steps, returns `n`.
async fn dbos_steps(n: u32) -> dbos::Result<u32> {
    for _ in 0..n {
        dbos::step("noop", || async { dbos::Result::Ok(()) }).await?;
    }
    Ok(n)
}

async fn reel_host(url: &str) -> BenchResult<Arc<Host>> {
    let store = PgStore::connect(url).await?;
    Ok(Arc::new(
        Host::builder().store(store).register(Steps).build().await?,
    ))
}

/// Three hosts joined to `url`, once each leases a third of the partitions, and
/// the host index that owns each partition.
async fn reel_hosts(url: &str) -> BenchResult<(Vec<Arc<Host>>, Vec<usize>)> {
    let mut hosts = Vec::new();
    for i in 0..3 {
        let config = ClusterConfig::new(format!("host-{i}")).lease_ttl(Duration::from_secs(3));
        let store = PgStore::join(url, config).await?;
        hosts.push(Arc::new(
            Host::builder().store(store).register(Steps).build().await?,
        ));
    }
    let owners = support::spread_leases(url, "host-", 3, 80).await;
    Ok((hosts, owners))
}

async fn shutdown(hosts: Vec<Arc<Host>>) -> BenchResult<()> {
    for h in hosts {
        Arc::try_unwrap(h)
            .map_err(|_| "host still shared")?
            .shutdown()
            .await?;
    }
    Ok(())
}

/// Time per step of one reel run of `n` steps.
async fn reel_sequential(url: &str, n: u32) -> BenchResult<Duration> {
    let host = reel_host(url).await?;
    host.start::<Steps>("warmup", 10).await?.result().await?;
    let start = Instant::now();
    let out = host.start::<Steps>("sequential", n).await?.result().await?;
    let per_step = start.elapsed() / n;
    assert_eq!(out, n);
    shutdown(vec![host]).await?;
    Ok(per_step)
}

/// Steps/s of `runs` reel runs of 10 steps, each started on `hosts[pick(i, id)]`.
async fn reel_throughput(
    hosts: Vec<Arc<Host>>,
    prefix: &str,
    runs: usize,
    pick: impl Fn(usize, &str) -> usize,
) -> BenchResult<f64> {
    for (i, h) in hosts.iter().enumerate() {
        h.start::<Steps>(&format!("{prefix}-warmup-{i}"), 1)
            .await?
            .result()
            .await?;
    }
    let start = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            let host = hosts[pick(i, &id)].clone();
            tokio::spawn(async move {
                host.start::<Steps>(&id, STEPS_PER_RUN)
                    .await?
                    .result()
                    .await
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await??, STEPS_PER_RUN);
    }
    let per_s = (runs as f64 * f64::from(STEPS_PER_RUN)) / start.elapsed().as_secs_f64();
    shutdown(hosts).await?;
    Ok(per_s)
}

/// A launched dbos instance over `url` and its workflow.
async fn dbos_instance(
    url: &str,
) -> BenchResult<(dbos::DBOS, dbos::WorkflowRef<u32, u32, dbos::EngineOnly>)> {
    let config = dbos::Config {
        app_version: Some("1.0.0".to_owned()),
        ..dbos::Config::new("peers_pg_bench", url)
    };
    let instance = dbos::DBOS::new(config);
    let steps = instance.register_workflow("steps", dbos_steps)?;
    instance.launch().await?;
    Ok((instance, steps))
}

/// Time per step of one dbos workflow of `n` steps, and steps/s of `runs`
/// workflows of 10 steps started at once.
async fn dbos_figures(url: &str, n: u32, runs: usize) -> BenchResult<(Duration, f64)> {
    let (instance, steps) = dbos_instance(url).await?;
    steps.run(10).await?;
    let start = Instant::now();
    assert_eq!(steps.run(n).await?, n);
    let per_step = start.elapsed() / n;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(runs);
    for _ in 0..runs {
        handles.push(steps.start(STEPS_PER_RUN).await?);
    }
    for h in handles {
        assert_eq!(h.result().await?, STEPS_PER_RUN);
    }
    let per_s = (runs as f64 * f64::from(STEPS_PER_RUN)) / start.elapsed().as_secs_f64();
    instance.shutdown().await;
    Ok((per_step, per_s))
}

fn main() -> BenchResult<()> {
    let quick = std::env::var("PEERS_PG_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
    let seq = env_usize("PEERS_PG_SEQ_STEPS", if quick { 50 } else { 1_000 }) as u32;
    let runs = env_usize("PEERS_PG_RUNS", if quick { 50 } else { 1_000 });
    support::DURABLE.store(true, Ordering::SeqCst);
    let base = support::cluster().base.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!("reel vs dbos on PostgreSQL at {base} (fsync on)");
    rt.block_on(async {
        let reel_seq = reel_sequential(&support::database("reel_seq").await, seq).await?;
        println!("reel sequential: {:.3} ms/step", reel_seq.as_secs_f64() * 1e3);
        let url = support::database("reel_tp").await;
        let reel_tp = reel_throughput(vec![reel_host(&url).await?], "tp", runs, |_, _| 0).await?;
        println!("reel throughput, 1 host: {reel_tp:.0} steps/s");
        let (three, owners) = reel_hosts(&support::database("reel_tp3o").await).await?;
        let owner = |_: usize, id: &str| owners[partition_of(id) as usize];
        let reel_owner = reel_throughput(three, "tp3o", runs, owner).await?;
        println!("reel throughput, 3 hosts, runs started on their owners: {reel_owner:.0} steps/s");
        let (three, _) = reel_hosts(&support::database("reel_tp3r").await).await?;
        let reel_rr = reel_throughput(three, "tp3r", runs, |i, _| i % 3).await?;
        println!("reel throughput, 3 hosts, runs started round-robin: {reel_rr:.0} steps/s");
        let (dbos_seq, dbos_tp) =
            dbos_figures(&support::database("dbos").await, seq, runs).await?;
        println!(
            "dbos sequential: {:.3} ms/step; throughput: {dbos_tp:.0} steps/s",
            dbos_seq.as_secs_f64() * 1e3
        );
        println!();
        println!("| scenario | reel | dbos 0.5.0 | reel/dbos |");
        println!("| --- | --- | --- | --- |");
        println!(
            "| sequential: 1 run of {seq} no-op steps, per step | {:.3} ms | {:.3} ms | {:.2}x the time |",
            reel_seq.as_secs_f64() * 1e3,
            dbos_seq.as_secs_f64() * 1e3,
            reel_seq.as_secs_f64() / dbos_seq.as_secs_f64()
        );
        for (what, tp) in [
            ("1 host", reel_tp),
            ("3 hosts in this process, each run started on its owner", reel_owner),
            ("3 hosts in this process, runs started round-robin", reel_rr),
        ] {
            println!(
                "| throughput: {runs} runs x {STEPS_PER_RUN} steps, reel on {what} | {tp:.0} steps/s | {dbos_tp:.0} steps/s (1 instance) | {:.2}x |",
                tp / dbos_tp
            );
        }
        Ok::<(), BoxError>(())
    })?;
    Ok(())
}
