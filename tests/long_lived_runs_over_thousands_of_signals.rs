//! Adversarial tests of long-lived runs: continuing as new every N signals over
//! thousands of signals (bounded segments, `info()` counters, the long-log
//! warning), published values, `watch()` and `result()` across segments, and a
//! clean restart between segments.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::within;
use futures::StreamExt;
use reel::{Ctx, Error, Event, Host, Workflow};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(30);

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Acc {
    seen: u64,
    sum: u64,
}

/// Adds `add` signals, continuing as new every `every` signals, ending at `total`.
#[derive(Clone)]
struct Accumulator {
    every: u64,
    total: u64,
}

impl Workflow for Accumulator {
    const NAME: &'static str = "accumulator";
    type Input = Acc;
    type Output = u64;
    async fn run(&self, ctx: Ctx, mut acc: Acc) -> reel::Result<u64> {
        let segment_start = acc.seen;
        ctx.publish("segment-start", &segment_start).await?;
        loop {
            let n: u64 = ctx.wait_for_signal("add").await?;
            let sum = acc.sum;
            acc.sum = ctx
                .step("apply", move |_| async move { Ok::<_, String>(sum + n) })
                .await?;
            acc.seen += 1;
            ctx.publish("sum", &acc.sum).await?;
            if acc.seen == self.total {
                return Ok(acc.sum);
            }
            if acc.seen - segment_start == self.every {
                return ctx.continue_as_new::<Accumulator>(acc).await;
            }
        }
    }
}

fn zero() -> Acc {
    Acc { seen: 0, sum: 0 }
}

/// Sends signals `from..to` (values 1-based i), `width` at a time.
async fn send(run: &reel::AnyRun, from: u64, to: u64, width: u64) -> reel::Result<()> {
    let mut i = from;
    while i < to {
        let end = (i + width).min(to);
        let sends = (i..end).map(|k| {
            let run = run.clone();
            async move { run.signal("add", &(k + 1), &format!("add-{k}")).await }
        });
        for r in futures::future::join_all(sends).await {
            r?;
        }
        i = end;
    }
    Ok(())
}

/// Waits (bounded polling: there is no wait for a given value) until the run
/// has consumed the signals `0..to`.
async fn consumed(run: &reel::AnyRun, to: u64) -> anyhow::Result<()> {
    let want: u64 = (1..=to).sum();
    within(LIMIT, "signals to be consumed", async {
        loop {
            if run.published::<u64>("sum").await? == Some(want) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_signals_keep_segments_bounded() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let w = Accumulator {
        every: 25,
        total: 3000,
    };
    let host = common::hosts::open(dir.path(), w.clone()).await?;
    let run = host.start::<Accumulator>("acc", zero()).await?;
    // Waiters set up before anything happens.
    let result = tokio::spawn({
        let run = run.clone();
        async move { run.result().await }
    });
    let late_value = tokio::spawn({
        let run = run.clone();
        async move {
            // Published first in segment 0 already; the latest is read later.
            run.wait_published::<u64>("segment-start").await
        }
    });
    let watched = tokio::spawn({
        let run = run.untyped();
        async move {
            let mut seqs = Vec::new();
            let mut kinds = Vec::new();
            let mut stream = Box::pin(run.watch());
            while let Some(item) = stream.next().await {
                let record = item?;
                seqs.push(record.seq);
                kinds.push(record.event.kind().to_owned());
            }
            Ok::<_, reel::Error>((seqs, kinds))
        }
    });
    let mut max_segment_events = 0;
    let mut last_segment = 0;
    for chunk in 0..30u64 {
        send(&run, chunk * 100, (chunk + 1) * 100, 20).await?;
        if chunk < 29 {
            consumed(&run, (chunk + 1) * 100).await?;
            let info = run.info().await?;
            let log = info.log.ok_or_else(|| anyhow::anyhow!("no log size"))?;
            max_segment_events = max_segment_events.max(log.events);
            assert!(info.segment >= last_segment, "segment went back");
            last_segment = info.segment;
        }
    }
    let expected: u64 = (1..=3000).sum();
    assert_eq!(within(LIMIT, "result", result).await???, expected);
    assert_eq!(run.result().await?, expected);
    let info = run.info().await?;
    assert_eq!(info.segment, 3000 / 25 - 1, "{info:?}");
    let log = info.log.ok_or_else(|| anyhow::anyhow!("no log size"))?;
    // A segment is 25 signals, each about 6 events: far below the whole log.
    assert!(log.events <= 25 * 8 + 10, "{log:?}");
    assert!(max_segment_events <= 25 * 8 + 10, "{max_segment_events}");
    assert_eq!(late_value.await??, 0);
    assert_eq!(run.published::<u64>("sum").await?, Some(expected));
    assert_eq!(
        run.published::<u64>("segment-start").await?,
        Some(3000 - 25)
    );
    let events = run.events().await?;
    let cans = events
        .iter()
        .filter(|e| matches!(e, Event::ContinuedAsNew { .. }))
        .count();
    assert_eq!(cans, 3000 / 25 - 1);
    let (seqs, kinds) = within(LIMIT, "watch", watched).await???;
    assert_eq!(seqs.len(), events.len(), "watch saw every record once");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seqs ascend");
    assert_eq!(kinds.last().map(String::as_str), Some("RunCompleted"));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_restarts_between_segments_lose_and_repeat_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let w = Accumulator {
        every: 10,
        total: 400,
    };
    let mut host = common::hosts::open(dir.path(), w.clone()).await?;
    let run = host.start::<Accumulator>("acc", zero()).await?;
    let mut next_seq = 0u64;
    let mut watched = 0usize;
    for round in 0..8u64 {
        let from = round * 50;
        send(&host.run("acc"), from, from + 50, 7).await?;
        // Follow the log from where the last host's watch stopped.
        let mut stream = Box::pin(host.run("acc").watch_from(next_seq));
        let target = host.run("acc").events().await?.len();
        while (next_seq as usize) < target {
            let record = within(LIMIT, "a record", stream.next())
                .await?
                .ok_or_else(|| anyhow::anyhow!("watch ended early"))??;
            assert_eq!(record.seq, next_seq, "no gap, no repeat");
            next_seq += 1;
            watched += 1;
        }
        drop(stream);
        if round < 7 {
            host.shutdown().await?;
            host = common::hosts::open(dir.path(), w.clone()).await?;
        }
    }
    let _ = run;
    let run = host.handle::<Accumulator>("acc");
    let expected: u64 = (1..=400).sum();
    assert_eq!(within(LIMIT, "result", run.result()).await??, expected);
    assert_eq!(run.info().await?.segment, 39);
    // Every `apply` step ran in order: sums strictly grow.
    let events = run.events().await?;
    let applies = events
        .iter()
        .filter(|e| matches!(e, Event::StepCompleted { .. }))
        .count();
    assert_eq!(applies, 400, "one apply per signal, none repeated");
    assert!(watched > 0);
    host.shutdown().await?;
    Ok(())
}

/// `wait_published` for a key first published in a later segment, and `result()`
/// called on a handle made before the run existed.
struct LateKey;

impl Workflow for LateKey {
    const NAME: &'static str = "late-key";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, seg: u32) -> reel::Result<u32> {
        if seg == 3 {
            ctx.publish("late", &"from segment 3").await?;
        }
        let _: String = ctx.wait_for_signal("next").await?;
        if seg == 5 {
            return Ok(seg);
        }
        ctx.continue_as_new::<LateKey>(seg + 1).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_values_and_waiters_span_segments() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), LateKey).await?;
    let run = host.start::<LateKey>("lk", 0).await?;
    let waiter = tokio::spawn({
        let run = run.clone();
        async move { run.wait_published::<String>("late").await }
    });
    let never = tokio::spawn({
        let run = run.clone();
        async move { run.wait_published::<String>("never").await }
    });
    for i in 0..2 {
        run.signal("next", "x", &format!("n{i}")).await?;
    }
    // Still waiting: crossing segments neither answers nor ends the waiters.
    within(LIMIT, "segment 2", async {
        loop {
            if run.info().await?.segment == 2 {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await??;
    assert!(!waiter.is_finished());
    assert!(!never.is_finished());
    run.signal("next", "x", "n2").await?;
    assert_eq!(within(LIMIT, "late", waiter).await???, "from segment 3");
    assert!(!never.is_finished());
    for i in 3..6 {
        run.signal("next", "x", &format!("n{i}")).await?;
    }
    assert_eq!(within(LIMIT, "result", run.result()).await??, 5);
    assert!(matches!(
        within(LIMIT, "never", never).await??,
        Err(Error::RunFinished(_))
    ));
    assert_eq!(
        run.published::<String>("late").await?.as_deref(),
        Some("from segment 3")
    );
    host.shutdown().await?;
    Ok(())
}

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn captured() -> &'static Buf {
    static BUF: OnceLock<Buf> = OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Buf::default();
        let writer = buf.clone();
        let r = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init();
        assert!(r.is_ok(), "{r:?}");
        buf
    })
}

fn warned_about(run_id: &str) -> bool {
    let text = String::from_utf8_lossy(
        &captured()
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
    )
    .into_owned();
    text.lines()
        .any(|l| l.contains("segment is long") && l.contains(run_id))
}

/// The warning is about the current segment: a run that continues as new often
/// enough is never warned about, however long its whole log, also when a host
/// reopens it; one that does not is warned about at least once it is woken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_log_warning_counts_the_segment_not_the_log() -> anyhow::Result<()> {
    captured();
    let dir = tempfile::tempdir()?;
    let open = |w: Accumulator| {
        Host::builder()
            .path(dir.path())
            .register(w)
            .long_log_warning(60)
            .build()
    };
    let bounded = Accumulator {
        every: 5,
        total: 200,
    };
    let host = open(bounded.clone()).await?;
    let run = host.start::<Accumulator>("bounded-run", zero()).await?;
    for k in 0..10 {
        send(&run, k * 10, k * 10 + 10, 10).await?;
        consumed(&run, k * 10 + 10).await?;
    }
    host.shutdown().await?;
    let host = open(bounded).await?;
    let run = host.handle::<Accumulator>("bounded-run");
    for k in 10..20 {
        send(&run, k * 10, k * 10 + 10, 10).await?;
        consumed(&run, k * 10 + 10).await?;
    }
    within(LIMIT, "result", run.result()).await??;
    assert!(run.events().await?.len() > 600);
    host.shutdown().await?;
    assert!(
        !warned_about("bounded-run"),
        "warned about a bounded segment"
    );

    let long = Accumulator {
        every: 1000,
        total: 1000,
    };
    let host = open(long.clone()).await?;
    let run = host.start::<Accumulator>("long-run", zero()).await?;
    send(&run, 0, 40, 10).await?;
    consumed(&run, 40).await?;
    host.shutdown().await?;
    let host = open(long).await?;
    let run = host.handle::<Accumulator>("long-run");
    // Wake it: the execution that begins replays the long segment.
    send(&run, 40, 41, 1).await?;
    consumed(&run, 41).await?;
    host.shutdown().await?;
    assert!(warned_about("long-run"), "no warning for a long segment");
    Ok(())
}

/// "A run whose segment passes long_log_warning events gets a tracing warning"
/// (README, Long-lived runs), also while it stays live: the check runs at each
/// suspension too, not only when an execution begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_log_warning_fires_while_the_segment_grows_live() -> anyhow::Result<()> {
    captured();
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Accumulator {
            every: 1000,
            total: 1000,
        })
        .long_log_warning(60)
        .build()
        .await?;
    let run = host.start::<Accumulator>("live-long-run", zero()).await?;
    send(&run, 0, 40, 10).await?;
    consumed(&run, 40).await?;
    let events = run.info().await?.log.map(|l| l.events).unwrap_or(0);
    assert!(events > 60, "{events}");
    let warned = warned_about("live-long-run");
    host.shutdown().await?;
    assert!(
        warned,
        "no warning for a {events}-event segment of a live run"
    );
    Ok(())
}

/// Publishes in segment 0 right before continuing as new.
struct PublishThenContinue;

impl Workflow for PublishThenContinue {
    const NAME: &'static str = "publish-then-continue";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, seg: u32) -> reel::Result<u32> {
        let _: String = ctx.wait_for_signal("next").await?;
        if seg == 0 {
            ctx.publish("k", &"v").await?;
            return ctx.continue_as_new::<PublishThenContinue>(1).await;
        }
        Ok(seg)
    }
}

/// A caller waiting in `wait_published` is woken by a value published right
/// before `continue_as_new` (it used to wait until the run ended, or for ever,
/// although `published()` already returned the value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_published_right_before_continue_as_new_wakes_its_waiter() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), PublishThenContinue).await?;
    let run = host.start::<PublishThenContinue>("r", 0).await?;
    let waiter = tokio::spawn({
        let run = run.clone();
        async move { run.wait_published::<String>("k").await }
    });
    // Give the waiter time to register (a later one reads the value at once).
    tokio::time::sleep(Duration::from_millis(200)).await;
    run.signal("next", "x", "a").await?;
    within(Duration::from_secs(10), "segment 1", async {
        loop {
            if run.info().await?.segment == 1 {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await??;
    assert_eq!(run.published::<String>("k").await?.as_deref(), Some("v"));
    let got = within(Duration::from_secs(5), "the waiter", waiter).await;
    host.shutdown().await?;
    assert_eq!(got??.map_err(|e| anyhow::anyhow!("{e}"))?, "v");
    Ok(())
}
