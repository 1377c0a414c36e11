//! More races: a cancel request racing the host's shutdown, terminate racing the
//! run's end, timed signal waits racing their senders under passivation, watchers
//! following a run through continue-as-new and passivation, and
//! `wait_until_suspended` racing the end.

mod common;

use std::time::Duration;

use common::within;
use futures::StreamExt;
use reel::{Ctx, Error, Event, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// Waits for a signal that never comes.
struct Forever;

impl Workflow for Forever {
    const NAME: &'static str = "forever";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal::<()>("never").await
    }
}

/// A cancel request acknowledged just as the host shuts down is carried out when
/// the run resumes on the next host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_the_shutdown_is_carried_out_after_the_reopen() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = |p: Duration| common::hosts::open_passivating(dir.path(), Forever, p);
    let mut acked = 0;
    for iter in 0..25 {
        let id = format!("f{iter}");
        let host = open(if iter % 2 == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs(60)
        })
        .await?;
        let run = host.start::<Forever>(&id, ()).await?;
        run.wait_until_suspended().await?;
        let cancel = {
            let run = run.clone();
            tokio::spawn(async move {
                if iter % 3 == 0 {
                    run.cancel("bye").await
                } else {
                    run.request_cancel("bye").await
                }
            })
        };
        // Jitter (not a wait for an event): moves the shutdown across the
        // cancel's write.
        if iter % 2 == 1 {
            tokio::time::sleep(Duration::from_micros(1)).await;
        } else {
            for _ in 0..iter {
                tokio::task::yield_now().await;
            }
        }
        within(LIMIT, "the shutdown", host.shutdown()).await??;
        let c = within(LIMIT, "the cancel", cancel).await??;
        let host = open(Duration::from_secs(60)).await?;
        let run = host.handle::<Forever>(&id);
        match c {
            Ok(()) => {
                acked += 1;
                let r = within(LIMIT, "the cancelled end", run.result()).await?;
                assert!(
                    matches!(r, Err(Error::Cancelled(_))),
                    "iteration {iter}: {r:?}"
                );
            }
            Err(Error::Shutdown) => {
                // Unknown whether it landed: the run is either cancelled or waits.
                let s = run.status().await?;
                assert!(
                    matches!(
                        s,
                        RunStatus::Cancelled | RunStatus::Suspended { .. } | RunStatus::Running
                    ),
                    "iteration {iter}: {s:?}"
                );
            }
            Err(e) => anyhow::bail!("iteration {iter}: cancel {e:?}"),
        }
        host.shutdown().await?;
    }
    eprintln!("{acked} cancels acknowledged");
    Ok(())
}

/// Waits for one signal and returns it.
struct One;

impl Workflow for One {
    const NAME: &'static str = "one";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.wait_for_signal::<u32>("v").await
    }
}

/// Terminate racing the signal that ends the run: whatever wins, the status,
/// `result()` and the log agree, and a terminate that returned `Ok` did end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_racing_the_end_agrees_with_the_log() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_passivating(dir.path(), One, Duration::from_millis(1)).await?;
    for iter in 0..40u32 {
        let run = host.start::<One>(&format!("t{iter}"), ()).await?;
        run.wait_until_suspended().await?;
        let sig = {
            let run = run.clone();
            tokio::spawn(async move { run.signal("v", &iter, "v").await })
        };
        if iter % 2 == 0 {
            tokio::task::yield_now().await;
        }
        let t = run.terminate("stop").await;
        let s = within(LIMIT, "the signal", sig).await??;
        let r = within(LIMIT, "the result", run.result()).await?;
        let status = run.status().await?;
        let events = run.events().await?;
        let ends: Vec<&Event> = events.iter().filter(|e| e.is_terminal()).collect();
        assert_eq!(ends.len(), 1, "iteration {iter}: {ends:?}");
        match (&t, &r) {
            (Ok(()), Err(Error::Cancelled(_))) => {
                assert_eq!(status, RunStatus::Cancelled);
                assert!(matches!(ends[0], Event::RunCancelled { .. }));
            }
            (Err(Error::RunFinished(_)), Ok(v)) => {
                assert_eq!(*v, iter);
                assert_eq!(status, RunStatus::Completed);
                assert!(matches!(s, Ok(())));
            }
            other => {
                panic!("iteration {iter}: terminate/result disagree: {other:?} status {status:?}")
            }
        }
        assert!(matches!(s, Ok(()) | Err(Error::RunFinished(_))), "{s:?}");
    }
    host.shutdown().await?;
    Ok(())
}

/// Takes `n` signals through waits with a 1 ms timeout, counting the timeouts.
struct Patient;

impl Workflow for Patient {
    const NAME: &'static str = "patient";
    type Input = u32;
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<u32>> {
        let mut got = Vec::new();
        while got.len() < n as usize {
            if let Some(v) = ctx
                .wait_for_signal_timeout::<u32>("x", Duration::from_millis(1))
                .await?
            {
                got.push(v);
            }
        }
        Ok(got)
    }
}

/// Signals racing the deadlines of timed waits, with passivation after each
/// wait: a signal is taken by the wait it beat or buffered for the next one,
/// never lost, never taken twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_waits_racing_signals_under_passivation_lose_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_passivating(dir.path(), Patient, Duration::ZERO).await?;
    for iter in 0..6 {
        let run = host.start::<Patient>(&format!("p{iter}"), 30).await?;
        for k in 0..30u32 {
            run.signal("x", &k, &format!("x{k}")).await?;
            if k % 3 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let got = within(LIMIT, "the result", run.result()).await??;
        assert_eq!(got, (0..30).collect::<Vec<_>>(), "iteration {iter}");
    }
    host.shutdown().await?;
    Ok(())
}

/// Continues as new after every signal, `n` segments in all.
struct Hop;

impl Workflow for Hop {
    const NAME: &'static str = "hop";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, left: u32) -> reel::Result<u32> {
        if left == 0 {
            return Ok(7);
        }
        ctx.wait_for_signal::<u32>("go").await?;
        ctx.continue_as_new::<Hop>(left - 1).await
    }
}

/// Watchers started at different moments all see the run's records once each,
/// in order, through every segment, and their streams end after the terminal
/// record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_follow_a_run_through_segments_and_passivation() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_passivating(dir.path(), Hop, Duration::ZERO).await?;
    for iter in 0..5 {
        let run = host.start::<Hop>(&format!("w{iter}"), 15).await?;
        let mut watchers = Vec::new();
        for k in 0..15u32 {
            if k % 5 == 0 {
                let stream = run.watch();
                watchers.push(tokio::spawn(async move {
                    stream
                        .map(|r| r.map(|rec| rec.seq))
                        .collect::<Vec<_>>()
                        .await
                }));
            }
            run.signal("go", &k, &format!("g{k}")).await?;
        }
        assert_eq!(within(LIMIT, "the result", run.result()).await??, 7);
        let all: Vec<u64> = run.records().await?.iter().map(|r| r.seq).collect();
        for w in watchers {
            let seen = within(LIMIT, "a watcher's end", w).await??;
            let seen: Vec<u64> = seen.into_iter().collect::<reel::Result<_>>()?;
            assert_eq!(seen, all, "iteration {iter}: a watcher saw another log");
        }
    }
    host.shutdown().await?;
    Ok(())
}

/// `wait_until_suspended` callers racing the run's end: each returns Suspended
/// or RunFinished, none hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_until_suspended_racing_the_end_never_hangs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_passivating(dir.path(), One, Duration::ZERO).await?;
    for iter in 0..30u32 {
        let run = host.start::<One>(&format!("s{iter}"), ()).await?;
        let mut waiters = Vec::new();
        for _ in 0..4 {
            let run = run.clone();
            waiters.push(tokio::spawn(
                async move { run.wait_until_suspended().await },
            ));
        }
        run.signal("v", &iter, "v").await?;
        for w in waiters {
            let r = within(LIMIT, "wait_until_suspended", w).await??;
            assert!(
                matches!(
                    r,
                    Ok(RunStatus::Suspended { .. }) | Err(Error::RunFinished(_))
                ),
                "iteration {iter}: {r:?}"
            );
        }
        assert_eq!(within(LIMIT, "the result", run.result()).await??, iter);
    }
    host.shutdown().await?;
    Ok(())
}

/// Takes `n` signals named `item`.
struct Taker;

impl Workflow for Taker {
    const NAME: &'static str = "taker";
    type Input = u32;
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<String>> {
        let mut got = Vec::new();
        for _ in 0..n {
            got.push(ctx.wait_for_signal::<String>("item").await?);
        }
        Ok(got)
    }
}

/// Signal-with-start from many tasks on one id, racing the creation and the end
/// of the run it creates: every acknowledged signal is in the log before the end,
/// every refused one (`RunFinished`) is not, and one run exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_with_start_racing_the_end_of_the_run_it_creates() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_passivating(dir.path(), Taker, Duration::ZERO).await?;
    for iter in 0..20 {
        let id = format!("sws{iter}");
        let mut tasks = Vec::new();
        for s in 0..4 {
            let (host, id) = (host.clone(), id.clone());
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for k in 0..5 {
                    let sid = format!("{s}-{k}");
                    let r = host
                        .signal_with_start::<Taker, _>(&id, 6, "item", &sid, &sid)
                        .await
                        .map(|_| ());
                    out.push((sid, r));
                }
                out
            }));
        }
        let mut acked = Vec::new();
        let mut refused = Vec::new();
        for t in tasks {
            for (sid, r) in within(LIMIT, "a sender", t).await?? {
                match r {
                    Ok(()) => acked.push(sid),
                    Err(Error::RunFinished(_)) => refused.push(sid),
                    Err(e) => anyhow::bail!("iteration {iter}: {sid}: {e:?}"),
                }
            }
        }
        let run = host.handle::<Taker>(&id);
        let got = within(LIMIT, "the result", run.result()).await??;
        assert_eq!(got.len(), 6);
        let events = run.events().await?;
        let end = events
            .iter()
            .position(|e| e.is_terminal())
            .ok_or_else(|| anyhow::anyhow!("no end"))?;
        let received: Vec<(usize, &String)> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Event::SignalReceived { signal_id, .. } => Some((i, signal_id)),
                _ => None,
            })
            .collect();
        for sid in &acked {
            let at: Vec<usize> = received
                .iter()
                .filter(|(_, s)| *s == sid)
                .map(|(i, _)| *i)
                .collect();
            assert_eq!(
                at.len(),
                1,
                "iteration {iter}: {sid} recorded {} times",
                at.len()
            );
            assert!(at[0] < end, "iteration {iter}: {sid} after the end");
        }
        for sid in &refused {
            assert!(
                received.iter().all(|(_, s)| *s != sid),
                "iteration {iter}: {sid} refused but recorded"
            );
        }
        let starts = events
            .iter()
            .filter(|e| matches!(e, Event::RunStarted { .. }))
            .count();
        assert_eq!(starts, 1, "iteration {iter}");
    }
    host.shutdown().await?;
    Ok(())
}

/// Pause, resume and cancel of one run from three tasks at once, under
/// passivation: the run ends cancelled and no call hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_cancel_racing_end_cancelled() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_passivating(dir.path(), Forever, Duration::ZERO).await?;
    for iter in 0..30 {
        let run = host.start::<Forever>(&format!("prc{iter}"), ()).await?;
        if iter % 2 == 0 {
            run.wait_until_suspended().await?;
        }
        let pauser = {
            let run = run.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for _ in 0..3 {
                    out.push(run.pause().await);
                    out.push(run.resume().await);
                }
                out
            })
        };
        let c = within(LIMIT, "the cancel", run.cancel("stop")).await?;
        assert!(matches!(c, Ok(())), "iteration {iter}: {c:?}");
        for r in within(LIMIT, "the pauser", pauser).await?? {
            assert!(
                matches!(r, Ok(()) | Err(Error::InvalidState { .. })),
                "iteration {iter}: {r:?}"
            );
        }
        let r = within(LIMIT, "the result", run.result()).await?;
        assert!(
            matches!(r, Err(Error::Cancelled(_))),
            "iteration {iter}: {r:?}"
        );
        assert_eq!(run.status().await?, RunStatus::Cancelled);
    }
    host.shutdown().await?;
    Ok(())
}
