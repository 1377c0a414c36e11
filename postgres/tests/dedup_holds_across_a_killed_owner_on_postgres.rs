//! De-duplication across a SIGKILL of the owner. A child process (`host-0`) owns
//! every run below and, round after round, sends signals to its carts (with ids),
//! starts runs and calls signal-with-start on new carts; it is killed in the
//! middle of a round. Every call is then retried, with the same ids, on the two
//! hosts of this process at once (one of them takes each partition over):
//! - a signal whose id the dead owner recorded is not delivered again, one it
//!   did not is delivered once: each cart holds every item once, in order;
//! - a start of a run id that exists is the same run: a cart keeps its first
//!   start's input, a run of steps is begun once, ends once, and no step recorded
//!   before the kill runs again;
//! - signal-with-start creates each cart once and delivers its signal once.
//!
//! And a queue's de-duplication key held by a run of the killed host: another
//! run with the key is refused on the other hosts, before and after the
//! takeover, naming the holder; the holder itself may be started again (the same
//! run); once the holder has ended on its taker, the key is free.

#[allow(unreachable_pub)]
#[path = "../../tests/common/cart.rs"]
mod cart;
mod procs;
mod support;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use cart::{Cart, received};
use procs::{Proc, Tagged};
use reel::{Error, Event, Host, QueueOptions, StartOptions};

const CHILD_ENV: &str = "REEL_PG_DEDUP_KILL_CHILD_DIR";
const TEST: &str = "dedup_holds_across_a_killed_owner_on_postgres";
const KEY_ENV: &str = "REEL_PG_DEDUP_KEY_KILL_CHILD_DIR";
const KEY_TEST: &str = "queue_dedup_key_held_by_a_killed_host_on_postgres";
const ROUNDS: usize = 40;
const CARTS: usize = 3;
const STEPS: usize = 6;
/// The round whose end the test waits for before the kill.
const KILL_AFTER: usize = 12;
const LIMIT: Duration = Duration::from_secs(60);

async fn open(dir: &Path, name: &str) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .register(Cart)
        .queue("q", QueueOptions::default())
        .register(Tagged {
            side: dir.join("executions.log"),
            tag: name.to_owned(),
            steps: STEPS,
            busy: Duration::from_millis(5),
            pause_every: 3,
            pause: Duration::from_millis(20),
        })
        .build()
        .await?)
}

/// The ids, all on partitions of host-0.
struct Ids {
    carts: Vec<String>,
    starts: Vec<String>,
    sws: Vec<String>,
}

impl Ids {
    fn of(owners: &[usize]) -> Ids {
        Ids {
            carts: procs::ids_on(owners, 0, "cart", CARTS),
            starts: procs::ids_on(owners, 0, "start", ROUNDS),
            sws: procs::ids_on(owners, 0, "sws", ROUNDS),
        }
    }
}

fn item(cart: &str, round: usize) -> String {
    format!("{cart}:{round}")
}

/// One round's calls, made by `host` (the owner's, or a retry's).
async fn round(host: &Host, ids: &Ids, k: usize, creator: &str) -> anyhow::Result<()> {
    for cart in &ids.carts {
        // Started again: the same run, its first start's input.
        host.start::<Cart>(cart, creator.to_owned()).await?;
        let it = item(cart, k);
        host.handle::<Cart>(cart)
            .signal("add", &it, &format!("s-{it}"))
            .await?;
    }
    host.start::<Tagged>(&ids.starts[k], ()).await?;
    host.signal_with_start::<Cart, _>(
        &ids.sws[k],
        creator.to_owned(),
        "add",
        &format!("x{k}"),
        &format!("w{k}"),
    )
    .await?;
    Ok(())
}

fn child(dir: &Path) {
    procs::runtime().block_on(async {
        let url = std::fs::read_to_string(dir.join("url")).expect("url");
        let host = open(dir, "host-0").await.expect("open");
        let go = dir.join("go");
        let deadline = Instant::now() + LIMIT;
        while !go.exists() {
            assert!(Instant::now() < deadline, "never told to go");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let owners = support::settled_leases(&url, "host-", 3).await;
        let ids = Ids::of(&owners);
        for cart in &ids.carts {
            host.start::<Cart>(cart, "host-0".into())
                .await
                .expect("start a cart");
        }
        for k in 0..ROUNDS {
            round(&host, &ids, k, "host-0").await.expect("round");
            println!("round {k}");
            std::io::stdout().flush().ok();
        }
        std::future::pending::<()>().await;
    });
}

#[test]
fn dedup_holds_across_a_killed_owner_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let url = rt.block_on(support::database("dedup_kill"));
    std::fs::write(dir.join("url"), &url).expect("url file");
    let owner = Proc::spawn(TEST, CHILD_ENV, dir, &[]);
    let (hosts, ids) = rt.block_on(async {
        let a = open(dir, "host-1").await.expect("host 1");
        let b = open(dir, "host-2").await.expect("host 2");
        let owners = support::settled_leases(&url, "host-", 3).await;
        std::fs::write(dir.join("go"), "").expect("go");
        ([a, b], Ids::of(&owners))
    });
    owner.until(LIMIT, |l| l.ends_with(&format!("round {KILL_AFTER}")));
    owner.kill();
    rt.block_on(async {
        // Every round again, from both hosts at once, through the takeover.
        for k in 0..ROUNDS {
            let (a, b) = tokio::join!(
                round(&hosts[0], &ids, k, "host-1"),
                round(&hosts[1], &ids, k, "host-2")
            );
            a.expect("retry on host 1");
            b.expect("retry on host 2");
        }
        let mut problems = Vec::new();
        let checkout = |id: String| {
            let host = &hosts[0];
            async move {
                let cart = host.handle::<Cart>(&id);
                cart.signal("add", "checkout", "done").await?;
                let items = tokio::time::timeout(LIMIT, cart.result())
                    .await
                    .map_err(|_| anyhow::anyhow!("{id} did not end"))??;
                anyhow::Ok((items, received(&cart.events().await?)))
            }
        };
        for cart in &ids.carts {
            let (items, ids_seen) = checkout(cart.clone()).await.expect("cart");
            let mut want = vec!["host-0".to_owned()];
            want.extend((0..ROUNDS).map(|k| item(cart, k)));
            if items != want {
                problems.push(format!("{cart}: items {items:?}"));
            }
            let mut want: Vec<String> = (0..ROUNDS)
                .map(|k| format!("s-{}", item(cart, k)))
                .collect();
            want.push("done".into());
            if ids_seen != want {
                problems.push(format!("{cart}: signals {ids_seen:?}"));
            }
        }
        for (k, id) in ids.sws.iter().enumerate() {
            let (items, ids_seen) = checkout(id.clone()).await.expect("sws cart");
            let creator_ok = match items.first().map(String::as_str) {
                Some("host-0") => true,
                Some("host-1" | "host-2") => k > KILL_AFTER,
                _ => false,
            };
            if !creator_ok || items.get(1..) != Some(&[format!("x{k}")][..]) {
                problems.push(format!("{id}: items {items:?}"));
            }
            if ids_seen != [format!("w{k}"), "done".to_owned()] {
                problems.push(format!("{id}: signals {ids_seen:?}"));
            }
        }
        let mut recorded = HashMap::new();
        for id in &ids.starts {
            let run = hosts[1].handle::<Tagged>(id);
            let tokens = tokio::time::timeout(LIMIT, run.result())
                .await
                .unwrap_or_else(|_| panic!("{id} did not end"))
                .expect("a started run completes");
            let events = run.events().await.expect("events");
            let begun = events
                .iter()
                .filter(|e| matches!(e, Event::RunStarted { .. }))
                .count();
            let steps = events
                .iter()
                .filter(|e| matches!(e, Event::StepCompleted { .. }))
                .count();
            if (begun, steps) != (1, STEPS) {
                problems.push(format!("{id}: {begun} starts, {steps} steps recorded"));
            }
            recorded.insert(id.clone(), tokens);
        }
        problems.extend(procs::not_last(&dir.join("executions.log"), &recorded));
        assert!(problems.is_empty(), "{problems:#?}");
        for h in hosts {
            h.shutdown().await.expect("shutdown");
        }
    });
}

fn keyed() -> StartOptions {
    StartOptions::default().queue("q").dedup_key("invoice-7")
}

fn key_child(dir: &Path) {
    procs::runtime().block_on(async {
        let url = std::fs::read_to_string(dir.join("url")).expect("url");
        let host = open(dir, "host-0").await.expect("open");
        let go = dir.join("go");
        let deadline = Instant::now() + LIMIT;
        while !go.exists() {
            assert!(Instant::now() < deadline, "never told to go");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let owners = support::settled_leases(&url, "host-", 3).await;
        let holder = procs::ids_on(&owners, 0, "holder", 1).remove(0);
        host.start_with::<Cart>(&holder, "host-0".into(), keyed())
            .await
            .expect("start the holder");
        host.run(&holder)
            .wait_until_suspended()
            .await
            .expect("the holder waits");
        println!("held");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// A start of `id` with the held key, which must be refused naming `holder`.
async fn refused(host: &Host, id: &str, holder: &str) -> Option<String> {
    match host.start_with::<Cart>(id, "late".into(), keyed()).await {
        Err(Error::Deduplicated { run_id, .. }) if run_id == holder => None,
        other => Some(format!(
            "{id} with a held key: {:?}",
            other.map(|h| h.id().to_owned())
        )),
    }
}

#[test]
fn queue_dedup_key_held_by_a_killed_host_on_postgres() {
    if let Ok(dir) = std::env::var(KEY_ENV) {
        key_child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let url = rt.block_on(support::database("dedup_key_kill"));
    std::fs::write(dir.join("url"), &url).expect("url file");
    let owner = Proc::spawn(KEY_TEST, KEY_ENV, dir, &[]);
    let (hosts, holder) = rt.block_on(async {
        let a = open(dir, "host-1").await.expect("host 1");
        let b = open(dir, "host-2").await.expect("host 2");
        let owners = support::settled_leases(&url, "host-", 3).await;
        std::fs::write(dir.join("go"), "").expect("go");
        ([a, b], procs::ids_on(&owners, 0, "holder", 1).remove(0))
    });
    owner.until(LIMIT, |l| l.ends_with("held"));
    owner.kill();
    rt.block_on(async {
        let mut problems = Vec::new();
        // Before the takeover (the dead host's leases still run).
        problems.extend(refused(&hosts[0], "other-1", &holder).await);
        // The holder, started again: the same run.
        hosts[1]
            .start_with::<Cart>(&holder, "host-2".into(), keyed())
            .await
            .expect("the holder started again");
        let cart = hosts[1].handle::<Cart>(&holder);
        cart.signal("add", "apple", "a-1").await.expect("signal");
        procs::until("the holder's taker to record the signal", LIMIT, || async {
            received(&cart.events().await.expect("events")) == ["a-1"]
        })
        .await;
        // After the takeover.
        problems.extend(refused(&hosts[1], "other-2", &holder).await);
        cart.signal("add", "checkout", "done")
            .await
            .expect("checkout");
        let items = tokio::time::timeout(LIMIT, cart.result())
            .await
            .expect("the holder ends")
            .expect("the holder completes");
        if items != ["host-0", "apple"] {
            problems.push(format!("the holder: {items:?}"));
        }
        for (i, host) in hosts.iter().enumerate() {
            if host
                .handle::<Cart>(&format!("other-{}", i + 1))
                .status()
                .await
                .is_ok()
            {
                problems.push(format!("other-{} exists", i + 1));
            }
        }
        // Free once its holder ended.
        let next = hosts[0]
            .start_with::<Cart>("next", "host-1".into(), keyed())
            .await
            .expect("the key is free");
        next.signal("add", "checkout", "done")
            .await
            .expect("checkout");
        tokio::time::timeout(LIMIT, next.result())
            .await
            .expect("next ends")
            .expect("next completes");
        assert!(problems.is_empty(), "{problems:#?}");
        for h in hosts {
            h.shutdown().await.expect("shutdown");
        }
    });
}
