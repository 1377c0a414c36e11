//! Signals racing the end of a run, its passivation and a cancel, from many tasks
//! at once: every signal acknowledged `Ok` is in the log before the run's end;
//! every refused one is `RunFinished` (or `UnknownRun` before the run exists) and
//! is not in the log; no call hangs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Event, Host, RunHandle, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// Consumes `limit` signals named `item` and returns them in the order taken.
struct Collector;

impl Workflow for Collector {
    const NAME: &'static str = "collector";
    type Input = u32;
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, limit: u32) -> reel::Result<Vec<String>> {
        let mut got = Vec::new();
        while got.len() < limit as usize {
            let v: String = ctx.wait_for_signal("item").await?;
            got.push(v);
        }
        Ok(got)
    }
}

fn is_end(e: &Event) -> bool {
    matches!(
        e,
        Event::RunCompleted { .. } | Event::RunFailed { .. } | Event::RunCancelled { .. }
    )
}

/// Position of each signal id in the log, and the position of the end.
fn signal_positions(events: &[Event]) -> (BTreeMap<String, Vec<usize>>, Option<usize>) {
    let mut at: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut end = None;
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::SignalReceived { signal_id, .. } => {
                at.entry(signal_id.clone()).or_default().push(i)
            }
            e if is_end(e) && end.is_none() => end = Some(i),
            _ => {}
        }
    }
    (at, end)
}

/// Checks the contract of one run after a race: acknowledged signals are in the
/// log once, before the end; refused ones are not in it.
fn check_signals(
    events: &[Event],
    acked: &BTreeSet<String>,
    refused: &BTreeSet<String>,
    what: &str,
) -> anyhow::Result<()> {
    let (at, end) = signal_positions(events);
    let end = end.ok_or_else(|| anyhow::anyhow!("{what}: the log has no end"))?;
    for id in acked {
        let pos = at.get(id).ok_or_else(|| {
            anyhow::anyhow!("{what}: signal {id} acknowledged but not in the log")
        })?;
        anyhow::ensure!(
            pos.len() == 1,
            "{what}: signal {id} recorded {} times",
            pos.len()
        );
        anyhow::ensure!(
            pos[0] < end,
            "{what}: signal {id} recorded after the run's end (at {}, end at {end})",
            pos[0]
        );
    }
    for id in refused {
        anyhow::ensure!(
            !at.contains_key(id),
            "{what}: signal {id} refused with RunFinished but recorded in the log"
        );
    }
    for (id, pos) in &at {
        anyhow::ensure!(pos.iter().all(|p| *p < end), "{what}: {id} after the end");
    }
    Ok(())
}

/// Sends `per` signals from each of `senders` tasks; returns (acked, refused).
async fn blast(
    run: &RunHandle<Collector>,
    senders: usize,
    per: usize,
    tag: &str,
) -> anyhow::Result<(BTreeSet<String>, BTreeSet<String>)> {
    let mut tasks = Vec::new();
    for s in 0..senders {
        let run = run.clone();
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for k in 0..per {
                let id = format!("{tag}-{s}-{k}");
                let r = run.signal("item", &id, &id).await;
                out.push((id, r));
            }
            out
        }));
    }
    let mut acked = BTreeSet::new();
    let mut refused = BTreeSet::new();
    for t in tasks {
        for (id, r) in within(LIMIT, "a sender", t).await?? {
            match r {
                Ok(()) => {
                    acked.insert(id);
                }
                Err(Error::RunFinished(_)) => {
                    refused.insert(id);
                }
                Err(e) => anyhow::bail!("signal {id}: unexpected error {e:?}"),
            }
        }
    }
    Ok((acked, refused))
}

async fn signals_racing_completion(passivate: Option<Duration>) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut b = Host::builder().path(dir.path()).register(Collector);
    if let Some(d) = passivate {
        b = b.passivate_after(d);
    }
    let host = b.build().await?;
    for iter in 0..20 {
        let run = host.start::<Collector>(&format!("c{iter}"), 25).await?;
        let (acked, refused) = blast(&run, 4, 15, &format!("i{iter}")).await?;
        let got = within(LIMIT, "the result", run.result()).await??;
        assert_eq!(got.len(), 25);
        let events = run.events().await?;
        check_signals(&events, &acked, &refused, &format!("iteration {iter}"))?;
        // What the handler took is the first 25 signals of the log, in log order.
        let in_log: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                Event::SignalReceived { signal_id, .. } => Some(signal_id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            got[..],
            in_log[..25],
            "iteration {iter}: consumed in log order"
        );
        // Each sender's signals were acknowledged in send order, so they are in
        // the log in that order too.
        for s in 0..4 {
            let prefix = format!("i{iter}-{s}-");
            let mine: Vec<usize> = in_log
                .iter()
                .filter(|id| id.starts_with(&prefix))
                .map(|id| id[prefix.len()..].parse().unwrap_or(usize::MAX))
                .collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "iteration {iter}: sender {s} out of order: {mine:?}"
            );
        }
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_racing_completion_are_recorded_or_refused() -> anyhow::Result<()> {
    signals_racing_completion(None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_racing_completion_and_passivation_are_recorded_or_refused() -> anyhow::Result<()> {
    signals_racing_completion(Some(Duration::ZERO)).await
}

/// A cancel races many signals to a run that passivates as soon as it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_racing_a_cancel_and_passivation() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Collector)
        .passivate_after(Duration::ZERO)
        .build()
        .await?;
    for iter in 0..20 {
        let run = host.start::<Collector>(&format!("k{iter}"), 1_000).await?;
        let canceller = {
            let run = run.clone();
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                run.cancel("stop").await
            })
        };
        let (acked, refused) = blast(&run, 3, 10, &format!("k{iter}")).await?;
        within(LIMIT, "the cancel", canceller).await???;
        let r = within(LIMIT, "the result", run.result()).await?;
        assert!(
            matches!(r, Err(Error::Cancelled(_))),
            "iteration {iter}: {r:?}"
        );
        assert!(matches!(run.status().await?, RunStatus::Cancelled));
        let events = run.events().await?;
        check_signals(&events, &acked, &refused, &format!("iteration {iter}"))?;
        // After the end every signal is refused.
        let late = run.signal("item", "late", "late").await;
        assert!(matches!(late, Err(Error::RunFinished(_))), "{late:?}");
    }
    host.shutdown().await?;
    Ok(())
}

/// Start, signal and cancel on the same ids from many tasks at once. Every call
/// gets a typed answer; the runs all end; acknowledged signals are recorded once
/// before the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_start_signal_and_cancel_on_the_same_ids() -> anyhow::Result<()> {
    const IDS: usize = 8;
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Collector)
        .passivate_after(Duration::from_millis(1))
        .build()
        .await?;
    for round in 0..5 {
        let mut tasks = Vec::new();
        for i in 0..IDS {
            let id = format!("b{round}-{i}");
            for k in 0..3 {
                let (host, id) = (host.clone(), id.clone());
                tasks.push(tokio::spawn(async move {
                    let r = host.start::<Collector>(&id, 3).await.map(|_| ());
                    (id, format!("start{k}"), r)
                }));
            }
            for k in 0..5 {
                let (host, id) = (host.clone(), id.clone());
                tasks.push(tokio::spawn(async move {
                    let sid = format!("{id}/s{k}");
                    let r = host
                        .handle::<Collector>(&id)
                        .signal("item", &sid, &sid)
                        .await;
                    (id, sid, r)
                }));
            }
            if i % 2 == 0 {
                let (host, id) = (host.clone(), id.clone());
                tasks.push(tokio::spawn(async move {
                    let r = host.handle::<Collector>(&id).cancel("burst").await;
                    (id, "cancel".to_owned(), r)
                }));
            }
        }
        let mut acked: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut refused: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut started = BTreeSet::new();
        for t in tasks {
            let (id, what, r) = within(LIMIT, "a task of the burst", t).await??;
            match (what.as_str(), r) {
                (w, Ok(())) if w.starts_with("start") => {
                    started.insert(id);
                }
                ("cancel", Ok(()) | Err(Error::UnknownRun(_) | Error::RunFinished(_))) => {}
                (sid, Ok(())) => {
                    acked.entry(id).or_default().insert(sid.to_owned());
                }
                (sid, Err(Error::RunFinished(_))) => {
                    refused.entry(id).or_default().insert(sid.to_owned());
                }
                (_, Err(Error::UnknownRun(_))) => {}
                (w, Err(e)) => anyhow::bail!("{id} {w}: unexpected {e:?}"),
            }
        }
        assert_eq!(started.len(), IDS, "every start succeeds");
        for i in 0..IDS {
            let id = format!("b{round}-{i}");
            let run = host.handle::<Collector>(&id);
            // Runs that took fewer than three signals and were not cancelled wait:
            // end them now.
            if !matches!(
                run.status().await?,
                RunStatus::Completed | RunStatus::Cancelled | RunStatus::Failed { .. }
            ) {
                match run.cancel("cleanup").await {
                    Ok(()) | Err(Error::RunFinished(_)) => {}
                    Err(e) => anyhow::bail!("{id}: cleanup cancel {e:?}"),
                }
            }
            let r = within(LIMIT, "the result", run.result()).await?;
            assert!(matches!(r, Ok(_) | Err(Error::Cancelled(_))), "{id}: {r:?}");
            let events = run.events().await?;
            check_signals(
                &events,
                acked.get(&id).unwrap_or(&BTreeSet::new()),
                refused.get(&id).unwrap_or(&BTreeSet::new()),
                &id,
            )?;
            let starts = events
                .iter()
                .filter(|e| matches!(e, Event::RunStarted { .. }))
                .count();
            assert_eq!(starts, 1, "{id}: one run per id");
        }
    }
    host.shutdown().await?;
    Ok(())
}
