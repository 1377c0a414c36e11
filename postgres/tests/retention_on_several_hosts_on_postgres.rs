//! Retention passes of several hosts sharing one database, at once: every due run
//! is deleted exactly once (the passes' counts add up to the due runs, no pass
//! fails when another host deleted a run under it), and nothing else goes: not a
//! run that is unfinished, failed (kept by the policy) or not yet due, nor a run
//! that took the id of a due run right after its deletion on another host. The
//! counts and the listing agree with what is left. Also two hosts deleting one run
//! at once: one wins, the other is told the run is gone (`UnknownRun`), as on one
//! host (`tests/concurrent_deletes_of_one_run.rs`). And the background passes of
//! two hosts together leave exactly what the policy keeps.

mod support;

use std::time::{Duration, SystemTime};

use reel::testing::TestClock;
use reel::{Ctx, Error, Host, Retention, RunFilter, StatusKind, Workflow};
use support::hosts::{result_of, shutdown_all, spread, suspended, until_status};

const HOUR: Duration = Duration::from_secs(3600);

/// Ends at once: completes with its input, or fails when it is 0.
struct Quick;
impl Workflow for Quick {
    const NAME: &'static str = "quick";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        if n == 0 {
            return Err(reel::Error::failed("asked to fail"));
        }
        Ok(n)
    }
}

/// Waits for `go` and returns it.
struct Waits;
impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal("go").await
    }
}

fn clock() -> TestClock {
    TestClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
}

/// A host whose policy deletes completed and cancelled runs an hour after they
/// ended (failures are kept); its background pass is a day away: the tests run
/// passes themselves.
async fn open(url: &str, name: &str, clock: &TestClock) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .clock(clock.clone())
        .register(Quick)
        .register(Waits)
        .retention(
            Retention::keep_all()
                .completed_after(HOUR)
                .cancelled_after(HOUR)
                .every(24 * HOUR)
                .per_pass(4),
        )
        .build()
        .await?)
}

/// As [`open`], with the background pass every 50 ms.
async fn open_passing(url: &str, name: &str, clock: &TestClock) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .clock(clock.clone())
        .register(Quick)
        .register(Waits)
        .retention(
            Retention::keep_all()
                .completed_after(HOUR)
                .every(Duration::from_millis(50))
                .per_pass(3),
        )
        .build()
        .await?)
}

/// Runs passes on `host` until one deletes nothing; returns the sum.
async fn passes_until_none(host: &Host) -> reel::Result<usize> {
    let mut total = 0;
    loop {
        match host.enforce_retention().await? {
            0 => return Ok(total),
            n => total += n,
        }
    }
}

fn unknown(r: &reel::Result<reel::RunStatus>) -> bool {
    matches!(r, Err(Error::UnknownRun(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_of_three_hosts_at_once_delete_each_due_run_once() -> anyhow::Result<()> {
    let url = support::database("retention_three").await;
    let clock = clock();
    let (hosts, _) =
        spread::<3>(&url, 60, async |u: &str, n: &str| open(u, n, &clock).await).await?;

    // Due an hour from now: 30 completed, 3 cancelled. Kept: 3 failed, 3 waiting.
    let old: Vec<String> = (0..30).map(|i| format!("old-{i}")).collect();
    for (i, id) in old.iter().enumerate() {
        let h = &hosts[i % 3];
        h.start::<Quick>(id, i as u32 + 1).await?;
        assert_eq!(result_of::<Quick>(h, id).await??, i as u32 + 1);
    }
    for (i, h) in hosts.iter().enumerate() {
        let id = format!("failed-{i}");
        h.start::<Quick>(&id, 0).await?;
        assert!(result_of::<Quick>(h, &id).await?.is_err());
    }
    let mut cancelled = Vec::new();
    let mut waiting = Vec::new();
    for (i, h) in hosts.iter().enumerate() {
        let (c, w) = (format!("cancelled-{i}"), format!("waiting-{i}"));
        h.start::<Waits>(&c, ()).await?;
        h.start::<Waits>(&w, ()).await?;
        until_status(h, &c, "waited", suspended).await;
        until_status(h, &w, "waited", suspended).await;
        hosts[(i + 1) % 3].run(&c).cancel("not needed").await?;
        cancelled.push(c);
        waiting.push(w);
    }
    for id in &cancelled {
        until_status(&hosts[0], id, "was cancelled", support::hosts::cancelled).await;
    }
    clock.advance(2 * HOUR);
    // Ended just now: not due.
    let young: Vec<String> = (0..6).map(|i| format!("young-{i}")).collect();
    for (i, id) in young.iter().enumerate() {
        hosts[i % 3].start::<Quick>(id, 100).await?;
        result_of::<Quick>(&hosts[i % 3], id).await??;
    }

    let [a, b, c] = &hosts;
    let (x, y, z) = tokio::join!(
        passes_until_none(a),
        passes_until_none(b),
        passes_until_none(c)
    );
    let (x, y, z) = (x?, y?, z?);
    let due = old.len() + cancelled.len();
    assert_eq!(
        x + y + z,
        due,
        "the hosts' passes said they deleted {x} + {y} + {z} runs; {due} were due"
    );

    for id in old.iter().chain(&cancelled) {
        for h in &hosts {
            let s = h.run(id).status().await;
            assert!(unknown(&s), "due run {id} is still there: {s:?}");
        }
    }
    for id in young.iter().chain(
        (0..3)
            .map(|i| format!("failed-{i}"))
            .collect::<Vec<_>>()
            .iter(),
    ) {
        let s = a.run(id).status().await;
        assert!(s.is_ok(), "{id}, not due, was deleted: {s:?}");
    }
    let counts = b.count().await?;
    assert_eq!(counts.get(&StatusKind::Completed), Some(&6), "{counts:?}");
    assert_eq!(counts.get(&StatusKind::Failed), Some(&3), "{counts:?}");
    assert_eq!(
        counts.get(&StatusKind::Cancelled).copied().unwrap_or(0),
        0,
        "{counts:?}"
    );
    assert_eq!(counts.get(&StatusKind::Suspended), Some(&3), "{counts:?}");
    let listed = c
        .list(RunFilter {
            status: Some(vec![StatusKind::Completed]),
            limit: 100,
            ..RunFilter::default()
        })
        .await?;
    let mut ids: Vec<String> = listed.items.into_iter().map(|r| r.run_id).collect();
    ids.sort();
    assert_eq!(ids, young);

    // The unfinished runs were not touched: they still end as asked.
    for (i, id) in waiting.iter().enumerate() {
        hosts[(i + 2) % 3].run(id).signal("go", &7u32, "go").await?;
        assert_eq!(result_of::<Waits>(&hosts[i], id).await??, 7);
    }
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_survives_the_other_hosts_pass() -> anyhow::Result<()> {
    let url = support::database("retention_reuse").await;
    let clock = clock();
    let (hosts, _) =
        spread::<2>(&url, 100, async |u: &str, n: &str| open(u, n, &clock).await).await?;
    const ROUNDS: u32 = 12;
    let ids: Vec<String> = (0..ROUNDS).map(|i| format!("r-{i}")).collect();
    for id in &ids {
        hosts[0].start::<Quick>(id, 1).await?;
        result_of::<Quick>(&hosts[0], id).await??;
    }
    clock.advance(2 * HOUR);

    // Host 0 passes while host 1 deletes each due run itself and starts it again
    // at once: half of them end at once (a finished run, not due), half wait.
    let [zero, one] = &hosts;
    let reuse = async {
        for (i, id) in ids.iter().enumerate() {
            match one.run(id).delete().await {
                Ok(()) | Err(Error::UnknownRun(_)) => {}
                Err(e) => return Err(e),
            }
            if i % 2 == 0 {
                one.start::<Quick>(id, 50 + i as u32).await?;
            } else {
                one.start::<Waits>(id, ()).await?;
            }
        }
        Ok(())
    };
    let (passed, reused) = tokio::join!(passes_until_none(zero), reuse);
    passed?;
    reused?;
    // And once more, after everything settled.
    assert_eq!(passes_until_none(one).await?, 0);
    for (i, id) in ids.iter().enumerate() {
        if i % 2 == 0 {
            let out = result_of::<Quick>(zero, id).await?;
            assert!(
                matches!(out, Ok(n) if n == 50 + i as u32),
                "{id}, started again after its delete, is {out:?}"
            );
        } else {
            until_status(zero, id, "waited again", suspended).await;
            one.run(id).signal("go", &(i as u32), "go").await?;
            assert_eq!(result_of::<Waits>(zero, id).await??, i as u32);
        }
    }
    shutdown_all(hosts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_deleting_one_run_at_once_one_is_told_it_is_gone() -> anyhow::Result<()> {
    let url = support::database("delete_twice").await;
    let clock = clock();
    let (hosts, _) =
        spread::<2>(&url, 100, async |u: &str, n: &str| open(u, n, &clock).await).await?;
    const ROUNDS: u32 = 30;
    let mut both_won = Vec::new();
    for round in 0..ROUNDS {
        let id = format!("d-{round}");
        hosts[0].start::<Quick>(&id, round + 1).await?;
        result_of::<Quick>(&hosts[0], &id).await??;
        let (one, two) = (hosts[0].run(&id), hosts[1].run(&id));
        let (x, y) = tokio::join!(one.delete(), two.delete());
        for r in [&x, &y] {
            assert!(
                matches!(r, Ok(()) | Err(Error::UnknownRun(_))),
                "round {round}: a delete answered {r:?}"
            );
        }
        assert!(x.is_ok() || y.is_ok(), "round {round}: neither delete won");
        if x.is_ok() && y.is_ok() {
            both_won.push(round);
        }
    }
    let counts = hosts[1].count().await?;
    assert_eq!(
        counts.get(&StatusKind::Completed).copied().unwrap_or(0),
        0,
        "{counts:?}"
    );
    shutdown_all(hosts).await?;
    assert!(
        both_won.is_empty(),
        "both deletes of one run said they deleted it in rounds {both_won:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_passes_of_two_hosts_leave_what_is_kept() -> anyhow::Result<()> {
    let url = support::database("retention_background").await;
    let clock = clock();
    let (hosts, _) = spread::<2>(&url, 100, async |u: &str, n: &str| {
        open_passing(u, n, &clock).await
    })
    .await?;
    for i in 0..20u32 {
        let h = &hosts[i as usize % 2];
        let id = format!("old-{i}");
        h.start::<Quick>(&id, i + 1).await?;
        result_of::<Quick>(h, &id).await??;
    }
    hosts[0].start::<Waits>("waiting", ()).await?;
    until_status(&hosts[0], "waiting", "waited", suspended).await;
    clock.advance(2 * HOUR);
    // Ended now: not due. One of them takes the id of a due run the host
    // deletes itself, racing the passes.
    for i in 0..4u32 {
        let id = format!("young-{i}");
        hosts[1].start::<Quick>(&id, 100 + i).await?;
        result_of::<Quick>(&hosts[1], &id).await??;
    }
    match hosts[1].run("old-0").delete().await {
        Ok(()) | Err(Error::UnknownRun(_)) => {}
        Err(e) => return Err(e.into()),
    }
    hosts[1].start::<Quick>("old-0", 7).await?;
    assert_eq!(result_of::<Quick>(&hosts[1], "old-0").await??, 7);

    // The background passes delete the 19 other due runs.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let counts = hosts[0].count().await?;
        if counts.get(&StatusKind::Completed) == Some(&5) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the background passes never deleted the due runs: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 1..20 {
        let s = hosts[1].run(&format!("old-{i}")).status().await;
        assert!(unknown(&s), "due run old-{i} is still there: {s:?}");
    }
    for i in 0..4u32 {
        let id = format!("young-{i}");
        assert_eq!(result_of::<Quick>(&hosts[0], &id).await??, 100 + i);
    }
    assert_eq!(result_of::<Quick>(&hosts[0], "old-0").await??, 7);
    hosts[1].run("waiting").signal("go", &9u32, "go").await?;
    assert_eq!(result_of::<Waits>(&hosts[0], "waiting").await??, 9);
    shutdown_all(hosts).await
}
