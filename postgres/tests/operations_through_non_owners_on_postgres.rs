//! Operations through a host that does not own the run: terminate, fork, delete,
//! and listing/count agreement across three hosts.

mod support;

use reel::{Ctx, Error, Event, Host, RunFilter, RunStatus, StatusKind, Workflow};
use reel_postgres::partition_of;
use support::hosts::{cancelled, owned_by, result_of, shutdown_all, spread, until_status};

/// A step naming its host, a signal, a step naming its host.
#[derive(Clone)]
struct Gate {
    host: String,
}

impl Workflow for Gate {
    const NAME: &'static str = "gate";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        let h = self.host.clone();
        let before = ctx
            .step("before", move |_| {
                let h = h.clone();
                async move { Ok::<_, String>(h) }
            })
            .await?;
        let go: String = ctx.wait_for_signal("go").await?;
        let h = self.host.clone();
        let after = ctx
            .step("after", move |_| {
                let h = h.clone();
                async move { Ok::<_, String>(h) }
            })
            .await?;
        Ok(format!("{n}|{before}|{go}|{after}"))
    }
}

async fn host(url: &str, name: &str) -> anyhow::Result<Host> {
    Ok(support::hosts::joined(url, name)
        .await?
        .register(Gate {
            host: name.to_owned(),
        })
        .build()
        .await?)
}

fn waiting(status: &RunStatus) -> bool {
    matches!(status, RunStatus::Suspended { waiting_on } if waiting_on.contains("go"))
}

/// Terminate through a non-owner ends a waiting run cancelled, seen so by
/// every host, and nothing after the terminate runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_through_a_non_owner() -> anyhow::Result<()> {
    let url = support::database("hunt_e_terminate").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let ids = owned_by(&owners, 1, "term", 2);
    for id in &ids {
        hosts[0].start::<Gate>(id, 1).await?;
    }
    for id in &ids {
        until_status(&hosts[0], id, "waited", waiting).await;
    }
    hosts[0].run(&ids[0]).terminate("stop now").await?;
    let ended = result_of::<Gate>(&hosts[0], &ids[0]).await?;
    assert!(matches!(ended, Err(Error::Cancelled(_))), "{ended:?}");
    for h in &hosts {
        until_status(h, &ids[0], "was cancelled", cancelled).await;
    }
    // A signal now is refused (the run is finished) from either host.
    let late = hosts[0]
        .handle::<Gate>(&ids[0])
        .signal("go", "x", "late")
        .await;
    assert!(late.is_err(), "signal to a terminated run: {late:?}");
    let events = hosts[1].run(&ids[0]).events().await?;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::StepStarted { id, .. } if id == "after")),
        "{events:?}"
    );
    // The other run is untouched and still completes.
    hosts[0]
        .handle::<Gate>(&ids[1])
        .signal("go", "ok", "go-1")
        .await?;
    assert_eq!(
        result_of::<Gate>(&hosts[0], &ids[1]).await??,
        "1|host-1|ok|host-1"
    );
    shutdown_all(hosts).await
}

/// A waiting run owned by host-1 is terminated through host-0 (`request_cancel`
/// then `cancel`, both through the non-owner): the run ends cancelled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_twice_through_two_non_owners() -> anyhow::Result<()> {
    let url = support::database("hunt_e_cancel2").await;
    let (hosts, owners) = spread::<3>(&url, 80, host).await?;
    let id = &owned_by(&owners, 2, "c2", 1)[0];
    hosts[0].start::<Gate>(id, 1).await?;
    until_status(&hosts[1], id, "waited", waiting).await;
    let (r0, r1) = (hosts[0].run(id), hosts[1].run(id));
    let (a, b) = tokio::join!(r0.cancel("from 0"), r1.cancel("from 1"));
    a?;
    b?;
    let ended = result_of::<Gate>(&hosts[1], id).await?;
    assert!(matches!(ended, Err(Error::Cancelled(_))), "{ended:?}");
    let events = hosts[0].run(id).events().await?;
    let cancelled = events
        .iter()
        .filter(|e| matches!(e, Event::RunCancelled { .. }))
        .count();
    assert_eq!(cancelled, 1, "{events:?}");
    shutdown_all(hosts).await
}

/// Fork of a run owned by host-1, made through host-0: the fork re-runs from the
/// cut, its steps run on the owner of the fork's partition, and the original is
/// untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_through_a_non_owner() -> anyhow::Result<()> {
    let url = support::database("hunt_e_fork").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let orig = &owned_by(&owners, 1, "orig", 1)[0];
    // One fork lands on host-1's partitions, one on host-0's.
    let fork_1 = &owned_by(&owners, 1, "fork", 1)[0];
    let fork_0 = &owned_by(&owners, 0, "fork", 1)[0];
    hosts[0].start::<Gate>(orig, 7).await?;
    until_status(&hosts[0], orig, "waited", waiting).await;
    hosts[0]
        .handle::<Gate>(orig)
        .signal("go", "a", "go-a")
        .await?;
    assert_eq!(
        result_of::<Gate>(&hosts[0], orig).await??,
        "7|host-1|a|host-1"
    );
    // Cut just before the signal wait's delivery: the fork waits for its own signal.
    let records = hosts[0].run(orig).records().await?;
    let cut = records
        .iter()
        .find(|r| matches!(r.event, Event::SignalReceived { .. }))
        .map(|r| r.seq)
        .ok_or_else(|| anyhow::anyhow!("no SignalReceived: {records:?}"))?;
    for (f, via) in [(fork_1, 0usize), (fork_0, 1usize)] {
        let forked = hosts[via].fork(orig, cut, f).await?;
        until_status(&hosts[1 - via], f, "waited", waiting).await;
        forked.signal("go", "b", &format!("go-{f}")).await?;
        let out = result_of::<Gate>(&hosts[1 - via], f).await??;
        let owner = owners[partition_of(f) as usize];
        assert_eq!(
            out,
            format!("7|host-1|b|host-{owner}"),
            "fork {f} via host-{via}"
        );
    }
    // The original is untouched.
    assert_eq!(hosts[1].run(orig).records().await?.len(), records.len());
    assert_eq!(
        result_of::<Gate>(&hosts[1], orig).await??,
        "7|host-1|a|host-1"
    );
    shutdown_all(hosts).await
}

/// Delete through a non-owner: a running run is refused; a finished one is gone
/// on every host; its id can be started again (through the non-owner) and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_through_a_non_owner_then_reuse_the_id() -> anyhow::Result<()> {
    let url = support::database("hunt_e_delete").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    let id = &owned_by(&owners, 1, "del", 1)[0];
    hosts[0].start::<Gate>(id, 1).await?;
    until_status(&hosts[0], id, "waited", waiting).await;
    let refused = hosts[0].run(id).delete().await;
    assert!(
        matches!(refused, Err(Error::InvalidState { .. })),
        "delete of a waiting run: {refused:?}"
    );
    hosts[0]
        .handle::<Gate>(id)
        .signal("go", "a", "go-a")
        .await?;
    assert_eq!(
        result_of::<Gate>(&hosts[0], id).await??,
        "1|host-1|a|host-1"
    );
    hosts[0].run(id).delete().await?;
    for h in &hosts {
        let s = h.run(id).status().await;
        assert!(matches!(s, Err(Error::UnknownRun(_))), "{s:?}");
        let counts = h.count().await?;
        assert_eq!(counts.values().sum::<u64>(), 0, "{counts:?}");
    }
    // The id again, with another input, through the non-owner.
    hosts[0].start::<Gate>(id, 2).await?;
    until_status(&hosts[1], id, "waited", waiting).await;
    // The old signal id is not remembered by the new run.
    hosts[0]
        .handle::<Gate>(id)
        .signal("go", "b", "go-a")
        .await?;
    assert_eq!(
        result_of::<Gate>(&hosts[1], id).await??,
        "2|host-1|b|host-1"
    );
    shutdown_all(hosts).await
}

/// Runs in every state, spread over three hosts' partitions: every host's
/// listing (paged) and counts agree with each other and with the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_and_counts_agree_on_every_host() -> anyhow::Result<()> {
    let url = support::database("hunt_e_listing").await;
    let hosts = [
        host(&url, "host-0").await?,
        host(&url, "host-1").await?,
        host(&url, "host-2").await?,
    ];
    support::spread_leases(&url, "host-", 3, 80).await;
    let ids: Vec<String> = (0..18).map(|i| format!("ls-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        hosts[i % 3].start::<Gate>(id, i as u32).await?;
    }
    for id in &ids {
        until_status(&hosts[1], id, "waited", waiting).await;
    }
    // 6 completed, 4 cancelled, 3 paused, 5 waiting; each through another host.
    for (i, id) in ids.iter().enumerate() {
        let via = &hosts[(i + 1) % 3];
        match i {
            0..6 => via.handle::<Gate>(id).signal("go", "x", "g").await?,
            6..10 => via.run(id).cancel("bye").await?,
            10..13 => via.run(id).pause().await?,
            _ => {}
        }
    }
    for (i, id) in ids.iter().enumerate() {
        let want = match i {
            0..6 => StatusKind::Completed,
            6..10 => StatusKind::Cancelled,
            10..13 => StatusKind::Paused,
            _ => StatusKind::Suspended,
        };
        until_status(&hosts[2], id, "reached the status wanted", |s| {
            s.kind() == want
        })
        .await;
    }
    let mut expected = std::collections::BTreeMap::new();
    expected.insert(StatusKind::Completed, 6u64);
    expected.insert(StatusKind::Cancelled, 4);
    expected.insert(StatusKind::Paused, 3);
    expected.insert(StatusKind::Suspended, 5);
    for (n, h) in hosts.iter().enumerate() {
        let counts: std::collections::BTreeMap<StatusKind, u64> = h
            .count()
            .await?
            .into_iter()
            .filter(|(_, v)| *v > 0)
            .collect();
        assert_eq!(counts, expected, "counts on host-{n}");
        // Paged by 4.
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = h
                .list(RunFilter::default().limit(4).after(after.take()))
                .await?;
            seen.extend(page.items.into_iter().map(|i| (i.run_id, i.status.kind())));
            match page.next {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), seen.len(), "duplicates on host-{n}: {seen:?}");
        assert_eq!(seen.len(), 18, "host-{n}: {seen:?}");
        let paused: Vec<_> = h
            .list(RunFilter::default().status([StatusKind::Paused]).limit(50))
            .await?
            .items
            .into_iter()
            .map(|i| i.run_id)
            .collect();
        assert_eq!(paused.len(), 3, "host-{n}: {paused:?}");
    }
    shutdown_all(hosts).await
}
