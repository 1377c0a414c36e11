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
//! 4. starts: W runs that each wait for a message (W = 2,000 unless
//!    `PEERS_PG_WAITING`), `PEERS_PG_IN_FLIGHT` (256) starts at a time; runs/s.
//!    Then the message is delivered to every run, as many at a time, and each
//!    result awaited; time until all are complete.
//! 5. entity: one run looping S times (S = 500 unless `PEERS_PG_SIGNALS`): wait
//!    for a message, one step; messages sent one after another, each once the
//!    previous one has been applied; mean time per message over the first and
//!    the last tenth.
//!
//! A no-op step is `ctx.step("noop", ..)` in reel and `dbos::step("noop", ..)` in
//! dbos. A message is `ctx.wait_for_signal` / `RunHandle::signal` in reel and
//! `dbos::recv` / `DBOS::send` (with a topic) in dbos; reel tells that a message
//! has been applied with `wait_until_suspended`, dbos has no such call, so its
//! entity publishes `dbos::set_event("applied-<i>")` after each step and the
//! sender waits on `DBOS::get_event` (one more write per message on dbos). dbos runs with its defaults (its own connection pool, `app_version` set, as
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

/// How long a dbos `recv` may wait: longer than any run of this benchmark.
const RECV_TIMEOUT: Duration = Duration::from_secs(3_600);

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

/// Waits for the signal `go` and returns its payload.
struct Waiter;

impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

/// An entity: applies `n` signals `op`, one step each, returns their sum.
struct Entity;

impl Workflow for Entity {
    const NAME: &'static str = "entity";
    type Input = u32;
    type Output = u64;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u64> {
        let mut sum = 0u64;
        for _ in 0..n {
            let v: u64 = ctx.wait_for_signal("op").await?;
            sum = ctx
                .step("apply", |_| async move { Ok::<_, String>(sum + v) })
                .await?;
        }
        Ok(sum)
    }
}

/// The dbos waiter: receives one message on the topic `go`, returns it (0 if the
/// receive timed out).
async fn dbos_waiter(_: ()) -> dbos::Result<u64> {
    Ok(dbos::recv(Some("go"), RECV_TIMEOUT).await?.unwrap_or(0))
}

/// The dbos entity: publishes `ready`, then `n` times receives a message on `op`,
/// applies it in one step and publishes `applied-<i>` (dbos has no other way to
/// tell a caller outside the workflow that the step has run); returns the sum.
async fn dbos_entity(n: u32) -> dbos::Result<u64> {
    dbos::set_event("ready", &true).await?;
    let mut sum = 0u64;
    for i in 0..n {
        let v: u64 = dbos::recv(Some("op"), RECV_TIMEOUT).await?.unwrap_or(0);
        sum = dbos::step("apply", move || async move { dbos::Result::Ok(sum + v) }).await?;
        dbos::set_event(&format!("applied-{i}"), &sum).await?;
    }
    Ok(sum)
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
        Host::builder()
            .store(store)
            .register(Steps)
            .register(Waiter)
            .register(Entity)
            .build()
            .await?,
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

/// Mean of the first and of the last tenth of `times`.
fn tenths(times: &[Duration]) -> (Duration, Duration) {
    let tenth = (times.len() / 10).max(1);
    let mean = |d: &[Duration]| d.iter().sum::<Duration>() / d.len() as u32;
    (mean(&times[..tenth]), mean(&times[times.len() - tenth..]))
}

/// Starts/s of `runs` reel runs waiting on `go`, `in_flight` starts at a time;
/// then the time from the first signal until every run has completed, signalled
/// `in_flight` at a time.
async fn reel_starts(url: &str, runs: usize, in_flight: usize) -> BenchResult<(f64, Duration)> {
    let host = reel_host(url).await?;
    let sem = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for i in 0..runs {
        let permit = sem.clone().acquire_owned().await?;
        let host = host.clone();
        tasks.push(tokio::spawn(async move {
            let run = host.start::<Waiter>(&format!("wait-{i}"), ()).await;
            drop(permit);
            run
        }));
    }
    let mut handles = Vec::with_capacity(runs);
    for t in tasks {
        handles.push(t.await??);
    }
    let starts = runs as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for run in handles {
        let permit = sem.clone().acquire_owned().await?;
        tasks.push(tokio::spawn(async move {
            let out = async {
                run.signal("go", &1u32, "go").await?;
                run.result().await
            }
            .await;
            drop(permit);
            out
        }));
    }
    for t in tasks {
        assert_eq!(t.await??, 1);
    }
    let delivered = start.elapsed();
    shutdown(vec![host]).await?;
    Ok((starts, delivered))
}

/// Per-signal times of a reel entity signalled `n` times one after another: the
/// mean of the first and of the last tenth.
async fn reel_entity(url: &str, n: u32) -> BenchResult<(Duration, Duration)> {
    let host = reel_host(url).await?;
    let run = host.start::<Entity>("entity", n).await?;
    run.wait_until_suspended().await?;
    let mut times = Vec::with_capacity(n as usize);
    for i in 0..n {
        let start = Instant::now();
        run.signal("op", &u64::from(i), &format!("op-{i}")).await?;
        if i + 1 < n {
            run.wait_until_suspended().await?;
        } else {
            assert_eq!(run.result().await?, u64::from(n) * u64::from(n - 1) / 2);
        }
        times.push(start.elapsed());
    }
    drop(run);
    shutdown(vec![host]).await?;
    Ok(tenths(&times))
}

/// A launched dbos instance over `url` and its workflows.
async fn dbos_instance(url: &str) -> BenchResult<DbosBench> {
    let config = dbos::Config {
        app_version: Some("1.0.0".to_owned()),
        ..dbos::Config::new("peers_pg_bench", url)
    };
    let instance = dbos::DBOS::new(config);
    let steps = instance.register_workflow("steps", dbos_steps)?;
    let waiter = instance.register_workflow("waiter", dbos_waiter)?;
    let entity = instance.register_workflow("entity", dbos_entity)?;
    instance.launch().await?;
    Ok(DbosBench {
        instance,
        steps,
        waiter,
        entity,
    })
}

struct DbosBench {
    instance: dbos::DBOS,
    steps: dbos::WorkflowRef<u32, u32, dbos::EngineOnly>,
    waiter: dbos::WorkflowRef<(), u64, dbos::EngineOnly>,
    entity: dbos::WorkflowRef<u32, u64, dbos::EngineOnly>,
}

/// A dbos send of `message` to `id` on `topic`.
async fn dbos_send(
    instance: &dbos::DBOS,
    id: &str,
    topic: &str,
    message: &u64,
) -> dbos::Result<()> {
    let options = dbos::SendOptions {
        topic: Some(topic),
        ..Default::default()
    };
    instance.send_with(id, message, options).await
}

/// As `reel_starts`, on dbos: workflows that `recv` on `go`, started with
/// `WorkflowRef::start`, then `DBOS::send` and `WorkflowHandle::result` for each.
async fn dbos_starts(b: &DbosBench, runs: usize, in_flight: usize) -> BenchResult<(f64, Duration)> {
    let sem = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for i in 0..runs {
        let permit = sem.clone().acquire_owned().await?;
        let waiter = b.waiter.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("wait-{i}");
            let options = dbos::StartOptions {
                workflow_id: Some(&id),
                ..Default::default()
            };
            let handle = waiter.start_with((), options).await;
            drop(permit);
            handle
        }));
    }
    let mut handles = Vec::with_capacity(runs);
    for t in tasks {
        handles.push(t.await??);
    }
    let starts = runs as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for handle in handles {
        let permit = sem.clone().acquire_owned().await?;
        let instance = b.instance.clone();
        tasks.push(tokio::spawn(async move {
            let out = async {
                dbos_send(&instance, handle.workflow_id(), "go", &1).await?;
                handle.result().await
            }
            .await;
            drop(permit);
            out
        }));
    }
    for t in tasks {
        assert_eq!(t.await??, 1);
    }
    Ok((starts, start.elapsed()))
}

/// As `reel_entity`, on dbos: `DBOS::send` on `op`, then `DBOS::get_event` on the
/// key the entity publishes once the step has run.
async fn dbos_entity_loop(b: &DbosBench, n: u32) -> BenchResult<(Duration, Duration)> {
    let options = dbos::StartOptions {
        workflow_id: Some("entity"),
        ..Default::default()
    };
    let handle = b.entity.start_with(n, options).await?;
    let ready: Option<bool> = b
        .instance
        .get_event("entity", "ready", RECV_TIMEOUT)
        .await?;
    assert_eq!(ready, Some(true));
    let mut times = Vec::with_capacity(n as usize);
    let mut sum = 0u64;
    for i in 0..n {
        let start = Instant::now();
        dbos_send(&b.instance, "entity", "op", &u64::from(i)).await?;
        let key = format!("applied-{i}");
        let applied: Option<u64> = b.instance.get_event("entity", &key, RECV_TIMEOUT).await?;
        times.push(start.elapsed());
        sum += u64::from(i);
        assert_eq!(applied, Some(sum));
    }
    assert_eq!(handle.result().await?, sum);
    Ok(tenths(&times))
}

/// Time per step of one dbos workflow of `n` steps, and steps/s of `runs`
/// workflows of 10 steps started at once.
async fn dbos_figures(b: &DbosBench, n: u32, runs: usize) -> BenchResult<(Duration, f64)> {
    let steps = &b.steps;
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
    Ok((per_step, per_s))
}

fn main() -> BenchResult<()> {
    let quick = std::env::var("PEERS_PG_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
    let seq = env_usize("PEERS_PG_SEQ_STEPS", if quick { 50 } else { 1_000 }) as u32;
    let runs = env_usize("PEERS_PG_RUNS", if quick { 50 } else { 1_000 });
    let waiting = env_usize("PEERS_PG_WAITING", if quick { 50 } else { 2_000 });
    let in_flight = env_usize("PEERS_PG_IN_FLIGHT", if quick { 16 } else { 256 }).max(1);
    let signals = env_usize("PEERS_PG_SIGNALS", if quick { 20 } else { 500 }).max(1) as u32;
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
        let b = dbos_instance(&support::database("dbos").await).await?;
        let (dbos_seq, dbos_tp) = dbos_figures(&b, seq, runs).await?;
        b.instance.shutdown().await;
        println!(
            "dbos sequential: {:.3} ms/step; throughput: {dbos_tp:.0} steps/s",
            ms(dbos_seq)
        );
        let (reel_starts_s, reel_delivered) =
            reel_starts(&support::database("reel_wait").await, waiting, in_flight).await?;
        println!(
            "reel starts: {reel_starts_s:.0} runs/s; signal all -> all complete: {:.0} ms",
            ms(reel_delivered)
        );
        let b = dbos_instance(&support::database("dbos_wait").await).await?;
        let (dbos_starts_s, dbos_delivered) = dbos_starts(&b, waiting, in_flight).await?;
        b.instance.shutdown().await;
        println!(
            "dbos starts: {dbos_starts_s:.0} runs/s; send all -> all complete: {:.0} ms",
            ms(dbos_delivered)
        );
        let (reel_first, reel_last) =
            reel_entity(&support::database("reel_entity").await, signals).await?;
        println!(
            "reel entity: {:.3} / {:.3} ms per signal (first / last tenth)",
            ms(reel_first),
            ms(reel_last)
        );

        let b = dbos_instance(&support::database("dbos_entity").await).await?;
        let (dbos_first, dbos_last) = dbos_entity_loop(&b, signals).await?;
        b.instance.shutdown().await;
        println!(
            "dbos entity: {:.3} / {:.3} ms per message (first / last tenth)",
            ms(dbos_first),
            ms(dbos_last)
        );

        println!();
        println!("| scenario | reel | dbos 0.5.0 | reel/dbos |");
        println!("| --- | --- | --- | --- |");
        println!(
            "| sequential: 1 run of {seq} no-op steps, per step | {:.3} ms | {:.3} ms | {:.2}x the time |",
            ms(reel_seq),
            ms(dbos_seq),
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
        println!(
            "| starts: {waiting} runs waiting for a message, {in_flight} starts in flight | {reel_starts_s:.0} runs/s | {dbos_starts_s:.0} runs/s | {:.2}x |",
            reel_starts_s / dbos_starts_s
        );
        println!(
            "| then the message to every run ({in_flight} in flight), until all complete | {:.0} ms | {:.0} ms | {:.2}x the time |",
            ms(reel_delivered),
            ms(dbos_delivered),
            reel_delivered.as_secs_f64() / dbos_delivered.as_secs_f64()
        );
        println!(
            "| entity: {signals} messages (message + step each), one after another, first / last tenth, per message | {:.3} / {:.3} ms | {:.3} / {:.3} ms (+ set_event/get_event) | {:.2}x / {:.2}x the time |",
            ms(reel_first),
            ms(reel_last),
            ms(dbos_first),
            ms(dbos_last),
            reel_first.as_secs_f64() / dbos_first.as_secs_f64(),
            reel_last.as_secs_f64() / dbos_last.as_secs_f64()
        );
        Ok::<(), BoxError>(())
    })?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
