//! The child process: opens a host, keeps a window of `mix` runs in flight,
//! sends their signals from outside at random moments, until killed (or, the last
//! child, until every started run has ended).

use super::*;

/// A problem the child saw; the parent fails the test when it finds one.
pub(crate) fn child_error(what: String) {
    eprintln!("TORTURE-ERR {what}");
}

/// Sends signal `name` to `run` after `delay`, with a fixed signal id. A run that
/// does not exist yet (a kid not yet started) is tried again; a finished run needs
/// nothing any more.
pub(crate) async fn send_later<W: Workflow>(
    run: reel::RunHandle<W>,
    name: &'static str,
    delay: Duration,
) {
    tokio::time::sleep(delay).await;
    let signal_id = format!("{}/{name}", run.id());
    let payload = format!("{name}-{}", run.id());
    loop {
        match run.signal(name, &payload, &signal_id).await {
            Ok(()) | Err(reel::Error::RunFinished(_)) => return,
            Err(reel::Error::UnknownRun(_)) => tokio::time::sleep(ms(5)).await,
            Err(e) => {
                child_error(format!("signal {name} to {}: {e}", run.id()));
                return;
            }
        }
    }
}

/// Sends signal `name` to `run` once the run waits for it, `delay` after the wait was
/// first seen: a timed wait or a race against a timer then goes either way.
pub(crate) async fn send_when_awaited<W: Workflow>(
    run: reel::RunHandle<W>,
    name: &'static str,
    delay: Duration,
) {
    loop {
        // Gated on suspension, so that a busy run is not read over and over.
        match run.wait_until_suspended().await {
            Ok(_) => {}
            Err(reel::Error::UnknownRun(_)) => {
                tokio::time::sleep(ms(5)).await;
                continue;
            }
            Err(reel::Error::RunFinished(_)) => return,
            Err(e) => return child_error(format!("waiting on {}: {e}", run.id())),
        }
        match run.events().await {
            Ok(events)
                if events
                    .iter()
                    .any(|e| matches!(e, Event::SignalAwaited { name: n, .. } if n == name)) =>
            {
                break;
            }
            Ok(_) => tokio::time::sleep(ms(5)).await,
            Err(e) => return child_error(format!("events of {}: {e}", run.id())),
        }
    }
    send_later(run, name, delay).await;
}

/// Approves `ship` after `delay`, unless the log already holds a decision: an
/// approval has no signal id, so a re-send would be a second decision.
pub(crate) async fn approve_later(run: reel::RunHandle<Mix>, n: u64, delay: Duration) {
    tokio::time::sleep(delay).await;
    let events = match run.events().await {
        Ok(e) => e,
        Err(e) => return child_error(format!("events of {}: {e}", run.id())),
    };
    let decided = events
        .iter()
        .any(|e| matches!(e, Event::SignalReceived { name, .. } if name == "approval:ship"));
    if decided {
        return;
    }
    match run
        .approve("ship", n % 4 != 0, Some(format!("fb-{n}")))
        .await
    {
        Ok(()) | Err(reel::Error::RunFinished(_)) => {}
        Err(e) => child_error(format!("approve {}: {e}", run.id())),
    }
}

/// Starts (idempotently) `mix-n`, sends its signals at random moments, waits for its
/// end and logs its output to `done.log`.
pub(crate) async fn drive(host: Arc<Host>, dir: Arc<PathBuf>, n: u64, seed: u64) {
    let id = mix_id(n);
    let run = match host.start::<Mix>(&id, n).await {
        Ok(run) => run,
        Err(e) => return child_error(format!("start {id}: {e}")),
    };
    let mut rng = Rng(seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut signals = JoinSet::new();
    // `pay` and the approval usually arrive before their wait (buffered), the others
    // while their wait runs against a timer.
    signals.spawn(send_later(run.clone(), "pay", ms(rng.range(0, 30))));
    signals.spawn(approve_later(run.clone(), n, ms(rng.range(0, 40))));
    signals.spawn(send_when_awaited(run.clone(), "ping", ms(rng.range(0, 8))));
    signals.spawn(send_when_awaited(run.clone(), "race", ms(rng.range(0, 10))));
    let kid = host.handle::<Kid>(&kid_id(&id));
    signals.spawn(send_when_awaited(kid, "kick", ms(rng.range(0, 8))));
    match run.result().await {
        Ok(out) => {
            if let Err(e) = append_record(&dir.join("done.log"), &format!("{id} {out}")) {
                child_error(format!("done.log: {e}"));
            }
        }
        Err(e) => child_error(format!("result of {id}: {e}")),
    }
    signals.abort_all();
}

pub(crate) fn child(dir: &Path) {
    let generation: u64 = std::env::var(GEN_ENV)
        .ok()
        .and_then(|g| g.parse().ok())
        .unwrap_or(0);
    let last = std::env::var_os(FINAL_ENV).is_some();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // Some children passivate suspended runs almost at once, so that wake-ups
        // also replay from disk within one process, not only after a kill.
        let passivate = [ms(5), ms(30), Duration::from_secs(10)][generation as usize % 3];
        let host = Arc::new(
            builder(dir, "side.log", generation)
                .await
                .passivate_after(passivate)
                .build()
                .await
                .expect("open the store"),
        );
        // Tells the parent how long the start took (and that this kill hit a live host).
        let spawned = std::env::var(SPAWNED_ENV)
            .ok()
            .and_then(|t| t.parse::<u128>().ok())
            .unwrap_or(0);
        eprintln!(
            "READY {generation} {}",
            epoch_us().saturating_sub(spawned) / 1000
        );
        let work = child_work(host.clone(), dir, generation, last);
        if last {
            if tokio::time::timeout(FINAL_LIMIT, work).await.is_err() {
                report_unfinished(&host).await;
                std::process::exit(3);
            }
        } else {
            work.await;
        }
        match Arc::try_unwrap(host) {
            Ok(host) => host.shutdown().await.expect("shutdown"),
            Err(_) => child_error("the host is still shared at the end".into()),
        }
    });
}

pub(crate) async fn child_work(host: Arc<Host>, dir: &Path, generation: u64, last: bool) {
    let dir = Arc::new(dir.to_owned());
    // Signal delays: from the parent's seed, so a printed seed reproduces them too
    // (what they meet still depends on timing).
    let seed = env_u64(SEED_ENV).unwrap_or(0) ^ generation.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let infos = host.runs().await.expect("runs");
    let mut started = 0;
    let mut unfinished = Vec::new();
    for info in infos.iter().filter(|i| i.workflow == Mix::NAME) {
        started += 1;
        if info.status != RunStatus::Completed {
            let n = info.run_id["mix-".len()..].parse::<u64>().expect("mix id");
            unfinished.push(n);
        }
    }
    let window = Arc::new(Semaphore::new(WINDOW));
    let mut tasks = JoinSet::new();
    // The runs already started first, then (before the last child) new ones for ever.
    let fresh = (started as u64..).take_while(|_| !last);
    for n in unfinished.into_iter().chain(fresh) {
        let permit = window.clone().acquire_owned().await.expect("window");
        let (host, dir) = (host.clone(), dir.clone());
        tasks.spawn(async move {
            drive(host, dir, n, seed).await;
            drop(permit);
        });
    }
    while tasks.join_next().await.is_some() {}
    println!("all-done");
}

pub(crate) async fn report_unfinished(host: &Host) {
    let infos = host.runs().await.unwrap_or_default();
    for info in infos
        .iter()
        .filter(|i| !matches!(i.status, RunStatus::Completed))
    {
        child_error(format!(
            "unfinished after {FINAL_LIMIT:?}: {} {:?}",
            info.run_id, info.status
        ));
        let events = match info.workflow.as_str() {
            "mix" => host.handle::<Mix>(&info.run_id).events().await,
            _ => host.handle::<Kid>(&info.run_id).events().await,
        };
        eprintln!("  log: {events:?}");
    }
}
