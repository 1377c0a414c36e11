//! Running cases: two hosts per batch (one left alone, one shut down and reopened
//! mid-way), the deliveries of each case's schedule, and waiting for every run to
//! end before checking it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reel::{Event, Host, RunHandle, RunStatus};
use tokio::sync::watch;

use super::checks::{Ending, Failure, check_run, fail, show_log};
use super::generate::{Case, Delivery, Sent};
use super::interp::{Interp, executions_of, last_trace};
use super::program::{child_runs, root_path};
use super::{lock, ms, stats};

/// Makes every run id of this process unique (shrinking reruns programs).
static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

type Handles = Arc<BTreeMap<String, RunHandle<Interp>>>;
type DeliveryErrors = Arc<Mutex<Vec<(String, String)>>>;

/// `Host::shutdown`, bounded: a shutdown that hangs is a failure of its own.
async fn bounded_shutdown(host: Host, when: &str) -> anyhow::Result<()> {
    match tokio::time::timeout(Duration::from_secs(30), host.shutdown()).await {
        Ok(r) => Ok(r?),
        Err(_) => anyhow::bail!("Host::shutdown hung for 30 s ({when})"),
    }
}

async fn open(dir: &std::path::Path) -> anyhow::Result<Host> {
    Ok(Host::builder()
        .path(dir)
        .register(Interp::default())
        .build()
        .await?)
}

fn handles(host: &Host, ids: &[String]) -> Handles {
    Arc::new(
        ids.iter()
            .map(|id| (id.clone(), host.handle::<Interp>(id)))
            .collect(),
    )
}

/// Sends one delivery after its delay, through whichever host is open: a send that
/// fails (host shutting down) is retried on the next host. The signal id is fixed,
/// so a retried signal is delivered once; a second cancel request does nothing.
async fn deliver(
    mut hosts: watch::Receiver<Option<Handles>>,
    run_id: String,
    d: Delivery,
    errors: DeliveryErrors,
) {
    tokio::time::sleep(ms(d.delay_ms)).await;
    loop {
        let handle = hosts
            .borrow_and_update()
            .as_ref()
            .and_then(|h| h.get(&run_id).cloned());
        if let Some(h) = handle {
            let sent = match d.sent {
                Sent::Approval => {
                    h.approve(&d.name, d.k % 2 == 1, Some(format!("{}-{}", d.name, d.k)))
                        .await
                }
                Sent::Signal => {
                    let payload = 100 * d.k + u32::from(d.delay_ms);
                    h.signal(&d.name, &payload, &format!("{}-{}", d.name, d.k))
                        .await
                }
                Sent::Cancel => h.request_cancel(&d.name).await,
            };
            match sent {
                Ok(()) | Err(reel::Error::RunFinished(_)) => return,
                Err(e) => lock(&errors).push((run_id.clone(), format!("{d:?}: {e}"))),
            }
        }
        if hosts.changed().await.is_err() {
            return;
        }
    }
}

/// How a run ended; a failure if it failed or did not end in time.
async fn settle(host: &Host, run_id: &str, hang: Duration) -> Result<Ending, Failure> {
    let h = host.handle::<Interp>(run_id);
    let log = || async { h.events().await.map(|e| show_log(&e)).unwrap_or_default() };
    let (ending, expected) = match tokio::time::timeout(hang, h.result()).await {
        Ok(Ok(out)) => (Ending::Completed(out), RunStatus::Completed),
        Ok(Err(reel::Error::Cancelled(reason))) => {
            (Ending::Cancelled(reason), RunStatus::Cancelled)
        }
        Ok(Err(e)) => {
            return Err(fail(
                "run-failed",
                format!("run {run_id}: {e}\n  log: {}", log().await),
            ));
        }
        Err(_) => {
            let status = h.status().await;
            return Err(fail(
                "hang",
                format!(
                    "run {run_id} not finished after {hang:?}: {status:?}\n  log: {}",
                    log().await
                ),
            ));
        }
    };
    match h.status().await {
        Ok(s) if s == expected => Ok(ending),
        other => Err(fail(
            "status-differs",
            format!("run {run_id} ended {ending:?} but its status is {other:?}"),
        )),
    }
}

/// Checks how a run ended against what its case allows: cancelled only if the case
/// cancels it (a child: if its parent is, or if its parent continued as new,
/// completed or failed while it ran: the parent-close policy cancels it), never
/// when its program completes on a cancel.
fn allowed(run_id: &str, ending: &Ending, cancelled: bool, completes: bool) -> Result<(), Failure> {
    let parent_closed = |reason: &str| {
        [
            "parent continued as new",
            "parent completed",
            "parent failed",
        ]
        .iter()
        .any(|r| reason.ends_with(r))
    };
    match ending {
        Ending::Cancelled(reason) if !cancelled && !parent_closed(reason) => Err(fail(
            "run-cancelled",
            format!("run {run_id} was cancelled ({reason}), but nothing cancelled it"),
        )),
        Ending::Cancelled(reason) if completes => Err(fail(
            "cancelled-despite-value",
            format!("run {run_id} ended cancelled ({reason}) though its handler returns a value"),
        )),
        _ => Ok(()),
    }
}

/// Counts the ending and the reactions to a cancel for the coverage figures.
fn tally(run_id: &str, ending: &Ending, events: &[Event]) {
    let requested = events
        .iter()
        .any(|e| matches!(e, Event::CancelRequested { .. }));
    let trace = match ending {
        Ending::Cancelled(_) => {
            stats::ENDED_CANCELLED.fetch_add(1, Ordering::Relaxed);
            last_trace(&executions_of(run_id)).unwrap_or_default()
        }
        Ending::Completed(out) => {
            if requested {
                stats::COMPLETED_AFTER_CANCEL.fetch_add(1, Ordering::Relaxed);
            }
            out.clone()
        }
    };
    for e in events {
        if let Event::ContinuedAsNew { carried } = e {
            stats::CONTINUED.fetch_add(1, Ordering::Relaxed);
            stats::CARRIED.fetch_add(u64::from(*carried), Ordering::Relaxed);
            if *carried > 0 {
                stats::CARRIED_SOME.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let mut reactions = lock(&stats::REACTIONS);
    for (name, mark) in stats::MARKS {
        if trace.iter().any(|l| l.contains(mark)) {
            *reactions.entry(name).or_default() += 1;
        }
    }
}

/// Waits for a run (and the child runs it started) to finish and checks them.
async fn finish_and_check(
    host: &Host,
    run_id: &str,
    case: &Case,
    hang: Duration,
) -> Result<(), Failure> {
    let cancelled = case.cancel_at.is_some();
    let mut runs = vec![(run_id.to_owned(), case.complete_on_cancel)];
    for k in 0..=case.segments {
        child_runs(&case.program, run_id, &root_path(k), &mut runs);
    }
    for (i, (run, completes)) in runs.iter().enumerate() {
        let h = host.handle::<Interp>(run);
        if i > 0 && matches!(h.status().await, Err(reel::Error::UnknownRun(_))) {
            continue; // never started: its node was in a branch dropped before it ran
        }
        let ending = settle(host, run, hang).await?;
        allowed(run, &ending, cancelled, *completes)?;
        let events = h
            .events()
            .await
            .map_err(|e| fail("events", format!("run {run}: {e}")))?;
        tally(run, &ending, &events);
        check_run(run, &ending, &events).await?;
    }
    Ok(())
}

/// Runs each case twice, concurrently with the others: once on a host left alone
/// (live) and once on a host shut down and reopened after the delays of the first
/// case's `restart_delays`. Both copies get the same schedule. Returns one verdict
/// per case.
pub(crate) async fn run_batch(
    cases: &[Case],
    hang: Duration,
) -> anyhow::Result<Vec<Result<(), Failure>>> {
    let live_dir = tempfile::tempdir()?;
    let restart_dir = tempfile::tempdir()?;
    let live_host = open(live_dir.path()).await?;
    let mut restart_host = open(restart_dir.path()).await?;
    let errors = DeliveryErrors::default();

    let mut live_ids = Vec::new();
    let mut restart_ids = Vec::new();
    for c in cases {
        let n = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        let (l, r) = (format!("p{n}-live"), format!("p{n}-restart"));
        live_host.start::<Interp>(&l, c.input(&l)).await?;
        restart_host.start::<Interp>(&r, c.input(&r)).await?;
        live_ids.push(l);
        restart_ids.push(r);
    }
    let (_live_tx, live_rx) = watch::channel(Some(handles(&live_host, &live_ids)));
    let (restart_tx, restart_rx) = watch::channel(Some(handles(&restart_host, &restart_ids)));
    let mut senders = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        for d in c.deliveries() {
            senders.push(tokio::spawn(deliver(
                live_rx.clone(),
                live_ids[i].clone(),
                d.clone(),
                errors.clone(),
            )));
            senders.push(tokio::spawn(deliver(
                restart_rx.clone(),
                restart_ids[i].clone(),
                d,
                errors.clone(),
            )));
        }
    }

    let live = futures::future::join_all(
        cases
            .iter()
            .zip(&live_ids)
            .map(|(c, id)| finish_and_check(&live_host, id, c, hang)),
    );
    let restarted = async {
        let delays = cases
            .first()
            .map(|c| c.restart_delays.clone())
            .unwrap_or_default();
        for d in delays {
            tokio::time::sleep(ms(d)).await;
            let unfinished = restart_host
                .runs()
                .await?
                .iter()
                .filter(|r| {
                    !matches!(
                        r.status,
                        RunStatus::Completed | RunStatus::Failed { .. } | RunStatus::Cancelled
                    )
                })
                .count();
            stats::RESTARTS.fetch_add(1, Ordering::Relaxed);
            stats::RUNS_CUT.fetch_add(unfinished as u64, Ordering::Relaxed);
            restart_tx.send_replace(None);
            bounded_shutdown(restart_host, "mid-run restart").await?;
            restart_host = open(restart_dir.path()).await?;
            restart_tx.send_replace(Some(handles(&restart_host, &restart_ids)));
        }
        let verdicts = futures::future::join_all(
            cases
                .iter()
                .zip(&restart_ids)
                .map(|(c, id)| finish_and_check(&restart_host, id, c, hang)),
        )
        .await;
        anyhow::Ok((verdicts, restart_host))
    };
    let (live, restarted) = tokio::join!(live, restarted);
    let (restarted, restart_host) = restarted?;
    for s in &senders {
        s.abort();
    }
    bounded_shutdown(live_host, "end of batch (live host)").await?;
    bounded_shutdown(restart_host, "end of batch (restarted host)").await?;

    let errors = lock(&errors).clone();
    let with_deliveries = |mut f: Failure, host: &str, run: &str| {
        f.detail = format!("({host} host) {}", f.detail);
        let failed = errors
            .iter()
            .filter(|(r, _)| r == run)
            .map(|(_, e)| e.as_str())
            .collect::<Vec<_>>();
        if f.kind == "hang" && !failed.is_empty() {
            f.detail = format!("{}\n  failed deliveries (retried): {failed:?}", f.detail);
        }
        f
    };
    Ok(live
        .into_iter()
        .zip(restarted)
        .enumerate()
        .map(|(i, (l, r))| {
            l.map_err(|f| with_deliveries(f, "live", &live_ids[i]))
                .and(r.map_err(|f| with_deliveries(f, "restarted", &restart_ids[i])))
        })
        .collect())
}
