//! The DESIGN.md scenarios beyond sequential steps and throughput, on PostgreSQL:
//! starts of runs that wait on a signal (one host of its own, three joined
//! hosts), reopening a database full of them, an entity looping signal + step,
//! and waking a passivated run with a long log. Each is printed beside a raw
//! baseline on the same server in the same run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reel::{Ctx, Host, Workflow};
use reel_postgres::{ClusterConfig, PgStore};

use crate::{BenchResult, raw_client};

/// Waits for the signal `go` and returns its payload.
pub(crate) struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "bench-waiter";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

/// `n` no-op steps, then waits for `go` and returns its payload + `n`.
pub(crate) struct StepsThenWait;
impl Workflow for StepsThenWait {
    const NAME: &'static str = "bench-steps-then-wait";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        for _ in 0..n {
            ctx.step("noop", |_| async { Ok::<_, String>(()) }).await?;
        }
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(go + n)
    }
}

/// An entity: applies `n` signals, one step each, then returns their sum.
pub(crate) struct Entity;
impl Workflow for Entity {
    const NAME: &'static str = "bench-entity";
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

fn builder(store: Arc<PgStore>) -> reel::HostBuilder {
    Host::builder()
        .store(store)
        .register(Waiter)
        .register(StepsThenWait)
        .register(Entity)
        .passivate_after(Duration::from_millis(100))
}

async fn own_host(url: &str) -> BenchResult<Arc<Host>> {
    Ok(Arc::new(
        builder(PgStore::connect(url).await?).build().await?,
    ))
}

async fn joined_hosts(url: &str, n: usize) -> BenchResult<Vec<Arc<Host>>> {
    let mut hosts = Vec::new();
    for i in 0..n {
        let config = ClusterConfig::new(format!("wait-{i}")).lease_ttl(Duration::from_secs(3));
        let store = PgStore::join(url, config).await?;
        hosts.push(Arc::new(builder(store).build().await?));
    }
    crate::support::spread_leases(url, "wait-", n, (256 / n as i64) - 8).await;
    Ok(hosts)
}

async fn shut_down(hosts: Vec<Arc<Host>>) -> BenchResult<()> {
    for h in hosts {
        Arc::try_unwrap(h)
            .map_err(|_| "host still shared")?
            .shutdown()
            .await?;
    }
    Ok(())
}

/// Runs/s of `runs` waiting runs started round-robin over `hosts`, `in_flight` at
/// a time; each start returns once the run is recorded.
async fn starts(
    hosts: &[Arc<Host>],
    prefix: &str,
    runs: usize,
    in_flight: usize,
) -> BenchResult<f64> {
    let sem = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for i in 0..runs {
        let permit = sem.clone().acquire_owned().await?;
        let host = hosts[i % hosts.len()].clone();
        let id = format!("{prefix}-{i}");
        tasks.push(tokio::spawn(async move {
            let r = host.start::<Waiter>(&id, ()).await.map(|_| ());
            drop(permit);
            r
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(runs as f64 / start.elapsed().as_secs_f64())
}

/// Rows/s of one raw single-row commit per run, `in_flight` connections' worth of
/// concurrent commits (the records a start writes, without reel).
async fn raw_starts(url: &str, runs: usize, in_flight: usize) -> BenchResult<f64> {
    let clients = {
        let mut v = Vec::new();
        for _ in 0..in_flight.clamp(1, 16) {
            v.push(Arc::new(raw_client(url).await?));
        }
        v
    };
    let value = vec![7u8; 100];
    let start = Instant::now();
    let per = runs.div_ceil(clients.len());
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(c, client)| {
            let (client, value) = (client.clone(), value.clone());
            tokio::spawn(async move {
                for i in c * per..((c + 1) * per).min(runs) {
                    client
                        .execute(
                            "INSERT INTO raw_log (run_id, seq, record) VALUES ($1, 0, $2)",
                            &[&format!("start-{i}"), &value],
                        )
                        .await?;
                }
                Ok::<_, tokio_postgres::Error>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(runs as f64 / start.elapsed().as_secs_f64())
}

/// Per-signal times of an entity signalled `n` times one after another: the mean
/// of the first and of the last tenth.
async fn entity(host: &Host, n: u32) -> BenchResult<(Duration, Duration)> {
    let run = host.start::<Entity>("entity", n).await?;
    run.wait_until_suspended().await?;
    let mut times = Vec::with_capacity(n as usize);
    for i in 0..n {
        let start = Instant::now();
        run.signal("op", &u64::from(i), &format!("op-{i}")).await?;
        if i + 1 < n {
            run.wait_until_suspended().await?;
        } else {
            run.result().await?;
        }
        times.push(start.elapsed());
    }
    let tenth = (n as usize / 10).max(1);
    let mean = |d: &[Duration]| d.iter().sum::<Duration>() / d.len() as u32;
    Ok((mean(&times[..tenth]), mean(&times[times.len() - tenth..])))
}

/// Signal -> result of a passivated run whose log holds `steps` steps.
async fn replay(host: &Host, steps: u32) -> BenchResult<(Duration, usize)> {
    let run = host.start::<StepsThenWait>("replay", steps).await?;
    run.wait_until_suspended().await?;
    let events = run.events().await?.len();
    // Past the passivation delay: the run holds nothing in memory any more.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    run.signal("go", &1u32, "go").await?;
    assert_eq!(run.result().await?, steps + 1);
    Ok((start.elapsed(), events))
}

/// A raw read of `rows` log rows of one run, by primary key range.
async fn raw_scan(url: &str, rows: usize) -> BenchResult<Duration> {
    let client = raw_client(url).await?;
    let value = vec![7u8; 60];
    let seqs: Vec<i64> = (0..rows as i64).collect();
    let runs: Vec<&str> = vec!["scan"; rows];
    let values: Vec<&[u8]> = vec![value.as_slice(); rows];
    client
        .execute(
            "INSERT INTO raw_log (run_id, seq, record) \
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])",
            &[&runs, &seqs, &values],
        )
        .await?;
    let start = Instant::now();
    let got = client
        .query(
            "SELECT seq, record FROM raw_log WHERE run_id = 'scan' ORDER BY seq",
            &[],
        )
        .await?;
    assert_eq!(got.len(), rows);
    Ok(start.elapsed())
}

/// Sizes of the scenarios.
pub(crate) struct Sizes {
    pub(crate) waiting: usize,
    pub(crate) in_flight: usize,
    pub(crate) signals: u32,
    pub(crate) replay_steps: u32,
}

/// Runs every scenario of this file and prints its rows.
pub(crate) async fn run(s: &Sizes) -> BenchResult<()> {
    // Starts on one host of its own, then reopening that database.
    let url = crate::support::database("bench_wait").await;
    let own = own_host(&url).await?;
    let own_rate = starts(std::slice::from_ref(&own), "w", s.waiting, s.in_flight).await?;
    shut_down(vec![own]).await?;
    let reopen = Instant::now();
    let host = own_host(&url).await?;
    host.start::<StepsThenWait>("after-reopen", 1).await?;
    let reopened = reopen.elapsed();
    shut_down(vec![host]).await?;
    let raw_client_for_scan = raw_client(&url).await?;
    let scan = Instant::now();
    let unfinished = raw_client_for_scan
        .query("SELECT run_id, meta FROM reel_active", &[])
        .await?
        .len();
    let scan = scan.elapsed();
    let raw_rate = raw_starts(&url, s.waiting, s.in_flight).await?;

    // Starts on three joined hosts.
    let url = crate::support::database("bench_wait3").await;
    let three = joined_hosts(&url, 3).await?;
    let three_rate = starts(&three, "w3", s.waiting, s.in_flight).await?;
    shut_down(three).await?;

    // Entity and replay on one host of its own.
    let url = crate::support::database("bench_entity").await;
    let host = own_host(&url).await?;
    let (first, last) = entity(&host, s.signals).await?;
    let (woken, events) = replay(&host, s.replay_steps).await?;
    shut_down(vec![host]).await?;
    let raw_scan = raw_scan(&url, events).await?;
    let two_inserts = {
        let client = raw_client(&url).await?;
        let value = vec![7u8; 100];
        let n: i64 = 100;
        let start = Instant::now();
        for i in 0..n {
            for k in 0..2i64 {
                client
                    .execute(
                        "INSERT INTO raw_log (run_id, seq, record) VALUES ('entity', $1, $2)",
                        &[&(2 * i + k), &value],
                    )
                    .await?;
            }
        }
        start.elapsed() / 100
    };

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (waiting, in_flight) = (s.waiting, s.in_flight);
    println!(
        "| starts, {waiting} runs waiting on a signal, {in_flight} in flight, one host of its own | {own_rate:.0} runs/s | {raw_rate:.0} single-row commits/s ({} connections) | {:.2}x |",
        in_flight.clamp(1, 16),
        own_rate / raw_rate
    );
    println!(
        "| the same, 3 joined hosts, round-robin (in this process) | {three_rate:.0} runs/s | {raw_rate:.0} | {:.2}x |",
        three_rate / raw_rate
    );
    println!(
        "| recovery: reopen with {unfinished} unfinished runs + a new run's first step | {:.0} ms | {:.1} ms (read every active row) | |",
        ms(reopened),
        ms(scan)
    );
    println!(
        "| entity, {} signals (signal + step each), first / last tenth | {:.3} / {:.3} ms per signal ({:.2}x) | {:.3} ms (2 single-row commits) | {:.1}x / {:.1}x |",
        s.signals,
        ms(first),
        ms(last),
        last.as_secs_f64() / first.as_secs_f64(),
        ms(two_inserts),
        first.as_secs_f64() / two_inserts.as_secs_f64(),
        last.as_secs_f64() / two_inserts.as_secs_f64()
    );
    println!(
        "| replay: wake a passivated run with a {events}-event log, signal -> result | {:.1} ms | {:.1} ms (read {events} rows of one run) | {:.1}x |",
        ms(woken),
        ms(raw_scan),
        woken.as_secs_f64() / raw_scan.as_secs_f64()
    );
    Ok(())
}
