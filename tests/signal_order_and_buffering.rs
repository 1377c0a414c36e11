//! Adversarial signal tests: bursts, ordering, buffering, duplicate ids, two waits
//! on one name, undecodable payloads, timed waits with a signal already buffered.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Host, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Waits for `n` signals named "x", in order, and returns them.
struct Collect;
impl Workflow for Collect {
    const NAME: &'static str = "collect";
    type Input = u32;
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<u32>> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(ctx.wait_for_signal::<u32>("x").await?);
        }
        Ok(out)
    }
}

/// Like `Collect` but does a step between waits (so it re-suspends each time).
struct CollectWithSteps;
impl Workflow for CollectWithSteps {
    const NAME: &'static str = "collect-steps";
    type Input = u32;
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Vec<u32>> {
        let mut out = Vec::new();
        for _ in 0..n {
            let v = ctx.wait_for_signal::<u32>("x").await?;
            let v = ctx
                .step("apply", move |_| async move { Ok::<_, String>(v) })
                .await?;
            out.push(v);
        }
        Ok(out)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_signals_before_any_wait_arrives_in_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Collect).await?;
    let run = host.start::<Collect>("burst", 200).await?;
    for i in 0..200u32 {
        run.signal("x", &i, &format!("s-{i}")).await?;
    }
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got, (0..200).collect::<Vec<_>>());
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_senders_each_keep_their_own_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Collect).await?;
    let run = host.start::<Collect>("concurrent", 200).await?;
    let mut tasks = Vec::new();
    for sender in 0..4u32 {
        let run = run.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50u32 {
                let v = sender * 1000 + i;
                run.signal("x", &v, &format!("s-{v}")).await?;
            }
            Ok::<(), reel::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got.len(), 200);
    for sender in 0..4u32 {
        let mine: Vec<u32> = got.iter().copied().filter(|v| v / 1000 == sender).collect();
        assert_eq!(mine, (0..50).map(|i| sender * 1000 + i).collect::<Vec<_>>());
    }
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_interleaved_with_steps_and_passivation_keep_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .passivate_after(Duration::from_millis(1))
        .register(CollectWithSteps)
        .build()
        .await?;
    let run = host.start::<CollectWithSteps>("passive", 30).await?;
    for i in 0..30u32 {
        if i % 3 == 0 {
            run.wait_until_suspended().await?;
        }
        run.signal("x", &i, &format!("s-{i}")).await?;
    }
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got, (0..30).collect::<Vec<_>>());
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_signal_ids_in_a_burst_deliver_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Collect).await?;
    let run = host.start::<Collect>("dups", 3).await?;
    run.signal("x", &1u32, "a").await?;
    run.signal("x", &99u32, "a").await?; // a retry of "a" with another body: dropped
    run.signal("x", &2u32, "b").await?;
    run.signal("x", &1u32, "a").await?;
    run.signal("x", &3u32, "c").await?;
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got, vec![1, 2, 3]);
    let received = run
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, Event::SignalReceived { .. }))
        .count();
    assert_eq!(received, 3);
    host.shutdown().await?;
    Ok(())
}

/// Two waits on one name, called in one `join!`: the first called gets the first
/// signal.
struct TwoWaits;
impl Workflow for TwoWaits {
    const NAME: &'static str = "two-waits";
    type Input = ();
    type Output = (String, String);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(String, String)> {
        let a = ctx.wait_for_signal::<String>("go");
        let b = ctx.wait_for_signal::<String>("go");
        let (b, a) = futures::join!(b, a); // polled in the other order on purpose
        Ok((a?, b?))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_waits_on_one_name_take_signals_in_call_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let host = common::hosts::open(&path, TwoWaits).await?;
    let run = host.start::<TwoWaits>("two", ()).await?;
    run.wait_until_suspended().await?;
    run.signal("go", "first", "1").await?;
    run.signal("go", "second", "2").await?;
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got, ("first".to_owned(), "second".to_owned()));

    // Buffered before both waits: same answer.
    let run2 = host.start::<TwoWaits>("two-buffered", ()).await?;
    run2.signal("go", "first", "1").await?;
    run2.signal("go", "second", "2").await?;
    let got = within(LIMIT, "result", run2.result()).await??;
    assert_eq!(got, ("first".to_owned(), "second".to_owned()));
    host.shutdown().await?;

    // Replay of the finished logs gives the same result.
    let events = run.events().await;
    assert!(
        events.is_err(),
        "handle of a shut-down host answers an error"
    );
    let host = common::hosts::open(&path, TwoWaits).await?;
    let events = host.handle::<TwoWaits>("two").events().await?;
    let replayed = reel::testing::replay(TwoWaits, &events).await?;
    assert_eq!(
        replayed,
        reel::testing::Replayed::Completed(("first".to_owned(), "second".to_owned()))
    );
    host.shutdown().await?;
    Ok(())
}

/// A wait whose payload does not decode gets a `Codec` error; the signal is
/// consumed, and the next wait gets the next signal.
struct Tolerant;
impl Workflow for Tolerant {
    const NAME: &'static str = "tolerant";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let mut out = Vec::new();
        for _ in 0..3 {
            match ctx.wait_for_signal::<u32>("n").await {
                Ok(n) => out.push(format!("ok {n}")),
                Err(Error::Codec(_)) => out.push("bad".to_owned()),
                Err(e) => return Err(e),
            }
            ctx.step("tick", |_| async { Ok::<_, String>(()) }).await?;
        }
        Ok(out)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_signal_is_consumed_and_replays_the_same() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let host = common::hosts::open(&path, Tolerant).await?;
    let run = host.start::<Tolerant>("tol", ()).await?;
    run.signal("n", &1u32, "1").await?;
    run.signal("n", "oops", "2").await?;
    run.wait_until_suspended().await?;
    host.shutdown().await?;

    let host = common::hosts::open(&path, Tolerant).await?;
    let run = host.handle::<Tolerant>("tol");
    run.signal("n", &3u32, "3").await?;
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got, vec!["ok 1", "bad", "ok 3"]);
    host.shutdown().await?;
    Ok(())
}

/// A timed wait called when the signal is already in the log.
struct Buffered;
impl Workflow for Buffered {
    const NAME: &'static str = "buffered";
    type Input = u64;
    type Output = Option<String>;
    async fn run(&self, ctx: Ctx, timeout_ms: u64) -> reel::Result<Option<String>> {
        // Wait until the test says the signal is in (a first, untimed signal).
        let _: () = ctx.wait_for_signal("ready").await?;
        ctx.wait_for_signal_timeout::<String>("v", Duration::from_millis(timeout_ms))
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_signal_beats_a_zero_timeout() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_on(dir.path(), &TestClock::new(t0()), Buffered).await?;
    for timeout in [0u64, 1, 1000] {
        let run = host
            .start::<Buffered>(&format!("b-{timeout}"), timeout)
            .await?;
        run.signal("v", "here", "v").await?;
        run.signal("ready", &(), "r").await?;
        let got = within(LIMIT, "result", run.result()).await??;
        assert_eq!(got.as_deref(), Some("here"), "timeout {timeout} ms");
    }
    host.shutdown().await?;
    Ok(())
}

/// A timed wait that times out leaves the signal for the next, even with a
/// zero timeout.
struct ZeroThenWait;
impl Workflow for ZeroThenWait {
    const NAME: &'static str = "zero-then-wait";
    type Input = ();
    type Output = (Option<u32>, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(Option<u32>, u32)> {
        let first = ctx
            .wait_for_signal_timeout::<u32>("v", Duration::ZERO)
            .await?;
        let second = ctx.wait_for_signal::<u32>("v").await?;
        Ok((first, second))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_timeout_with_nothing_buffered_times_out_and_consumes_nothing() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open_on(dir.path(), &TestClock::new(t0()), ZeroThenWait).await?;
    let run = host.start::<ZeroThenWait>("z", ()).await?;
    // A zero deadline is a timer like any other: the run suspends and the timer
    // service fires it. Send the signal once the deadline is in the log.
    common::until_log(&run, LIMIT, "the zero deadline", |e| {
        e.iter().any(|e| matches!(e, Event::TimerFired { .. }))
    })
    .await?;
    run.signal("v", &7u32, "7").await?;
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got, (None, 7));
    host.shutdown().await?;
    Ok(())
}

/// Signals of other names do not disturb a wait, and stay for later waits.
struct Names;
impl Workflow for Names {
    const NAME: &'static str = "names";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let a: String = ctx.wait_for_signal("a").await?;
        let b: String = ctx.wait_for_signal("b").await?;
        let a2: String = ctx.wait_for_signal("a").await?;
        let c: String = ctx.wait_for_signal("").await?; // empty name
        Ok(vec![a, b, a2, c])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_route_by_name_whatever_the_send_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Names).await?;
    let run = host.start::<Names>("n", ()).await?;
    run.signal("", "empty", "0").await?;
    run.signal("a", "a1", "1").await?;
    run.signal("a", "a2", "2").await?;
    run.wait_until_suspended().await?;
    run.signal("b", "b1", "3").await?;
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got, vec!["a1", "b1", "a2", "empty"]);
    host.shutdown().await?;
    Ok(())
}

/// Waits for "ready", then takes one "x".
struct ReadyOne;
impl Workflow for ReadyOne {
    const NAME: &'static str = "ready-one";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let _: () = ctx.wait_for_signal("ready").await?;
        ctx.wait_for_signal("x").await
    }
}

/// A signal sent to a run that finished while signals were still buffered and
/// unconsumed is refused; the unconsumed ones do not change the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_to_a_finished_run_with_leftover_signals_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), ReadyOne).await?;
    let run = host.start::<ReadyOne>("left", ()).await?;
    run.signal("x", &1u32, "1").await?;
    run.signal("x", &2u32, "2").await?;
    run.signal("ready", &(), "r").await?;
    assert_eq!(within(LIMIT, "result", run.result()).await??, 1);
    assert_eq!(
        run.signal("x", &3u32, "3").await,
        Err(Error::RunFinished("left".into()))
    );
    // Re-sending an id that was delivered: still refused as finished, not Ok.
    assert_eq!(
        run.signal("x", &1u32, "1").await,
        Err(Error::RunFinished("left".into()))
    );
    host.shutdown().await?;
    Ok(())
}

/// Large payloads: a 4 MiB signal and a 4 MiB step output.
struct Big;
impl Workflow for Big {
    const NAME: &'static str = "big";
    type Input = ();
    type Output = usize;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<usize> {
        let v: Vec<u8> = ctx.wait_for_signal("blob").await?;
        let w: Vec<u8> = ctx
            .step("grow", |_| {
                let v = v.clone();
                async move {
                    let mut v = v;
                    v.extend(std::iter::repeat_n(7u8, 4 << 20));
                    Ok::<_, String>(v)
                }
            })
            .await?;
        ctx.sleep(Duration::from_millis(1)).await?;
        assert!(w[..v.len()] == v[..]);
        Ok(w.len())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_megabyte_payloads_survive_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(&path, &clock, Big).await?;
    let run = host.start::<Big>("big", ()).await?;
    let blob: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    run.signal("blob", &blob, "b").await?;
    run.wait_until_suspended().await?;
    host.shutdown().await?;
    clock.advance(Duration::from_secs(1));
    let host = common::hosts::open_on(&path, &clock, Big).await?;
    let got = within(LIMIT, "result", host.handle::<Big>("big").result()).await??;
    assert_eq!(got, 8 << 20);
    host.shutdown().await?;
    Ok(())
}

/// Drains every buffered signal with zero-timeout waits (a common "poll the
/// inbox" pattern), then reports how many it got.
struct Drain;
impl Workflow for Drain {
    const NAME: &'static str = "drain";
    type Input = ();
    type Output = Vec<u32>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<u32>> {
        let _: () = ctx.wait_for_signal("ready").await?;
        let mut got = Vec::new();
        while let Some(v) = ctx
            .wait_for_signal_timeout::<u32>("v", Duration::ZERO)
            .await?
        {
            got.push(v);
        }
        Ok(got)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_timeout_waits_drain_a_buffer_in_order_and_stop_when_empty() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let clock = TestClock::new(t0());
    let host = common::hosts::open_on(&path, &clock, Drain).await?;
    let run = host.start::<Drain>("d", ()).await?;
    for i in 0..20u32 {
        run.signal("v", &i, &format!("v-{i}")).await?;
    }
    run.signal("ready", &(), "r").await?;
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got, (0..20).collect::<Vec<_>>());
    host.shutdown().await?;
    let host = common::hosts::open_on(&path, &clock, Drain).await?;
    let events = host.handle::<Drain>("d").events().await?;
    assert_eq!(
        reel::testing::replay(Drain, &events).await?,
        reel::testing::Replayed::Completed((0..20).collect())
    );
    host.shutdown().await?;
    Ok(())
}

/// Several approvals of one name sent in a burst: the k-th wait gets the k-th.
struct Approvals;
impl Workflow for Approvals {
    const NAME: &'static str = "approvals";
    type Input = ();
    type Output = Vec<(bool, Option<String>)>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<(bool, Option<String>)>> {
        let mut out = Vec::new();
        for _ in 0..3 {
            let a = ctx.approval("ship").await?;
            out.push((a.approved, a.feedback));
        }
        Ok(out)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_of_one_name_in_a_burst_arrive_in_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Approvals).await?;
    let run = host.start::<Approvals>("a", ()).await?;
    run.approve("ship", false, Some("no".into())).await?;
    run.approve("ship", true, None).await?;
    run.approve("ship", true, Some("yes".into())).await?;
    assert_eq!(
        within(LIMIT, "result", run.result()).await??,
        vec![
            (false, Some("no".to_owned())),
            (true, None),
            (true, Some("yes".to_owned()))
        ]
    );
    host.shutdown().await?;
    Ok(())
}

/// Fifty waits on one name in a FuturesUnordered: the k-th called gets the k-th
/// signal, live and after a restart.
struct ManyWaits;
impl Workflow for ManyWaits {
    const NAME: &'static str = "many-waits";
    type Input = ();
    type Output = Vec<(u32, u32)>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<(u32, u32)>> {
        use futures::StreamExt;
        let mut all = futures::stream::FuturesUnordered::new();
        for k in 0..50u32 {
            let w = ctx.wait_for_signal::<u32>("v");
            all.push(async move { w.await.map(|v| (k, v)) });
        }
        let mut out = Vec::new();
        while let Some(r) = all.next().await {
            out.push(r?);
        }
        out.sort();
        Ok(out)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_waits_on_one_name_take_signals_in_call_order() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let host = common::hosts::open(&path, ManyWaits).await?;
    let run = host.start::<ManyWaits>("mw", ()).await?;
    for i in 0..20u32 {
        run.signal("v", &(i + 100), &format!("v-{i}")).await?;
    }
    run.wait_until_suspended().await?;
    host.shutdown().await?;
    let host = common::hosts::open(&path, ManyWaits).await?;
    let run = host.handle::<ManyWaits>("mw");
    for i in 20..50u32 {
        run.signal("v", &(i + 100), &format!("v-{i}")).await?;
    }
    let got = within(LIMIT, "result", run.result()).await??;
    assert_eq!(got, (0..50u32).map(|k| (k, k + 100)).collect::<Vec<_>>());
    host.shutdown().await?;
    Ok(())
}

/// A multi-megabyte input and output.
struct Echo;
impl Workflow for Echo {
    const NAME: &'static str = "echo";
    type Input = Vec<u8>;
    type Output = Vec<u8>;
    async fn run(&self, ctx: Ctx, input: Vec<u8>) -> reel::Result<Vec<u8>> {
        let _: () = ctx.wait_for_signal("go").await?;
        Ok(input.into_iter().rev().collect())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_megabyte_input_and_output() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s");
    let input: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 253) as u8).collect();
    let host = common::hosts::open(&path, Echo).await?;
    host.start::<Echo>("e", input.clone())
        .await?
        .wait_until_suspended()
        .await?;
    host.shutdown().await?;
    let host = common::hosts::open(&path, Echo).await?;
    let run = host.handle::<Echo>("e");
    run.signal("go", &(), "g").await?;
    let out = within(LIMIT, "result", run.result()).await??;
    assert_eq!(out.len(), input.len());
    assert!(out.iter().rev().eq(input.iter()));
    host.shutdown().await?;
    Ok(())
}
