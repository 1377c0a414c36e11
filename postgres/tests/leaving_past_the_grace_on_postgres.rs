//! A host that leaves while a run's step body outlasts its wind-down: giving its
//! partitions back to a host that joined (the grace of a quarter lease runs out
//! with the body still running), shutting down mid-body, and shutting down with
//! the step's result appended but its answer not yet back (held). In each case
//! nothing recorded is lost, a step whose result was recorded never runs again,
//! each step is recorded once, another host ends the run, and the leaving host's
//! `shutdown` returns. And a run whose write (a signal's record) is slow to answer
//! while its partition is given back does not hold up the giving host's renewal
//! past the grace: its other partitions stay leased and their runs go on.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use reel::{Ctx, Event, Host, Workflow};
use reel_postgres::partition_of;
use reel_storage::testing::{Fault, FaultStore, Op};
use support::hosts::{owned_by, result_of, shutdown_all, spread};
use tokio::sync::Semaphore;

const LIMIT: Duration = Duration::from_secs(30);

/// Per run: how many times each step body ran, the gate the first `slow` body
/// waits at (closed until the test opens it), and a permit per `slow` body begun.
#[derive(Default)]
struct Probe {
    runs: HashMap<(String, &'static str), u32>,
    gates: HashMap<String, Arc<Semaphore>>,
    begun: HashMap<String, Arc<Semaphore>>,
}

static PROBE: LazyLock<Mutex<Probe>> = LazyLock::new(Mutex::default);

fn probe() -> std::sync::MutexGuard<'static, Probe> {
    PROBE.lock().unwrap_or_else(|p| p.into_inner())
}

fn bump(run: &str, step: &'static str) -> u32 {
    let mut p = probe();
    let n = p.runs.entry((run.to_owned(), step)).or_default();
    *n += 1;
    *n
}

fn ran(run: &str, step: &'static str) -> u32 {
    probe()
        .runs
        .get(&(run.to_owned(), step))
        .copied()
        .unwrap_or(0)
}

fn gate(run: &str) -> Arc<Semaphore> {
    probe()
        .gates
        .entry(run.to_owned())
        .or_insert_with(|| Arc::new(Semaphore::new(0)))
        .clone()
}

fn begun(run: &str) -> Arc<Semaphore> {
    probe()
        .begun
        .entry(run.to_owned())
        .or_insert_with(|| Arc::new(Semaphore::new(0)))
        .clone()
}

/// Steps `first`, `slow` (its first body waits at the run's gate), `last`;
/// returns what `slow` returned: `attempt-<n>`, n counting its bodies.
struct Slow;
impl Workflow for Slow {
    const NAME: &'static str = "slow";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let run = ctx.run_id().to_owned();
        let r = run.clone();
        ctx.step("first", move |_| {
            let r = r.clone();
            async move { Ok::<_, String>(bump(&r, "first")) }
        })
        .await?;
        let r = run.clone();
        let out = ctx
            .step("slow", move |_| {
                let r = r.clone();
                async move {
                    let n = bump(&r, "slow");
                    begun(&r).add_permits(1);
                    if n == 1 {
                        // A closed semaphore lets everyone through: the test's "open".
                        let _ = gate(&r).acquire().await;
                    }
                    Ok::<_, String>(format!("attempt-{n}"))
                }
            })
            .await?;
        let r = run.clone();
        ctx.step("last", move |_| {
            let r = r.clone();
            async move { Ok::<_, String>(bump(&r, "last")) }
        })
        .await?;
        Ok(out)
    }
}

async fn open(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Slow)
        .build()
        .await?)
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(LIMIT, fut)
        .await
        .map_err(|_| anyhow::anyhow!("{what} did not happen within {LIMIT:?}"))
}

/// Checks the run's log and the bodies run: each step recorded once, `first`
/// and `last` ran once, and `slow` ran no more after its recorded attempt.
async fn check(host: &Host, id: &str, out: &str) -> anyhow::Result<()> {
    let events = host.run(id).events().await?;
    for step in ["first", "slow", "last"] {
        let recorded = events
            .iter()
            .filter(|e| matches!(e, Event::StepCompleted { id, .. } if id == step))
            .count();
        assert_eq!(
            recorded, 1,
            "{id}: step {step} recorded {recorded} times: {events:?}"
        );
    }
    assert_eq!(ran(id, "first"), 1, "{id}: `first`, recorded, ran again");
    assert_eq!(ran(id, "last"), 1, "{id}: `last` ran more than once");
    let n: u32 = out
        .strip_prefix("attempt-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert_eq!(
        ran(id, "slow"),
        n,
        "{id}: `slow` recorded its attempt {n} but its body ran {} times",
        ran(id, "slow")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_given_back_with_a_step_past_the_grace() -> anyhow::Result<()> {
    let url = support::database("leave_grace_handback").await;
    let ([h0, h1], owners) = spread::<2>(&url, 100, open).await?;
    // The partition host-1 gives back first when a third host joins: its highest.
    let top = (0..owners.len())
        .rev()
        .find(|p| owners[*p] == 1)
        .expect("host-1 holds partitions");
    let id = (0..)
        .map(|i| format!("hb-{i}"))
        .find(|id| partition_of(id) as usize == top)
        .expect("an id in the partition");
    h0.start::<Slow>(&id, ()).await?;
    within("the slow body to begin", begun(&id).acquire())
        .await??
        .forget();

    // A third host joins: host-1 gives the partition back while `slow` runs,
    // and its grace runs out with the body still waiting at the gate.
    let h2 = open(&url, "host-2").await?;
    let out = result_of::<Slow>(&h0, &id).await??;
    gate(&id).close();
    assert_eq!(out, "attempt-2", "the run ended with {out}");
    // Whatever host-1 does with the late body's result is done once it is shut.
    within("host-1's shutdown", h1.shutdown()).await??;
    check(&h2, &id, &out).await?;
    assert_eq!(result_of::<Slow>(&h2, &id).await??, out);
    shutdown_all([h0, h2]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_shut_down_mid_body_loses_nothing() -> anyhow::Result<()> {
    let url = support::database("leave_grace_shutdown").await;
    let ([h0, h1], owners) = spread::<2>(&url, 100, open).await?;
    let id = owned_by(&owners, 1, "sd", 1).remove(0);
    h0.start::<Slow>(&id, ()).await?;
    within("the slow body to begin", begun(&id).acquire())
        .await??
        .forget();

    within("host-1's shutdown", h1.shutdown()).await??;
    let out = result_of::<Slow>(&h0, &id).await??;
    assert_eq!(out, "attempt-2", "the run ended with {out}");
    // The body cut off by the shutdown ends now: nothing of it may land.
    gate(&id).close();
    let h1 = open(&url, "host-1").await?;
    support::spread_leases(&url, "host-", 2, 100).await;
    check(&h1, &id, &out).await?;
    shutdown_all([h0, h1]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_shut_down_with_an_append_answer_held_loses_nothing() -> anyhow::Result<()> {
    let url = support::database("leave_grace_append").await;
    let h0 = open(&url, "host-0").await?;
    let faults = FaultStore::new(support::join(&url, "host-1").await?);
    let h1 = Host::builder()
        .store(faults.clone())
        .register(Slow)
        .build()
        .await?;
    let owners = support::spread_leases(&url, "host-", 2, 100).await;
    let id = owned_by(&owners, 1, "ap", 1).remove(0);
    h0.start::<Slow>(&id, ()).await?;
    within("the slow body to begin", begun(&id).acquire())
        .await??
        .forget();

    // The next append of the run (the body's result) lands, and its answer is
    // held while host-1 shuts down.
    let (hold, held) = Fault::hold(Op::Submit);
    faults.inject(hold.for_run(&id));
    gate(&id).close();
    within("the append to land", held.wait_arrived()).await?;
    let leaving = tokio::spawn(async move { h1.shutdown().await });
    // host-0 ends the run (host-1's leases are given back, or run out).
    let out = result_of::<Slow>(&h0, &id).await??;
    // The held append was the body's result: it stays, and the body never
    // runs again.
    assert_eq!(out, "attempt-1", "the run ended with {out}");
    held.release();
    within("host-1's shutdown", leaving).await???;
    check(&h0, &id, &out).await?;
    h0.shutdown().await?;
    Ok(())
}

/// Waits for `go`, then returns it from a step.
struct Waits;
impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let go: u32 = ctx.wait_for_signal("go").await?;
        ctx.step("echo", move |_| async move { Ok::<_, String>(go) })
            .await
    }
}

/// How many times the host `name` has renewed its membership, as the database
/// saw it: waits until its `expires_at` has moved on `times` times.
async fn renewals(client: &tokio_postgres::Client, name: &str, times: usize) -> anyhow::Result<()> {
    let read = async || -> anyhow::Result<Option<std::time::SystemTime>> {
        Ok(client
            .query_opt(
                "SELECT expires_at FROM reel_hosts WHERE host_id = $1",
                &[&name],
            )
            .await?
            .map(|r| r.get(0)))
    };
    let deadline = std::time::Instant::now() + LIMIT;
    let mut last = read().await?;
    let mut seen = 0;
    while seen < times {
        let now = read().await?;
        if now != last {
            seen += 1;
            last = now;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{name} stopped renewing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_held_through_a_hand_back_does_not_hold_up_the_other_leases() -> anyhow::Result<()>
{
    let url = support::database("leave_grace_held_write").await;
    let h0 = support::hosts::joined(&url, "host-0")
        .await?
        .register(Waits)
        .build()
        .await?;
    let faults = FaultStore::new(support::join(&url, "host-1").await?);
    let h1 = Host::builder()
        .store(faults.clone())
        .register(Waits)
        .build()
        .await?;
    let owners = support::spread_leases(&url, "host-", 2, 100).await;
    // One run in host-1's highest partition (given back first when a host
    // joins), one in its lowest (kept).
    let mut held_parts = (0..owners.len()).filter(|p| owners[*p] == 1);
    let low = held_parts.next().expect("host-1 holds partitions");
    let top = held_parts.next_back().expect("host-1 holds two partitions");
    let in_part = |part: usize, prefix: &str| {
        (0..)
            .map(|i| format!("{prefix}-{i}"))
            .find(|id| partition_of(id) as usize == part)
            .expect("an id in the partition")
    };
    let (given, kept) = (in_part(top, "given"), in_part(low, "kept"));
    for id in [&given, &kept] {
        h1.start::<Waits>(id, ()).await?;
        support::hosts::until_status(&h1, id, "waited", support::hosts::suspended).await;
    }

    // The signal to `given` lands, its answer held: its actor is busy writing.
    let (hold, held) = Fault::hold(Op::Submit);
    faults.inject(hold.for_run(&given));
    let sent = tokio::spawn({
        let h1 = h1.clone();
        let given = given.clone();
        async move { h1.run(&given).signal("go", &5u32, "go").await }
    });
    within("the append to land", held.wait_arrived()).await?;

    // A third host joins: host-1 gives `given`'s partition back. Past a lease
    // of host-2's renewals later, host-1 still holds (and runs) `kept`.
    let h2 = support::hosts::joined(&url, "host-2")
        .await?
        .register(Waits)
        .build()
        .await?;
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    renewals(&client, "host-2", 6).await?;
    h1.run(&kept).signal("go", &6u32, "go").await?;
    let out = result_of::<Waits>(&h1, &kept).await?;
    let lapsed: i64 = client
        .query_one(
            "SELECT count(*) FROM reel_leases WHERE owner = 'host-1' AND expires_at < now()",
            &[],
        )
        .await?
        .get(0);
    held.release();
    within("the signal", sent).await??.ok();
    assert!(
        matches!(out, Ok(6)),
        "a run in a partition host-1 kept did not end while another run's write was held: \
         {out:?}; {lapsed} of host-1's leases lapsed"
    );
    // The held signal was recorded: `given` ends with it, on whichever host.
    assert_eq!(result_of::<Waits>(&h0, &given).await??, 5);
    within("host-1's shutdown", h1.shutdown()).await??;
    shutdown_all([h0, h2]).await
}
