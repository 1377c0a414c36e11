//! DESIGN.md's observability contract: `tracing` spans per run and per step, the
//! run's span naming the run id and workflow, each step attempt's span the run id,
//! workflow, step id and attempt. A layer records every span opened in the
//! process; a run whose step fails once shows two step spans, attempts 1 and 2.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reel::{Ctx, RetryPolicy, Workflow};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

/// A span as opened: its name and fields, as text.
#[derive(Debug, Clone)]
struct Opened {
    name: &'static str,
    fields: Vec<(String, String)>,
}

impl Opened {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Opened>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);
impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let mut fields = Vec::new();
        attrs.record(&mut Fields(&mut fields));
        let opened = Opened {
            name: attrs.metadata().name(),
            fields,
        };
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(opened);
    }
}

/// One step whose first attempt fails.
struct Flaky {
    attempts: Arc<AtomicU32>,
}
impl Workflow for Flaky {
    const NAME: &'static str = "flaky";
    type Input = ();
    type Output = u32;
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(1),
            multiplier: 1.0,
        }
    }
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        ctx.step("charge", |s| async move {
            let n = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 1 {
                Err(format!("attempt {} fails", s.attempt()))
            } else {
                Ok(s.attempt())
            }
        })
        .await
    }
}

// One test in this file: the subscriber is process-wide and can be set once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_step_spans_carry_their_ids() -> anyhow::Result<()> {
    let spans = Spans::default();
    tracing::subscriber::set_global_default(Registry::default().with(spans.clone()))?;
    let dir = tempfile::tempdir()?;
    let attempts = Arc::new(AtomicU32::new(0));
    let host = common::hosts::open(
        dir.path(),
        Flaky {
            attempts: attempts.clone(),
        },
    )
    .await?;
    let run = host.start::<Flaky>("order-7", ()).await?;
    assert_eq!(run.result().await?, 2, "the second attempt succeeds");
    host.shutdown().await?;

    let opened = spans.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let of_run = |o: &&Opened| o.field("run_id") == Some("order-7");
    let runs: Vec<&Opened> = opened
        .iter()
        .filter(|o| o.name == "reel.run")
        .filter(of_run)
        .collect();
    assert!(!runs.is_empty(), "no reel.run span for the run: {opened:?}");
    for r in &runs {
        assert_eq!(r.field("workflow"), Some("flaky"), "{r:?}");
    }
    let steps: Vec<&Opened> = opened
        .iter()
        .filter(|o| o.name == "reel.step")
        .filter(of_run)
        .collect();
    let mut seen: Vec<&str> = steps.iter().filter_map(|s| s.field("attempt")).collect();
    seen.sort_unstable();
    assert_eq!(seen, ["1", "2"], "one span per attempt: {steps:?}");
    for s in &steps {
        assert_eq!(s.field("workflow"), Some("flaky"), "{s:?}");
        assert_eq!(s.field("step"), Some("charge"), "{s:?}");
    }
    Ok(())
}
