//! Three hosts over one database (`PgStore::join`): runs started on any host,
//! signalled from another and awaited on a third all complete, the partitions
//! spread over the hosts, and every recorded step ran exactly as recorded. A host
//! whose lease was taken from it (a network partition) cannot write: its write is
//! refused, the signal it was delivering waits in the owner's inbox, and the run
//! goes on once a host holds its partition again; a step that ends after its
//! host lost the lease is not recorded and runs again on the owner. Timers and
//! child runs work across hosts (a child runs on its partition's owner, its end
//! reaches the parent's owner by mail), and a log owned elsewhere can be watched.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reel::{Ctx, Event, Host, RunStatus, Workflow};
use reel_postgres::partition_of;
use support::hosts::{free_lease, lease_elsewhere};

/// Each step execution: (run, step) -> the hosts that executed it, in order.
type Executions = Arc<Mutex<HashMap<(String, String), Vec<String>>>>;

#[derive(Clone)]
struct Order {
    host: String,
    executions: Executions,
}

impl Order {
    async fn step(&self, ctx: &Ctx, name: &str) -> reel::Result<String> {
        let (host, executions) = (self.host.clone(), self.executions.clone());
        let key = (ctx.run_id().to_owned(), name.to_owned());
        ctx.step(name, move |_| {
            let (host, executions, key) = (host.clone(), executions.clone(), key.clone());
            async move {
                executions
                    .lock()
                    .expect("executions")
                    .entry(key)
                    .or_default()
                    .push(host.clone());
                Ok::<_, String>(host)
            }
        })
        .await
    }
}

impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let first = self.step(&ctx, "reserve").await?;
        let paid: String = ctx.wait_for_signal("payment").await?;
        let last = self.step(&ctx, "ship").await?;
        Ok(format!("{n}|{first}|{paid}|{last}"))
    }
}

async fn host(url: &str, name: &str, executions: &Executions) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Order {
            host: name.to_owned(),
            executions: executions.clone(),
        })
        .build()
        .await?)
}

/// The partitions each host leases, as the database says.
async fn leases(url: &str) -> BTreeMap<String, i64> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT owner, count(*) FROM reel_leases WHERE owner IS NOT NULL GROUP BY owner",
            &[],
        )
        .await
        .expect("leases");
    drop(client);
    let _ = task.await;
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Waits (at most a minute) until `check` holds of the lease table.
async fn until_leases(url: &str, check: impl Fn(&BTreeMap<String, i64>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = leases(url).await;
        if check(&now) {
            return;
        }
        assert!(Instant::now() < deadline, "leases never settled: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_share_runs_on_postgres() -> anyhow::Result<()> {
    let url = support::database("three_hosts").await;
    let executions = Executions::default();
    let hosts = [
        host(&url, "host-a", &executions).await?,
        host(&url, "host-b", &executions).await?,
        host(&url, "host-c", &executions).await?,
    ];
    const RUNS: u32 = 48;
    // Started while the hosts still balance their leases: partitions move with
    // runs under way.
    for n in 0..RUNS {
        hosts[n as usize % 3]
            .start::<Order>(&format!("order-{n}"), n)
            .await?;
    }
    until_leases(&url, |l| l.len() == 3 && l.values().all(|n| *n >= 80)).await;
    for n in 0..RUNS {
        let run = hosts[(n as usize + 1) % 3].handle::<Order>(&format!("order-{n}"));
        loop {
            if let RunStatus::Suspended { waiting_on } = run.wait_until_suspended().await?
                && waiting_on.contains("payment")
            {
                break;
            }
        }
        run.signal("payment", "paid", &format!("pay-{n}")).await?;
    }
    let mut shipped_by: BTreeMap<String, usize> = BTreeMap::new();
    for n in 0..RUNS {
        let id = format!("order-{n}");
        let run = hosts[(n as usize + 2) % 3].handle::<Order>(&id);
        let out = tokio::time::timeout(Duration::from_secs(60), run.result())
            .await
            .map_err(|_| anyhow::anyhow!("{id} did not complete"))??;
        let parts: Vec<&str> = out.split('|').collect();
        assert_eq!(parts[0], n.to_string());
        assert_eq!(parts[2], "paid");
        *shipped_by.entry(parts[3].to_owned()).or_default() += 1;
        let events = run.events().await?;
        let completed = events
            .iter()
            .filter(|e| matches!(e, Event::StepCompleted { .. }))
            .count();
        assert_eq!(completed, 2, "{id}: each step recorded once");
        // What was recorded is what the last execution of each step returned.
        let runs = executions.lock().expect("executions");
        for (step, recorded) in [("reserve", parts[1]), ("ship", parts[3])] {
            let done = &runs[&(id.clone(), step.to_owned())];
            assert_eq!(
                done.last().map(String::as_str),
                Some(recorded),
                "{id} {step}"
            );
        }
    }
    println!("steps `ship` run by: {shipped_by:?}");
    assert_eq!(
        shipped_by.len(),
        3,
        "every host ran some runs: {shipped_by:?}"
    );
    for h in hosts {
        h.shutdown().await?;
    }
    assert!(
        leases(&url).await.is_empty(),
        "shutdown gives the leases back"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_that_lost_its_lease_cannot_write() -> anyhow::Result<()> {
    let url = support::database("partitioned").await;
    let executions = Executions::default();
    let host = host(&url, "host-a", &executions).await?;
    until_leases(&url, |l| l.get("host-a") == Some(&256)).await;
    let run = host.start::<Order>("order-x", 1).await?;
    loop {
        if let RunStatus::Suspended { waiting_on } = run.wait_until_suspended().await?
            && waiting_on.contains("payment")
        {
            break;
        }
    }
    let before = run.events().await?.len();

    // The lease of the run's partition goes to a host that has no heartbeat (as if
    // `host-a` had been cut off long enough for it to expire and be taken): the
    // next write of `host-a` to that run is refused.
    lease_elsewhere(&url, "order-x").await;
    run.signal("payment", "paid", "pay-x").await?;
    assert_eq!(
        run.events().await?.len(),
        before,
        "nothing was appended by the host that lost the lease"
    );
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(conn);
    let waiting: Vec<reel_storage::Mail> = client
        .query("SELECT mail FROM reel_inbox WHERE run_id = 'order-x'", &[])
        .await?
        .iter()
        .map(|r| reel_storage::Mail::decode(r.get(0)).expect("mail"))
        .collect();
    assert!(
        waiting.iter().any(
            |m| matches!(m, reel_storage::Mail::Signal { signal_id, .. } if signal_id == "pay-x")
        ),
        "the signal waits in the owner's inbox: {waiting:?}"
    );

    // The partition is free again: `host-a` takes it back at its next renewal,
    // recovers the run, reads the inbox and the run completes.
    drop(client);
    let _ = task.await;
    free_lease(&url, "order-x").await;
    let out = tokio::time::timeout(Duration::from_secs(60), run.result())
        .await
        .map_err(|_| anyhow::anyhow!("the run did not complete"))??;
    assert_eq!(out, "1|host-a|paid|host-a");
    assert_eq!(
        executions.lock().expect("executions")[&("order-x".to_owned(), "reserve".to_owned())].len(),
        1,
        "the recorded step did not run again"
    );
    host.shutdown().await?;
    Ok(())
}

/// Opened by the test while a step body waits on it.
static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

/// One step that waits for the gate the first time it runs.
#[derive(Clone)]
struct Gated {
    executions: Arc<Mutex<u32>>,
}

impl Workflow for Gated {
    const NAME: &'static str = "gated";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let executions = self.executions.clone();
        ctx.step("slow", move |_| {
            let executions = executions.clone();
            async move {
                let n = {
                    let mut e = executions.lock().expect("executions");
                    *e += 1;
                    *e
                };
                if n == 1 {
                    GATE.acquire().await.map_err(|e| e.to_string())?.forget();
                }
                Ok::<_, String>(n)
            }
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_that_ends_after_its_lease_was_lost_is_not_recorded() -> anyhow::Result<()> {
    let url = support::database("disowned").await;
    let executions = Arc::new(Mutex::new(0));
    let store = support::join(&url, "host-a").await?;
    let host = Host::builder()
        .store(store)
        .register(Gated {
            executions: executions.clone(),
        })
        .build()
        .await?;
    until_leases(&url, |l| l.get("host-a") == Some(&256)).await;
    let run = host.start::<Gated>("gated-1", ()).await?;
    // The body runs and waits at the gate.
    while *executions.lock().expect("executions") == 0 {
        tokio::task::yield_now().await;
    }
    lease_elsewhere(&url, "gated-1").await;
    let before = run.events().await?.len();
    GATE.add_permits(1);
    // The body's result is refused; the run stops here without a crash or a park.
    let deadline = Instant::now() + Duration::from_secs(30);
    while host.live_runs().await > 0 {
        assert!(Instant::now() < deadline, "the run actor never stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(run.events().await?.len(), before, "nothing was recorded");
    assert!(
        matches!(run.status().await?, RunStatus::Running),
        "{:?}",
        run.status().await?
    );
    // The refused host woke the owner: a wake-up waits in its inbox.
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(conn);
    loop {
        let wakes = client
            .query("SELECT mail FROM reel_inbox WHERE run_id = 'gated-1'", &[])
            .await?
            .iter()
            .filter(|r| {
                matches!(
                    reel_storage::Mail::decode(r.get(0)),
                    Ok(reel_storage::Mail::Wake { .. })
                )
            })
            .count();
        if wakes > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the owner was never woken");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(client);
    let _ = task.await;
    // Once the partition is free again, the run goes on here: the step was not
    // recorded, so it runs again (at least once), and the run completes.
    free_lease(&url, "gated-1").await;
    let out = tokio::time::timeout(Duration::from_secs(60), run.result())
        .await
        .map_err(|_| anyhow::anyhow!("the run did not complete"))??;
    assert_eq!(out, 2, "the second execution's result is recorded");
    host.shutdown().await?;
    Ok(())
}

/// The partition owner of `run_id`, as the database says.
async fn owner_of(url: &str, run_id: &str) -> String {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let owner: String = client
        .query_one(
            "SELECT owner FROM reel_leases WHERE part = $1",
            &[&partition_of(run_id)],
        )
        .await
        .expect("lease")
        .get(0);
    drop(client);
    let _ = task.await;
    owner
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_owned_elsewhere_can_be_watched() -> anyhow::Result<()> {
    use futures::StreamExt;
    let url = support::database("watch").await;
    let executions = Executions::default();
    let hosts = [
        host(&url, "host-a", &executions).await?,
        host(&url, "host-b", &executions).await?,
    ];
    until_leases(&url, |l| l.len() == 2 && l.values().all(|n| *n == 128)).await;
    // A run host-a owns, watched from host-b.
    let id = "watched-0".to_owned();
    let (owner, other) = match owner_of(&url, &id).await.as_str() {
        "host-a" => (&hosts[0], &hosts[1]),
        _ => (&hosts[1], &hosts[0]),
    };
    let run = owner.start::<Order>(&id, 5).await?;
    let watch = tokio::spawn(
        other
            .run(&id)
            .watch()
            .map(|r| r.map(|record| record.event))
            .collect::<Vec<_>>(),
    );
    run.signal("payment", "paid", "pay-w").await?;
    run.result().await?;
    let seen = tokio::time::timeout(Duration::from_secs(60), watch)
        .await
        .map_err(|_| anyhow::anyhow!("the watch never ended"))??;
    let seen: Vec<Event> = seen.into_iter().collect::<reel::Result<_>>()?;
    assert_eq!(seen, run.events().await?, "every record, once, in order");
    for h in hosts {
        h.shutdown().await?;
    }
    Ok(())
}

/// A child run: one step, named by the host that ran it.
#[derive(Clone)]
struct Label {
    host: String,
}

impl Workflow for Label {
    const NAME: &'static str = "label";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let host = self.host.clone();
        ctx.step("print", move |_| {
            let host = host.clone();
            async move { Ok::<_, String>(format!("label-{n}@{host}")) }
        })
        .await
    }
}

/// A parent that sleeps, then waits for a child run (most children hash into a
/// partition another host owns).
struct Ship;

impl Workflow for Ship {
    const NAME: &'static str = "ship";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        ctx.sleep(Duration::from_millis(30)).await?;
        ctx.child::<Label>(&format!("{}-label", ctx.run_id()), n)
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_and_children_cross_hosts() -> anyhow::Result<()> {
    let url = support::database("children").await;
    let mut hosts = Vec::new();
    for name in ["host-a", "host-b", "host-c"] {
        let store = support::join(&url, name).await?;
        hosts.push(
            Host::builder()
                .store(store)
                .register(Ship)
                .register(Label {
                    host: name.to_owned(),
                })
                .build()
                .await?,
        );
    }
    until_leases(&url, |l| l.len() == 3 && l.values().all(|n| *n >= 80)).await;
    const RUNS: u32 = 24;
    for n in 0..RUNS {
        hosts[n as usize % 3]
            .start::<Ship>(&format!("ship-{n}"), n)
            .await?;
    }
    let mut labelled_by = BTreeMap::new();
    for n in 0..RUNS {
        let id = format!("ship-{n}");
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            hosts[(n as usize + 1) % 3].handle::<Ship>(&id).result(),
        )
        .await
        .map_err(|_| anyhow::anyhow!("{id} did not complete"))??;
        let (label, host) = out.split_once('@').expect("label@host");
        assert_eq!(label, format!("label-{n}"));
        *labelled_by.entry(host.to_owned()).or_insert(0) += 1;
    }
    // Each child runs on the owner of its partition (partitions may still move
    // while the hosts settle, so the owner is not checked run by run).
    println!("children run by: {labelled_by:?}");
    assert!(labelled_by.len() > 1, "children ran on several hosts");
    for h in hosts {
        h.shutdown().await?;
    }
    Ok(())
}
