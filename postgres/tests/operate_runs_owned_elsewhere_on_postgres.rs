//! Operating runs from a host that does not own them: pause, resume and cancel
//! sent from one host reach the owner (by its inbox) and take effect there; the
//! listing and the counts of any host see every run, wherever it runs.

mod support;

use std::time::{Duration, Instant};

use reel::{Ctx, Error, Host, RunFilter, RunStatus, StatusKind, Workflow};
use support::hosts::{owned_by, spread};

/// A step, a signal, a step; the steps name the host that ran them.
#[derive(Clone)]
struct Gate {
    host: String,
}

impl Gate {
    async fn step(&self, ctx: &Ctx, name: &str) -> reel::Result<String> {
        let host = self.host.clone();
        ctx.step(name, move |_| {
            let host = host.clone();
            async move { Ok::<_, String>(host) }
        })
        .await
    }
}

impl Workflow for Gate {
    const NAME: &'static str = "gate";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let before = self.step(&ctx, "before").await?;
        let go: String = ctx.wait_for_signal("go").await?;
        let after = self.step(&ctx, "after").await?;
        Ok(format!("{before}|{go}|{after}"))
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

/// Waits (half a minute at most) until `check` holds of the run's status as
/// `host` reads it.
async fn until_status(host: &Host, run_id: &str, check: impl Fn(&RunStatus) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = host.run(run_id).status().await.expect("status");
        if check(&status) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{run_id} never reached the status wanted; it is {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn waiting(status: &RunStatus) -> bool {
    matches!(status, RunStatus::Suspended { waiting_on } if waiting_on.contains("go"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_runs_owned_elsewhere_on_postgres() -> anyhow::Result<()> {
    let url = support::database("operate_elsewhere").await;
    let (hosts, owners) = spread::<2>(&url, 128, host).await?;
    // Runs owned by host-1, operated from host-0 (which also starts them).
    let ids = owned_by(&owners, 1, "gate", 3);
    let (here, owner) = (&hosts[0], &hosts[1]);
    for id in &ids {
        here.start::<Gate>(id, ()).await?;
    }
    for id in &ids {
        until_status(here, id, waiting).await;
    }
    let [paused, cancelled, plain] = [&ids[0], &ids[1], &ids[2]];

    // Pause from host-0: the owner records it; a signal sent meanwhile is recorded
    // but moves nothing; resume from host-0 and the run goes on, on its owner.
    here.run(paused).pause().await?;
    until_status(here, paused, |s| matches!(s, RunStatus::Paused)).await;
    here.handle::<Gate>(paused)
        .signal("go", "p", "go-p")
        .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !here
        .handle::<Gate>(paused)
        .events()
        .await?
        .iter()
        .any(|e| matches!(e, reel::Event::SignalReceived { .. }))
    {
        assert!(Instant::now() < deadline, "the signal was never recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(here.run(paused).status().await?, RunStatus::Paused);
    here.run(paused).resume().await?;
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        here.handle::<Gate>(paused).result(),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the resumed run did not complete"))??;
    assert_eq!(out, "host-1|p|host-1", "run on its owner");

    // Cancel from host-0: the owner ends the run cancelled.
    here.handle::<Gate>(cancelled)
        .cancel("no longer wanted")
        .await?;
    let ended = tokio::time::timeout(
        Duration::from_secs(30),
        here.handle::<Gate>(cancelled).result(),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the cancelled run did not end"))?;
    assert!(matches!(ended, Err(Error::Cancelled(_))), "{ended:?}");

    // The listing and the counts of either host see the runs of the other.
    for h in [here, owner] {
        let page = h
            .list(RunFilter::default().workflow("gate").limit(10))
            .await?;
        let mut listed: Vec<(String, RunStatus)> = page
            .items
            .into_iter()
            .map(|i| (i.run_id, i.status))
            .collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(listed.len(), 3, "{listed:?}");
        for (id, status) in &listed {
            match id {
                id if id == paused => assert_eq!(*status, RunStatus::Completed),
                id if id == cancelled => assert_eq!(*status, RunStatus::Cancelled),
                _ => assert!(waiting(status), "{id}: {status:?}"),
            }
        }
        let counts = h.count().await?;
        assert_eq!(counts[&StatusKind::Completed], 1, "{counts:?}");
        assert_eq!(counts[&StatusKind::Cancelled], 1, "{counts:?}");
        assert_eq!(counts[&StatusKind::Suspended], 1, "{counts:?}");
    }
    assert!(waiting(&owner.run(plain).status().await?));
    for h in hosts {
        h.shutdown().await?;
    }
    Ok(())
}
