//! Acceptance: signals and approvals as DESIGN states them ("Signals are buffered
//! in the log: one sent before the wait is kept; the k-th wait on a name receives
//! the k-th signal of that name; a timed-out wait consumes none"; "same id twice =
//! one delivery"; "A signal, `status()` or `result()` for an unknown run, or a
//! signal to a finished run, is an `Err` at once"), with the README's additions
//! (one signal id per run whatever the name; each `approve` call is one decision).

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Counter, Gate, until_log, waits_on, within};
use reel::testing::TestClock;
use reel::{Approval, Ctx, Error, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(20);
const AT_ONCE: Duration = Duration::from_secs(5);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A wait on `a`, then a timed wait on `b` (10 s), then an untimed wait on `b`.
struct TwoNames;
impl Workflow for TwoNames {
    const NAME: &'static str = "two-names";
    type Input = ();
    type Output = (u32, Option<u32>, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u32, Option<u32>, u32)> {
        let a: u32 = ctx.wait_for_signal("a").await?;
        let timed: Option<u32> = ctx
            .wait_for_signal_timeout("b", Duration::from_secs(10))
            .await?;
        let b: u32 = ctx.wait_for_signal("b").await?;
        Ok((a, timed, b))
    }
}

static STEP_GATE: Gate = Gate::new();

/// A step that holds until the test opens the gate, then three waits on `n`.
struct Buffered {
    bodies: Counter,
}
impl Workflow for Buffered {
    const NAME: &'static str = "buffered";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let bodies = self.bodies.clone();
        ctx.step("hold", move |_| {
            let bodies = bodies.clone();
            async move {
                bodies.bump();
                STEP_GATE.wait().await;
                Ok::<_, String>(())
            }
        })
        .await?;
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(ctx.wait_for_signal::<u32>("n").await?);
        }
        Ok(got)
    }
}

/// Three approvals of one name, the second after a signal wait.
struct Reviews;
impl Workflow for Reviews {
    const NAME: &'static str = "reviews";
    type Input = ();
    type Output = Vec<Approval>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<Approval>> {
        let first = ctx.approval("review").await?;
        let _: u32 = ctx.wait_for_signal("next").await?;
        let second = ctx.approval("review").await?;
        let third = ctx.approval("review").await?;
        Ok(vec![first, second, third])
    }
}

fn received(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::SignalReceived {
                name, signal_id, ..
            } => Some((name.clone(), signal_id.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_signal_id_is_one_delivery_whatever_the_name_and_across_a_restart() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, TwoNames).await?;
    let run = host.start::<TwoNames>("ids", ()).await?;
    run.signal("a", &1u32, "evt-1").await?;
    // The same id again, under the same name and under another: dropped.
    run.signal("a", &2u32, "evt-1").await?;
    run.signal("b", &3u32, "evt-1").await?;
    host.shutdown().await?;

    let host = common::hosts::open_on(dir.path(), &clock, TwoNames).await?;
    let run = host.handle::<TwoNames>("ids");
    // And again after a restart.
    run.signal("b", &4u32, "evt-1").await?;
    until_log(&run, LIMIT, "the timed wait on b", |e| {
        waits_on(e, "b") == 1
    })
    .await?;
    within(LIMIT, "the timed wait", run.wait_until_suspended()).await??;
    clock.advance(Duration::from_secs(10));
    until_log(&run, LIMIT, "the untimed wait on b", |e| {
        waits_on(e, "b") == 2
    })
    .await?;
    within(LIMIT, "the untimed wait", run.wait_until_suspended()).await??;
    run.signal("b", &5u32, "evt-2").await?;
    let out = within(LIMIT, "the end", run.result()).await??;
    assert_eq!(out, (1, None, 5), "evt-1 was delivered more than once");
    assert_eq!(
        received(&run.events().await?),
        vec![("a".into(), "evt-1".into()), ("b".into(), "evt-2".into())]
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_wait_consumes_nothing_and_the_next_wait_gets_the_signal() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(dir.path(), &clock, TwoNames).await?;
    let run = host.start::<TwoNames>("timeout", ()).await?;
    run.signal("a", &1u32, "a-1").await?;
    until_log(&run, LIMIT, "the timed wait", |e| waits_on(e, "b") == 1).await?;
    within(LIMIT, "the timed wait", run.wait_until_suspended()).await??;
    clock.advance(Duration::from_secs(10));
    until_log(&run, LIMIT, "the second wait on b", |e| {
        waits_on(e, "b") == 2
    })
    .await?;
    // Sent after the timeout: not the timed wait's, the next one's.
    run.signal("b", &7u32, "b-1").await?;
    assert_eq!(within(LIMIT, "the end", run.result()).await??, (1, None, 7));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_sent_while_a_step_runs_are_kept_for_the_waits_in_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let bodies = Counter::default();
    let host = common::hosts::open(
        dir.path(),
        Buffered {
            bodies: bodies.clone(),
        },
    )
    .await?;
    let run = host.start::<Buffered>("buffered", ()).await?;
    within(LIMIT, "the step body", async {
        while bodies.get() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    // The run is executing a step: its log is readable meanwhile, its status Running.
    let log = run.events().await?;
    assert!(
        log.iter()
            .any(|e| matches!(e, Event::StepStarted { id, attempt: 1 } if id == "hold")),
        "the log of a running run shows its started step: {log:?}"
    );
    assert_eq!(run.status().await?, RunStatus::Running);
    for (k, n) in [10u32, 20, 30].into_iter().enumerate() {
        run.signal("n", &n, &format!("n-{k}")).await?;
    }
    STEP_GATE.open();
    assert_eq!(
        within(LIMIT, "the end", run.result()).await??,
        vec![10, 20, 30],
        "the k-th wait gets the k-th signal"
    );
    assert_eq!(bodies.get(), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_buffered_and_each_call_is_one_decision() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Reviews).await?;
    let run = host.start::<Reviews>("reviews", ()).await?;
    run.approve("review", true, Some("looks good".into()))
        .await?;
    run.approve("review", false, None).await?;
    until_log(&run, LIMIT, "the wait on next", |e| {
        waits_on(e, "next") == 1
    })
    .await?;
    match run.status().await? {
        RunStatus::Suspended { waiting_on } => {
            assert!(
                waiting_on.contains("next"),
                "waiting_on names the signal: {waiting_on}"
            );
        }
        RunStatus::Running => {}
        other => panic!("expected the run suspended on `next`, got {other:?}"),
    }
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), Reviews).await?;
    let run = host.handle::<Reviews>("reviews");
    run.signal("next", &0u32, "next-1").await?;
    run.approve("review", true, Some("third".into())).await?;
    let out = within(LIMIT, "the end", run.result()).await??;
    assert_eq!(
        out,
        vec![
            Approval {
                approved: true,
                feedback: Some("looks good".into())
            },
            Approval {
                approved: false,
                feedback: None
            },
            Approval {
                approved: true,
                feedback: Some("third".into())
            },
        ]
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_finished_runs_answer_at_once_and_nothing_is_created() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host: Host = Host::builder()
        .path(dir.path())
        .register(common::workflows::Waiter)
        .register(common::workflows::Quick)
        .build()
        .await?;
    let ghost = host.handle::<common::workflows::Waiter>("ghost");
    let unknown = Error::UnknownRun("ghost".into());
    assert_eq!(
        within(AT_ONCE, "signal to unknown", ghost.signal("go", &1u32, "s")).await?,
        Err(unknown.clone())
    );
    assert_eq!(
        within(AT_ONCE, "approve unknown", ghost.approve("go", true, None)).await?,
        Err(unknown.clone())
    );
    assert_eq!(
        within(AT_ONCE, "status of unknown", ghost.status()).await?,
        Err(unknown.clone())
    );
    assert_eq!(
        within(AT_ONCE, "result of unknown", ghost.result()).await?,
        Err(unknown.clone())
    );
    assert_eq!(
        within(AT_ONCE, "events of unknown", ghost.events())
            .await?
            .map(|_| ()),
        Err(unknown.clone())
    );
    assert!(
        host.runs().await?.iter().all(|r| r.run_id != "ghost"),
        "a signal to an unknown run created it"
    );

    let done = host.start::<common::workflows::Quick>("done", 5).await?;
    assert_eq!(within(LIMIT, "quick", done.result()).await??, 5);
    host.shutdown().await?;
    let host = Host::builder()
        .path(dir.path())
        .register(common::workflows::Waiter)
        .register(common::workflows::Quick)
        .build()
        .await?;
    let done = host.handle::<common::workflows::Quick>("done");
    assert_eq!(
        within(AT_ONCE, "signal to finished", done.signal("go", &1u32, "s")).await?,
        Err(Error::RunFinished("done".into()))
    );
    assert_eq!(
        within(AT_ONCE, "result of finished", done.result()).await??,
        5
    );
    assert_eq!(
        within(AT_ONCE, "unknown after restart", ghost_status(&host)).await?,
        Err(unknown)
    );
    host.shutdown().await?;
    Ok(())
}

async fn ghost_status(host: &Host) -> reel::Result<RunStatus> {
    host.handle::<common::workflows::Waiter>("ghost")
        .status()
        .await
}
