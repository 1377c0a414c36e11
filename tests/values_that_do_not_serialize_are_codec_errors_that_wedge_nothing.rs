//! A value that does not serialize is a typed error wherever it crosses into the
//! log, and wedges nothing: `Error::Codec`, with nothing recorded, for a child's
//! input (waited for or detached), a run-to-run signal's payload,
//! `continue_as_new`'s input, a signal sent from outside and a start's input; for
//! a step's output (the body has run) the attempt is recorded as failed for good
//! and the handler gets `Error::Step` naming the codec error, as `Ctx::step`
//! documents. The handler catches each error
//! and goes on (it waits for a signal, then completes), also after a host
//! restart that replays the whole log, and the step body that produced the
//! unserializable value does not run again on replay.

mod common;

use std::time::Duration;

use common::{Counter, within};
use reel::{Ctx, Error, Event, Host, RunStatus, Workflow};
use serde::{Deserialize, Serialize, Serializer};

const LIMIT: Duration = Duration::from_secs(20);

/// A value whose serialization always fails.
#[derive(Debug, Deserialize)]
struct Poison(u32);

impl Serialize for Poison {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("poison does not serialize"))
    }
}

/// How a call answered, in a word.
fn kind<T>(r: &reel::Result<T>) -> String {
    match r {
        Ok(_) => "ok".to_owned(),
        Err(Error::Codec(_)) => "codec".to_owned(),
        Err(Error::Step { message, .. }) if message.contains("poison does not serialize") => {
            "step".to_owned()
        }
        Err(e) => format!("other: {e:?}"),
    }
}

/// Never started: its input does not serialize.
struct Kid;
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = Poison;
    type Output = u32;
    async fn run(&self, _: Ctx, p: Poison) -> reel::Result<u32> {
        Ok(p.0)
    }
}

/// Which in-handler entry point [`Crossings`] tries with a value that does not
/// serialize.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
enum Crossing {
    Child,
    DetachedChild,
    Signal,
}

/// Calls one in-handler entry point with a value that does not serialize (the
/// step output is [`BadOutput`]'s), then waits for `go` and runs a step.
struct Crossings {
    after: Counter,
}
impl Workflow for Crossings {
    const NAME: &'static str = "crossings";
    type Input = Crossing;
    type Output = String;
    async fn run(&self, ctx: Ctx, which: Crossing) -> reel::Result<String> {
        let first = match which {
            Crossing::Child => kind(&ctx.child::<Kid>("kid", Poison(2)).await),
            Crossing::DetachedChild => kind(&ctx.start_child::<Kid>("kid-2", Poison(3)).await),
            Crossing::Signal => kind(&ctx.signal("someone", "x", &Poison(4), "s-1").await),
        };
        let go: u32 = ctx.wait_for_signal("go").await?;
        let after = ctx
            .step("after", |_| async {
                self.after.bump();
                Ok::<_, String>(go + 1)
            })
            .await?;
        Ok(format!("{first} after {after}"))
    }
}

/// A step whose body returns a value that does not serialize; the handler
/// catches the error and goes on.
struct BadOutput {
    bodies: Counter,
}
impl Workflow for BadOutput {
    const NAME: &'static str = "bad-output";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let r = ctx
            .step("poisoned", |_| async {
                self.bodies.bump();
                Ok::<_, String>(Poison(1))
            })
            .await;
        let first = kind(&r);
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(format!("{first} {go}"))
    }
}

/// The input of [`HopPoisoned`]: `HopInput(true)` does not serialize.
#[derive(Debug, Deserialize)]
struct HopInput(bool);
impl Serialize for HopInput {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 {
            return Err(serde::ser::Error::custom("poisoned hop input"));
        }
        s.serialize_bool(false)
    }
}

/// Continues as new into itself with an input that does not serialize.
struct HopPoisoned;
impl Workflow for HopPoisoned {
    const NAME: &'static str = "hop-poisoned";
    type Input = HopInput;
    type Output = String;
    async fn run(&self, ctx: Ctx, _: HopInput) -> reel::Result<String> {
        let r = ctx.continue_as_new::<HopPoisoned>(HopInput(true)).await;
        let first = kind(&r);
        let go: u32 = ctx.wait_for_signal("go").await?;
        Ok(format!("{first} {go}"))
    }
}

fn builder(dir: &std::path::Path, after: &Counter, bodies: &Counter) -> reel::HostBuilder {
    Host::builder()
        .path(dir)
        .register(Kid)
        .register(Crossings {
            after: after.clone(),
        })
        .register(BadOutput {
            bodies: bodies.clone(),
        })
        .register(HopPoisoned)
}

async fn suspended_on_go(run: &reel::AnyRun) -> anyhow::Result<()> {
    let status = within(LIMIT, "the wait on go", run.wait_until_suspended()).await??;
    match &status {
        RunStatus::Suspended { waiting_on } => {
            assert!(waiting_on.contains("go"), "{}: {waiting_on}", run.id())
        }
        other => panic!("{}: expected suspended on go, got {other:?}", run.id()),
    }
    Ok(())
}

/// Starts a [`Crossings`] run trying `which`, checks it waits on `go` having
/// recorded nothing for the crossing, restarts the host (every log replays) and
/// checks the run completes with the codec error seen live.
async fn crossing_goes_on_across_a_restart(which: Crossing) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (after, bodies) = (Counter::default(), Counter::default());
    let host = builder(dir.path(), &after, &bodies).build().await?;
    let run = host.start::<Crossings>("x", which).await?;
    suspended_on_go(&run).await?;
    let events = run.events().await?;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::ChildStarted { .. } | Event::StepStarted { .. })),
        "nothing is recorded for a value that does not serialize: {events:?}"
    );
    for id in ["kid", "kid-2"] {
        assert!(
            matches!(host.run(id).status().await, Err(Error::UnknownRun(_))),
            "child `{id}` must not exist"
        );
    }
    host.shutdown().await?;

    let host = builder(dir.path(), &after, &bodies).build().await?;
    let run = host.handle::<Crossings>("x");
    run.signal("go", &41u32, "g-1").await?;
    assert_eq!(
        within(LIMIT, "the result", run.result()).await??,
        "codec after 42",
        "{which:?}"
    );
    assert_eq!(after.get(), 1);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_to_run_signal_payload_that_does_not_serialize_wedges_nothing() -> anyhow::Result<()>
{
    crossing_goes_on_across_a_restart(Crossing::Signal).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_input_that_does_not_serialize_wedges_nothing() -> anyhow::Result<()> {
    crossing_goes_on_across_a_restart(Crossing::Child).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_child_input_that_does_not_serialize_wedges_nothing() -> anyhow::Result<()> {
    crossing_goes_on_across_a_restart(Crossing::DetachedChild).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_signal_and_start_with_unserializable_values_are_codec_errors()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (after, bodies) = (Counter::default(), Counter::default());
    let host = builder(dir.path(), &after, &bodies).build().await?;

    let hop = host.start::<HopPoisoned>("hop", HopInput(false)).await?;
    suspended_on_go(&hop).await?;
    assert_eq!(hop.info().await?.segment, 0, "no new segment began");

    // From outside: a signal payload and a start input that do not serialize.
    let before = hop.events().await?.len();
    assert_eq!(kind(&hop.signal("go", &Poison(5), "g-0").await), "codec");
    assert_eq!(hop.events().await?.len(), before, "nothing recorded");
    assert_eq!(kind(&host.start::<Kid>("kid-3", Poison(6)).await), "codec");
    assert!(matches!(
        host.run("kid-3").status().await,
        Err(Error::UnknownRun(_))
    ));

    // A host restart replays the log: the same answer, nothing wedged.
    host.shutdown().await?;
    let host = builder(dir.path(), &after, &bodies).build().await?;
    let hop = host.handle::<HopPoisoned>("hop");
    hop.signal("go", &7u32, "g-1").await?;
    assert_eq!(within(LIMIT, "the hop", hop.result()).await??, "codec 7");
    assert_eq!(hop.info().await?.segment, 0);
    host.shutdown().await?;
    Ok(())
}

/// The body ran (its effects happened) but its output cannot be recorded: the
/// attempt fails for good, as `Ctx::step` documents, with `Error::Step` naming
/// the codec error, live and on replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_output_that_does_not_serialize_is_a_final_step_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (after, bodies) = (Counter::default(), Counter::default());
    let host = builder(dir.path(), &after, &bodies).build().await?;
    let run = host.start::<BadOutput>("b", ()).await?;
    suspended_on_go(&run).await?;
    host.shutdown().await?;

    let host = builder(dir.path(), &after, &bodies).build().await?;
    let run = host.handle::<BadOutput>("b");
    run.signal("go", &3u32, "g-1").await?;
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(bodies.get(), 1, "the body does not run again on replay");
    assert_eq!(out, "step 3", "Ctx::step documents Error::Step");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_output_that_does_not_serialize_is_final_and_never_rerun() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (after, bodies) = (Counter::default(), Counter::default());
    let host = builder(dir.path(), &after, &bodies).build().await?;
    let run = host.start::<BadOutput>("b", ()).await?;
    suspended_on_go(&run).await?;
    let failed: Vec<_> = run
        .events()
        .await?
        .into_iter()
        .filter(|e| matches!(e, Event::StepFailed { .. }))
        .collect();
    assert_eq!(failed.len(), 1, "one final failure, no retry: {failed:?}");
    assert!(
        matches!(&failed[0], Event::StepFailed { retry_at: None, error, .. } if error.contains("poison does not serialize")),
        "{failed:?}"
    );
    host.shutdown().await?;

    let host = builder(dir.path(), &after, &bodies).build().await?;
    let run = host.handle::<BadOutput>("b");
    run.signal("go", &3u32, "g-1").await?;
    let out = within(LIMIT, "the result", run.result()).await??;
    assert_eq!(bodies.get(), 1, "the body does not run again on replay");
    assert!(out.ends_with(" 3"), "{out}");
    host.shutdown().await?;
    Ok(())
}
