//! DESIGN.md invariant 1: a step's completion is durable (fsynced) before the
//! handler sees its value. A recorder counts the fjall store's fdatasyncs
//! (`reel_commit_syncs_total`); each step's body notes the count when it runs and
//! the handler notes it again once the step's value reaches it. Nothing else
//! writes in between (one run, no timers), so a completion written without an
//! fdatasync, or the value handed over before the sync, leaves the two equal.
//! (A SIGKILL keeps the page cache, so the kill -9 tests cannot tell a write from
//! an fdatasync; this count can.)

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use reel::{Ctx, Workflow};

static SYNCS: AtomicU64 = AtomicU64::new(0);

struct SyncCounter;
impl CounterFn for SyncCounter {
    fn increment(&self, value: u64) {
        SYNCS.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        SYNCS.fetch_max(value, Ordering::SeqCst);
    }
}

/// Counts `reel_commit_syncs_total`; every other metric goes nowhere.
struct CountSyncs;
impl metrics::Recorder for CountSyncs {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() == reel_storage::metrics::COMMIT_SYNCS {
            Counter::from_arc(Arc::new(SyncCounter))
        } else {
            Counter::noop()
        }
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// (count when the body ran, count when the handler got the value), per step.
type Notes = Arc<Mutex<Vec<(u64, u64)>>>;

struct ThreeSteps(Notes);
impl Workflow for ThreeSteps {
    const NAME: &'static str = "three-steps";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let mut sum = 0;
        for i in 1..=3u32 {
            let (at_body, value) = ctx
                .step("work", |_| async move {
                    Ok::<_, String>((SYNCS.load(Ordering::SeqCst), i))
                })
                .await?;
            let seen = SYNCS.load(Ordering::SeqCst);
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((at_body, seen));
            sum += value;
        }
        Ok(sum)
    }
}

// One test in this file: the recorder is process-wide and can be set once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_step_value_reaches_the_handler_after_an_fdatasync() -> anyhow::Result<()> {
    metrics::set_global_recorder(CountSyncs)?;
    let dir = tempfile::tempdir()?;
    let notes = Notes::default();
    let host = common::hosts::open(dir.path(), ThreeSteps(notes.clone())).await?;
    let run = host.start::<ThreeSteps>("r", ()).await?;
    assert_eq!(run.result().await?, 6);
    host.shutdown().await?;
    let notes = notes.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        notes.len(),
        3,
        "one note per step, one execution: {notes:?}"
    );
    for (i, (at_body, seen)) in notes.iter().enumerate() {
        assert!(
            seen > at_body,
            "step {}: no fdatasync between its body ({at_body}) and its value reaching the handler ({seen})",
            i + 1
        );
    }
    Ok(())
}
