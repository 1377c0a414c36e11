//! Acceptance tests for continue-as-new and passivation, written from DESIGN.md
//! ("Long-lived runs": `continue_as_new` "never returns Ok in this segment: the
//! run restarts from the top with `input`; unconsumed signals carry over;
//! RunHandle::result() waits for the last segment"; invariant 6, passivation)
//! and the README ("Long-lived runs": old segments stay readable, `info()` tells
//! the segment number and the current segment's size, idempotency keys name the
//! segment).

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

/// Segment `n` takes one `tick` (applying it in a step that returns its
/// idempotency key) and continues as new with `n + 1`, until segment 3, which
/// waits for `done` and answers with the keys it was given.
struct Ticker;
impl Workflow for Ticker {
    const NAME: &'static str = "acc-ticker";
    type Input = (u32, Vec<String>);
    type Output = (u32, u32, Vec<String>);
    async fn run(
        &self,
        ctx: Ctx,
        (n, mut keys): (u32, Vec<String>),
    ) -> reel::Result<(u32, u32, Vec<String>)> {
        if n == 3 {
            let done: u32 = ctx.wait_for_signal("done").await?;
            return Ok((n, done, keys));
        }
        let tick: u32 = ctx.wait_for_signal("tick").await?;
        let key = ctx
            .step("apply", |s| {
                let key = s.idempotency_key().to_owned();
                async move { Ok::<_, String>(format!("{key}={tick}")) }
            })
            .await?;
        keys.push(key);
        ctx.continue_as_new::<Ticker>((n + 1, keys)).await
    }
}

fn starts(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::RunStarted { .. }))
        .count()
}

/// Signals sent before the first segment consumed any (three `tick`s and the
/// `done`) carry over, in order, from segment to segment; the handle taken at
/// the start gives the last segment's output; `events()` holds every segment;
/// `records()` numbers them on one sequence; `info()` gives segment 3 and the
/// size of that segment alone; each segment's step has its own idempotency key
/// naming the segment; a restart changes none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_carry_signals_and_report_their_number_size_and_keys() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Ticker).await?;
    let run = host.start::<Ticker>("acc-ticker", (0, Vec::new())).await?;
    within(LIMIT, "the first wait", run.wait_until_suspended()).await??;
    run.signal("tick", &10u32, "t-1").await?;
    run.signal("tick", &11u32, "t-2").await?;
    run.signal("done", &99u32, "d-1").await?;
    run.signal("tick", &12u32, "t-3").await?;
    let (n, done, keys) = within(LIMIT, "the last segment", run.result()).await??;
    assert_eq!((n, done), (3, 99));
    assert_eq!(
        keys,
        vec![
            "acc-ticker/apply=10".to_owned(),
            "acc-ticker%S1/apply=11".to_owned(),
            "acc-ticker%S2/apply=12".to_owned(),
        ]
    );

    let check = |events: Vec<Event>, records: Vec<reel::Record>, info: reel::RunInfo| {
        assert_eq!(starts(&events), 4, "every segment stays readable");
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Event::ContinuedAsNew { .. }))
                .count(),
            3
        );
        assert_eq!(records.len(), events.len());
        assert!(
            records.windows(2).all(|w| w[0].seq < w[1].seq),
            "one sequence across segments"
        );
        assert_eq!(
            (info.segment, info.status.clone()),
            (3, RunStatus::Completed)
        );
        let last_start = events
            .iter()
            .rposition(|e| matches!(e, Event::RunStarted { .. }))
            .expect("a RunStarted");
        let current = (events.len() - last_start) as u64;
        assert_eq!(
            info.log.map(|l| l.events),
            Some(current),
            "info() sizes the current segment only: {events:?}"
        );
    };
    check(run.events().await?, run.records().await?, run.info().await?);
    let listed: Vec<_> = host
        .runs()
        .await?
        .into_iter()
        .filter(|r| r.run_id == "acc-ticker")
        .collect();
    assert_eq!(listed.len(), 1, "one run, whatever its segments");
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), Ticker).await?;
    let run = host.handle::<Ticker>("acc-ticker");
    assert_eq!(within(LIMIT, "again", run.result()).await??.2, keys);
    check(run.events().await?, run.records().await?, run.info().await?);
    host.shutdown().await?;
    Ok(())
}

/// `continue_as_new` "never returns Ok in this segment": code after it does not
/// run, also when the run is replayed after a restart in its next segment.
struct NeverAfter;
static AFTER_HOP: AtomicU32 = AtomicU32::new(0);
impl Workflow for NeverAfter {
    const NAME: &'static str = "acc-never-after";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        if n == 0 {
            let r = ctx.continue_as_new::<NeverAfter>(1).await;
            AFTER_HOP.fetch_add(1, Ordering::SeqCst);
            // Whatever came back, the segment has ended: this must not complete.
            return r.map(|_| 1000);
        }
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(go)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_after_continue_as_new_completes_the_old_segment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), NeverAfter).await?;
    let run = host.start::<NeverAfter>("acc-never-after", 0).await?;
    within(LIMIT, "the second segment waits", async {
        loop {
            let info = run.info().await?;
            if info.segment == 1 && matches!(info.status, RunStatus::Suspended { .. }) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await??;
    host.shutdown().await?;
    let host = common::hosts::open(dir.path(), NeverAfter).await?;
    let run = host.handle::<NeverAfter>("acc-never-after");
    run.signal("go", &7u32, "go-1").await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, 7);
    let events = run.events().await?;
    assert_eq!(
        AFTER_HOP.load(Ordering::SeqCst),
        0,
        "the code after continue_as_new never ran"
    );
    assert_eq!(starts(&events), 2, "{events:?}");
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::RunCompleted { .. }))
            .count(),
        1
    );
    host.shutdown().await?;
    Ok(())
}

static NAP_STEPS: AtomicU32 = AtomicU32::new(0);

/// A step, then a one-hour sleep, then a signal wait, then another step.
struct Napper;
impl Workflow for Napper {
    const NAME: &'static str = "acc-napper";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.step("before", |_| async {
            NAP_STEPS.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(())
        })
        .await?;
        ctx.sleep(Duration::from_secs(3600)).await?;
        let word: String = ctx.wait_for_signal("wake").await?;
        let n = ctx
            .step("after", |_| async { Ok::<_, String>(2u32) })
            .await?;
        Ok(format!("{word} {n}"))
    }
}

async fn until_passivated(host: &Host) -> anyhow::Result<()> {
    within(LIMIT, "passivation", async {
        while host.live_runs().await > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
}

/// DESIGN invariant 6: "A run that waits (timer, signal, approval) holds no
/// handler future and no decoded log in memory after an idle period
/// (passivation)"; README: the next wake-up runs the handler again from the top
/// against the log. A run passivated while it sleeps is woken by its timer (the
/// test clock moving), passivated again while it waits for a signal, woken by
/// the signal, and completes without running its first step again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passivated_run_wakes_on_its_timer_and_then_on_a_signal() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
    let clock = TestClock::new(t0);
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .passivate_after(Duration::from_millis(10))
        .register(Napper)
        .build()
        .await?;
    let run = host.start::<Napper>("acc-napper", ()).await?;
    within(LIMIT, "the sleep", run.wait_until_suspended()).await??;
    until_passivated(&host).await?;
    assert!(
        matches!(run.status().await?, RunStatus::Suspended { waiting_on } if waiting_on.contains("timer")),
    );
    within(LIMIT, "the timer armed", async {
        while clock.next_due().is_none() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?;
    clock.advance(Duration::from_secs(3601));
    common::status::until_status(
        &run,
        "the wait for wake",
        |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains("wake")),
    )
    .await?;
    until_passivated(&host).await?;
    run.signal("wake", "up", "w-1").await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, "up 2");
    assert_eq!(NAP_STEPS.load(Ordering::SeqCst), 1);
    host.shutdown().await?;
    Ok(())
}
