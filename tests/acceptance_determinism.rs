//! Acceptance tests for replay under concurrency and divergence, written from
//! DESIGN.md (invariant 3, "Replay under concurrency: join!/try_join_all/select!/
//! select_all/FuturesUnordered over ctx futures replay to the interleaving
//! observed live") and the README ("Concurrency replays exactly",
//! "Divergence"): the completion order a `FuturesUnordered` of steps saw live is
//! the order it sees after a restart; a `select_all` over signal waits keeps its
//! live winner after a restart and the losers' signals stay buffered; a
//! divergence under `join!` names the first divergent event by its sequence
//! number (also in a later log segment), leaves the log untouched and resumes
//! once the code is fixed.

mod common;

use std::time::Duration;

use common::{Gate, within};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

static GATES: [Gate; 3] = [Gate::new(), Gate::new(), Gate::new()];

/// Three steps in a `FuturesUnordered`, each held by its gate; the order they
/// completed in is published, then the run waits for `go` and returns it.
struct Unordered;
impl Workflow for Unordered {
    const NAME: &'static str = "acc-unordered";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let mut pending: FuturesUnordered<_> = (0..3u32)
            .map(|i| {
                ctx.step(&format!("s{i}"), move |_| async move {
                    GATES[i as usize].wait().await;
                    Ok::<_, String>(i)
                })
            })
            .collect();
        let mut order = Vec::new();
        while let Some(r) = pending.next().await {
            order.push(r?);
        }
        ctx.publish("order", &order).await?;
        let () = ctx.wait_for_signal("go").await?;
        Ok(order)
    }
}

fn completed(events: &[Event], id: &str) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::StepCompleted { id: s, .. } if s == id))
}

/// Steps completing in the order 2, 0, 1 (each released only once the previous
/// one's result is in the log) come out of the `FuturesUnordered` in that order
/// live, and again when the run is replayed from its log after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_unordered_replays_the_completion_order_seen_live() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Unordered).await?;
    let run = host.start::<Unordered>("acc-unordered", ()).await?;
    for i in [2usize, 0, 1] {
        GATES[i].open();
        let id = format!("s{i}");
        common::until_log(&run, LIMIT, &format!("{id} recorded"), |e| {
            completed(e, &id)
        })
        .await?;
    }
    let live: Vec<u32> = within(LIMIT, "published order", run.wait_published("order")).await??;
    assert_eq!(live, vec![2, 0, 1]);
    within(LIMIT, "the wait for go", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), Unordered).await?;
    let run = host.handle::<Unordered>("acc-unordered");
    run.signal("go", &(), "go-1").await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, live);
    let events = run.events().await?;
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::Published { .. }))
            .count(),
        1,
        "replay publishes nothing again: {events:?}"
    );
    host.shutdown().await?;
    Ok(())
}

/// Waits on `a`, `b` and `c` with `select_all`, then for `go`; then takes the
/// next `a` and `c` (the losers' signals, still buffered).
struct FirstOfThree;
impl Workflow for FirstOfThree {
    const NAME: &'static str = "acc-first-of-three";
    type Input = ();
    type Output = (String, usize, u32, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(String, usize, u32, u32)> {
        let waits = ["a", "b", "c"].map(|n| Box::pin(ctx.wait_for_signal::<u32>(n)));
        let (won, index, rest) = futures::future::select_all(waits).await;
        drop(rest); // the losing waits are dropped: they consume nothing
        let won = format!("{}", won?);
        let () = ctx.wait_for_signal("go").await?;
        let a: u32 = ctx.wait_for_signal("a").await?;
        let c: u32 = ctx.wait_for_signal("c").await?;
        Ok((won, index, a, c))
    }
}

/// README: a `select!` (and `select_all`) "keeps the branch that won live,
/// whatever arrives later"; "a wait that was dropped or timed out consumes no
/// signal", and "a late signal stays buffered for the next wait on its name".
/// `b` wins; `a` and `c` arrive later; after a restart the replayed run still
/// took `b`, and its later waits on `a` and `c` get those signals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_all_keeps_its_live_winner_after_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), FirstOfThree).await?;
    let run = host.start::<FirstOfThree>("acc-select-all", ()).await?;
    within(LIMIT, "the three waits", run.wait_until_suspended()).await??;
    run.signal("b", &20u32, "b-1").await?;
    common::status::until_status(
        &run,
        "the wait for go",
        |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains("go")),
    )
    .await?;
    run.signal("c", &30u32, "c-1").await?;
    run.signal("a", &10u32, "a-1").await?;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), FirstOfThree).await?;
    let run = host.handle::<FirstOfThree>("acc-select-all");
    run.signal("go", &(), "go-1").await?;
    assert_eq!(
        within(LIMIT, "result", run.result()).await??,
        ("20".to_owned(), 1, 10, 30)
    );
    host.shutdown().await?;
    Ok(())
}

/// Two joined steps, then a wait for `go`; `hops` segments first, each ended by
/// `continue_as_new` after a `next` signal.
struct Pair;
impl Workflow for Pair {
    const NAME: &'static str = "acc-pair";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, hops: u32) -> reel::Result<String> {
        if hops > 0 {
            ctx.step("hop", |_| async { Ok::<_, String>(()) }).await?;
            let () = ctx.wait_for_signal("next").await?;
            return ctx.continue_as_new::<Pair>(hops - 1).await;
        }
        let (a, b) = futures::join!(
            ctx.step("alpha", |_| async { Ok::<_, String>(1u32) }),
            ctx.step("beta", |_| async { Ok::<_, String>(2u32) }),
        );
        let () = ctx.wait_for_signal("go").await?;
        Ok(format!("{}+{}", a?, b?))
    }
}

/// The same workflow with the joined steps swapped: a change that reorders calls.
struct PairSwapped;
impl Workflow for PairSwapped {
    const NAME: &'static str = "acc-pair";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, hops: u32) -> reel::Result<String> {
        if hops > 0 {
            ctx.step("hop", |_| async { Ok::<_, String>(()) }).await?;
            let () = ctx.wait_for_signal("next").await?;
            return ctx.continue_as_new::<PairSwapped>(hops - 1).await;
        }
        let (b, a) = futures::join!(
            ctx.step("beta", |_| async { Ok::<_, String>(2u32) }),
            ctx.step("alpha", |_| async { Ok::<_, String>(1u32) }),
        );
        let () = ctx.wait_for_signal("go").await?;
        Ok(format!("{}+{}", a?, b?))
    }
}

/// DESIGN invariant 3: "A mismatch stops the run with `Error::ReplayDivergence {
/// index, expected, found }` naming the first divergent event; the log is not
/// appended with anything inconsistent, and the run can resume once the code is
/// fixed". Runs that diverge inside a `join!`, one in its first log segment and
/// one in its third: the index is the sequence number of the divergent record
/// (`records()` has the named step there), `expected`/`found` name the two
/// steps, the status carries the text, nothing but the waking signal is
/// appended, and the original code finishes both runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_divergence_under_join_names_its_record_and_resumes_after_the_fix() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Pair).await?;
    let first = host.start::<Pair>("acc-pair-0", 0).await?;
    let later = host.start::<Pair>("acc-pair-2", 2).await?;
    within(LIMIT, "first waits", first.wait_until_suspended()).await??;
    for segment in 1..=2u32 {
        common::status::until_status(
            &later,
            "a hop waits",
            |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains("next")),
        )
        .await?;
        later
            .signal("next", &(), &format!("next-{segment}"))
            .await?;
        within(LIMIT, "the next segment", async {
            loop {
                if later.info().await?.segment == segment {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await??;
    }
    common::status::until_status(
        &later,
        "the last segment waits for go",
        |s| matches!(s, RunStatus::Suspended { waiting_on } if waiting_on.contains("go")),
    )
    .await?;
    let before = [first.records().await?, later.records().await?];
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), PairSwapped).await?;
    for (i, id) in ["acc-pair-0", "acc-pair-2"].into_iter().enumerate() {
        let run = host.handle::<PairSwapped>(id);
        run.signal("go", &(), "go-1").await?;
        let err = within(LIMIT, "the divergence", run.result())
            .await?
            .expect_err("the swapped code diverges");
        let Error::ReplayDivergence {
            index,
            expected,
            found,
        } = &err
        else {
            panic!("{id}: expected a ReplayDivergence, got {err:?}");
        };
        assert!(expected.contains("alpha"), "{id}: {err}");
        assert!(found.contains("beta"), "{id}: {err}");
        let at = before[i]
            .iter()
            .find(|r| r.seq == *index)
            .map(|r| r.event.clone());
        assert!(
            matches!(&at, Some(Event::StepStarted { id, .. } | Event::StepCompleted { id, .. }) if id == "alpha"),
            "{id}: {err}: the record at sequence number {index} is {at:?}"
        );
        match run.status().await? {
            RunStatus::Parked { error } => assert_eq!(error, err.to_string()),
            other => panic!("{id}: expected parked, got {other:?}"),
        }
        let after = run.records().await?;
        assert_eq!(
            after.len(),
            before[i].len() + 1,
            "{id}: only the signal was appended"
        );
        assert_eq!(
            after[..before[i].len()]
                .iter()
                .map(|r| (r.seq, r.event.clone()))
                .collect::<Vec<_>>(),
            before[i]
                .iter()
                .map(|r| (r.seq, r.event.clone()))
                .collect::<Vec<_>>(),
            "{id}: the log is untouched"
        );
    }
    host.shutdown().await?;

    let host = Host::builder()
        .path(dir.path())
        .register(Pair)
        .build()
        .await?;
    for id in ["acc-pair-0", "acc-pair-2"] {
        assert_eq!(
            within(LIMIT, "the fixed run", host.handle::<Pair>(id).result()).await??,
            "1+2",
            "{id}"
        );
    }
    host.shutdown().await?;
    Ok(())
}
