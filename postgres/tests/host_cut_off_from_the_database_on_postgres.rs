//! A host cut off from the database while its runs are doing steps:
//! - alone (its role may not log in, its sessions killed) for longer than its
//!   lease: it starts no step body once the other host took its partitions over,
//!   the other host finishes its runs, and once it is back neither runs a step
//!   again after its result was recorded (each execution returns a fresh token;
//!   the token recorded is the step's last execution); every run completes;
//! - with every host (the database refuses sessions): both hosts shut down
//!   within a hang limit, with `Ok` or a typed storage error; once the database
//!   is back, a new host finishes their runs, with no recorded step run again.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reel::{Ctx, Error, Host, RunStatus, Workflow};
use support::hosts::{joined, owned_by, spread};
use support::outage;

const LIMIT: Duration = Duration::from_secs(60);
const STEPS: u32 = 30;

type Tokens = Vec<(String, u64)>;

/// One execution of a step body: the host it ran on, its token, when it began.
#[derive(Clone, Debug)]
struct Exec {
    host: String,
    token: u64,
    began: Instant,
}

#[derive(Clone, Default)]
struct Ledger {
    steps: Arc<Mutex<HashMap<String, Vec<Exec>>>>,
    next: Arc<AtomicU64>,
}

impl Ledger {
    fn all(&self) -> Vec<Exec> {
        self.steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    fn count_on(&self, host: &str) -> usize {
        self.all().iter().filter(|e| e.host == host).count()
    }

    fn check(&self, run: &str, recorded: &Tokens) {
        let steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        for (key, token) in recorded {
            let execs = steps.get(key).cloned().unwrap_or_default();
            assert_eq!(
                execs.last().map(|e| e.token),
                Some(*token),
                "{run}: step {key} ran again after its result {token} was recorded: {execs:?}"
            );
        }
    }
}

/// `n` steps (each a few milliseconds of work), a timer after every third.
#[derive(Clone)]
struct Stepper {
    host: String,
    ledger: Ledger,
}

impl Workflow for Stepper {
    const NAME: &'static str = "stepper";
    type Input = u32;
    type Output = Tokens;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Tokens> {
        let mut out = Vec::new();
        for i in 0..n {
            let (host, ledger) = (self.host.clone(), self.ledger.clone());
            out.push(
                ctx.step(&format!("s{i}"), |s| {
                    let (host, ledger) = (host.clone(), ledger.clone());
                    let key = s.idempotency_key().to_owned();
                    async move {
                        let began = Instant::now();
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        let token = ledger.next.fetch_add(1, Ordering::SeqCst) + 1;
                        ledger
                            .steps
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .entry(key.clone())
                            .or_default()
                            .push(Exec { host, token, began });
                        Ok::<_, String>((key, token))
                    }
                })
                .await?,
            );
            if i % 3 == 2 {
                ctx.sleep(Duration::from_millis(30)).await?;
            }
        }
        Ok(out)
    }
}

async fn open(url: &str, name: &str, ledger: &Ledger) -> anyhow::Result<Host> {
    Ok(joined(url, name)
        .await?
        .register(Stepper {
            host: name.to_owned(),
            ledger: ledger.clone(),
        })
        .build()
        .await?)
}

async fn until(what: &str, check: impl AsyncFn() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `host` leases every partition, as the database says.
async fn leases_all(url: &str, host: &str) -> bool {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(*) FROM reel_leases WHERE owner = $1 AND expires_at > now()",
            &[&host],
        )
        .await
        .expect("leases");
    drop(client);
    let _ = task.await;
    row.get::<_, i64>(0) == i64::from(reel_postgres::PARTITIONS)
}

/// Awaits the run's result through `host` (retrying storage refusals), checks it
/// against the ledger.
async fn completes(host: &Host, id: &str, ledger: &Ledger) -> anyhow::Result<()> {
    let deadline = Instant::now() + LIMIT;
    loop {
        match tokio::time::timeout(LIMIT, host.run(id).status()).await {
            Err(_) => panic!("status of {id} hung"),
            Ok(Ok(RunStatus::Completed)) => break,
            Ok(Ok(s @ (RunStatus::Failed { .. } | RunStatus::Parked { .. }))) => {
                panic!("{id} ended wrongly: {s:?}")
            }
            Ok(Ok(_) | Err(Error::Storage(_))) => {}
            Ok(Err(e)) => panic!("status of {id}: {e:?}"),
        }
        assert!(Instant::now() < deadline, "{id} never completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let tokens = host.handle::<Stepper>(id).result().await?;
    assert_eq!(tokens.len(), STEPS as usize, "{id}");
    ledger.check(id, &tokens);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_cut_off_past_its_lease_stops_and_the_other_takes_over() -> anyhow::Result<()> {
    let url = support::database("cut_off_host").await;
    let (role, cut_url) = outage::own_role(&url).await;
    let ledger = Ledger::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |url, name| {
        let url = if name == "host-0" { &cut_url } else { url };
        open(url, name, &ledger).await
    })
    .await?;
    let ids = owned_by(&owners, 0, "cut", 6);
    for id in &ids {
        hosts[1].start::<Stepper>(id, STEPS).await?;
    }
    until("host-0 to run steps", async || {
        ledger.count_on("host-0") >= 20
    })
    .await;

    outage::cut_off(&url, &role).await;
    until("host-1 to take every partition over", async || {
        leases_all(&url, "host-1").await
    })
    .await;
    let taken = Instant::now();
    let before = ledger.count_on("host-1");
    until("host-1 to run the runs taken over", async || {
        ledger.count_on("host-1") >= before + 20
    })
    .await;
    let late: Vec<Exec> = ledger
        .all()
        .into_iter()
        .filter(|e| e.host == "host-0" && e.began > taken)
        .collect();
    assert!(
        late.is_empty(),
        "host-0 started step bodies after its partitions were taken over: {late:?}"
    );

    outage::reconnect(&role).await;
    for id in &ids {
        completes(&hosts[1], id, &ledger).await?;
        completes(&hosts[0], id, &ledger).await?;
    }
    for h in hosts {
        tokio::time::timeout(LIMIT, h.shutdown())
            .await
            .map_err(|_| anyhow::anyhow!("a host did not shut down"))??;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_shut_down_while_the_database_is_gone() -> anyhow::Result<()> {
    let url = support::database("shutdown_in_outage").await;
    let ledger = Ledger::default();
    let (hosts, owners) =
        spread::<2>(&url, 100, async |url, name| open(url, name, &ledger).await).await?;
    let ids = [owned_by(&owners, 0, "sd", 3), owned_by(&owners, 1, "sd", 3)].concat();
    for (i, id) in ids.iter().enumerate() {
        hosts[i % 2].start::<Stepper>(id, STEPS).await?;
    }
    until("steps to run", async || ledger.all().len() >= 20).await;

    outage::refuse(&url).await;
    for h in hosts {
        let shut = tokio::time::timeout(LIMIT, h.shutdown())
            .await
            .map_err(|_| anyhow::anyhow!("a host did not shut down while the database was gone"))?;
        assert!(
            matches!(shut, Ok(()) | Err(Error::Storage(_))),
            "shutdown during the outage: {shut:?}"
        );
    }
    outage::allow(&url).await;

    let host = open(&url, "host-2", &ledger).await?;
    for id in &ids {
        completes(&host, id, &ledger).await?;
    }
    tokio::time::timeout(LIMIT, host.shutdown())
        .await
        .map_err(|_| anyhow::anyhow!("the new host did not shut down"))??;
    Ok(())
}
