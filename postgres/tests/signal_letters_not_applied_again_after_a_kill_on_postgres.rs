//! Signals that came by letter from another host, consumed by a run that then
//! continued as new, are not delivered again to the new segment when their owner
//! dies before its inbox drain acknowledged the letters. The drain acknowledges a
//! read once it has applied all of it; here another run's letter in the same read
//! never finishes applying (its write's answer is held), so the acknowledgement
//! never comes, and the owner, a child process, is SIGKILLed after the run has
//! continued as new. The taker reads what is left in the inbox: the letters must
//! be gone, since the new segment, which does not know their signal ids, would
//! take their signals as new ones.

mod procs;
mod support;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use procs::Proc;
use reel::{Ctx, Event, Host, RunStatus, Workflow};
use reel_postgres::partition_of;
use reel_storage::Mail;
use reel_storage::testing::{Fault, FaultStore, Op};

const CHILD_ENV: &str = "REEL_PG_SIGNAL_LETTERS_CHILD_DIR";
const TEST: &str = "signal_letters_not_applied_again_after_a_kill_on_postgres";
const TOTAL: u32 = 4;
const PER_SEGMENT: u32 = 2;

/// Receives `PER_SEGMENT` signals `s` per segment, then continues as new, until
/// it has `TOTAL`; returns them and its segment count.
#[derive(Clone)]
struct Relay;

impl Workflow for Relay {
    const NAME: &'static str = "relay";
    type Input = (u32, Vec<u32>);
    type Output = (u32, Vec<u32>);
    async fn run(
        &self,
        ctx: Ctx,
        (seg, mut got): (u32, Vec<u32>),
    ) -> reel::Result<(u32, Vec<u32>)> {
        for _ in 0..PER_SEGMENT {
            let n: u32 = ctx.wait_for_signal("s").await?;
            got.push(n);
        }
        if (got.len() as u32) < TOTAL {
            return ctx.continue_as_new::<Relay>((seg + 1, got)).await;
        }
        Ok((seg + 1, got))
    }
}

/// Waits for one signal `b`.
#[derive(Clone)]
struct Blocker;

impl Workflow for Blocker {
    const NAME: &'static str = "blocker";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, (): ()) -> reel::Result<u32> {
        ctx.wait_for_signal("b").await
    }
}

fn builder() -> reel::HostBuilder {
    Host::builder().register(Relay).register(Blocker)
}

/// The relay's and the blocker's ids, on partitions of host-0.
fn ids(owners: &[usize]) -> (String, String) {
    let first = |prefix: &str| {
        (0..)
            .map(|n| format!("{prefix}-{n}"))
            .find(|id| owners[partition_of(id) as usize] == 0)
            .expect("an id on host-0")
    };
    (first("relay"), first("blocker"))
}

fn suspended(status: &reel::Result<RunStatus>) -> bool {
    matches!(status, Ok(RunStatus::Suspended { .. }))
}

/// Host-0: starts both runs, then holds the answer of the blocker's next write,
/// and says `continued` once that write has begun and the relay has continued
/// as new.
fn child(dir: &Path) {
    procs::runtime().block_on(async {
        let url = std::fs::read_to_string(dir.join("url")).expect("url");
        let pg = support::join(&url, "host-0").await.expect("join");
        let store = FaultStore::new(pg);
        let host = builder().store(store.clone()).build().await.expect("open");
        let go = dir.join("go");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !go.exists() {
            assert!(Instant::now() < deadline, "never told to go");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let owners = support::settled_leases(&url, "host-", 2).await;
        let (relay, blocker) = ids(&owners);
        host.start::<Relay>(&relay, (0, Vec::new()))
            .await
            .expect("start relay");
        host.start::<Blocker>(&blocker, ())
            .await
            .expect("start blocker");
        procs::until("both runs waiting", Duration::from_secs(90), || async {
            suspended(&host.run(&relay).status().await)
                && suspended(&host.run(&blocker).status().await)
        })
        .await;
        let (hold, gate) = Fault::hold(Op::Submit);
        store.inject(hold.for_run(&blocker));
        // The ids chosen here are the parent's too: its view of the leases may
        // differ by now.
        println!("ready {relay} {blocker}");
        std::io::stdout().flush().ok();
        let run = host.run(&relay);
        procs::until(
            "the relay continued as new",
            Duration::from_secs(90),
            || async {
                gate.arrived() > 0
                    && run.records().await.is_ok_and(|r| {
                        r.iter()
                            .any(|r| matches!(r.event, Event::ContinuedAsNew { .. }))
                    })
            },
        )
        .await;
        println!("continued");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// Posts the letters to host-0's inbox in one statement, so that one read of
/// the inbox takes them all: the blocker's first, then the relay's two.
async fn post_together(url: &str, relay: &str, blocker: &str) {
    let letter = |run: &str, name: &str, n: u32, signal_id: &str| {
        let payload = rmp_serde::to_vec_named(&n).expect("payload");
        let mail = Mail::Signal {
            name: name.to_owned(),
            signal_id: signal_id.to_owned(),
            payload: reel_storage::Payload(payload),
        };
        (
            partition_of(run),
            run.to_owned(),
            mail.encode().expect("mail"),
        )
    };
    let letters = [
        letter(blocker, "b", 7, "b-0"),
        letter(relay, "s", 0, "s-0"),
        letter(relay, "s", 1, "s-1"),
    ];
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let [a, b, c] = &letters;
    client
        .execute(
            "WITH posted AS (INSERT INTO reel_inbox (part, run_id, mail) \
             VALUES ($1, $2, $3), ($4, $5, $6), ($7, $8, $9) RETURNING part) \
             SELECT pg_notify('reel_inbox', part::text) FROM (SELECT DISTINCT part FROM posted) p",
            &[&a.0, &a.1, &a.2, &b.0, &b.1, &b.2, &c.0, &c.1, &c.2],
        )
        .await
        .expect("post the letters");
    drop(client);
    let _ = task.await;
}

#[test]
fn signal_letters_not_applied_again_after_a_kill_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(support::database("signal_letters"));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let victim = Proc::spawn(TEST, CHILD_ENV, dir.path(), &[]);
    let host = rt.block_on(async {
        let store = support::join(&url, "host-1").await.expect("join");
        let host = builder().store(store).build().await.expect("host 1");
        support::settled_leases(&url, "host-", 2).await;
        std::fs::write(dir.path().join("go"), "").expect("go");
        host
    });
    // (The child's first line of its own follows the test harness's `test ... `.)
    let mut ready = String::new();
    victim.until(Duration::from_secs(120), |l| match l.split_once("ready ") {
        Some((_, ids)) => {
            ready = ids.to_owned();
            true
        }
        None => false,
    });
    let mut words = ready.split_whitespace().map(str::to_owned);
    let (relay, blocker) = (words.next().expect("relay"), words.next().expect("blocker"));
    rt.block_on(post_together(&url, &relay, &blocker));
    victim.until(Duration::from_secs(120), |l| l.ends_with("continued"));
    victim.kill();
    rt.block_on(async {
        let mut problems = Vec::new();
        for k in PER_SEGMENT..TOTAL {
            if let Err(e) = host.run(&relay).signal("s", &k, &format!("s-{k}")).await {
                problems.push(format!("signal s-{k}: {e}"));
            }
        }
        let run = host.handle::<Relay>(&relay);
        match tokio::time::timeout(Duration::from_secs(40), run.result()).await {
            Ok(Ok((segments, got))) => {
                if got != (0..TOTAL).collect::<Vec<_>>() {
                    problems.push(format!("{relay}: received {got:?}"));
                }
                if segments != TOTAL / PER_SEGMENT {
                    problems.push(format!("{relay}: {segments} segments"));
                }
            }
            other => problems.push(format!("{relay}: {other:?} ({:?})", run.status().await)),
        }
        let held = host.handle::<Blocker>(&blocker);
        match tokio::time::timeout(Duration::from_secs(40), held.result()).await {
            Ok(Ok(7)) => {}
            other => problems.push(format!("{blocker}: {other:?}")),
        }
        host.shutdown().await.expect("shutdown");
        assert!(
            problems.is_empty(),
            "{} problems:\n{}",
            problems.len(),
            problems.join("\n")
        );
    });
}
