//! Values a run publishes with `ctx.publish`, read from outside with
//! `RunHandle::published` and `RunHandle::wait_published`: the latest value under
//! a key wins; a wait started before the value is published returns it when it
//! lands, one started after returns at once; values are durable across a host
//! restart and are not recorded again by replay; a run that ends without the key
//! answers `RunFinished`; an unknown run `UnknownRun`; a value of the wrong type
//! `Codec`; an unserializable value is a `Codec` error that records nothing;
//! shutting the host down ends a wait with `Shutdown`; on canned histories a
//! publish is matched by its key at its position.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Error, Event, Host, Workflow};
use serde::{Serialize, Serializer};

const LIMIT: Duration = Duration::from_secs(10);

/// Publishes its stages; waits for `go` between "paid" and "packed", and for
/// `done` before it returns.
struct Order;
impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.publish("stage", "paid").await?;
        let _: () = ctx.wait_for_signal("go").await?;
        ctx.publish("stage", "packed").await?;
        ctx.publish("stage", "shipped").await?;
        ctx.publish("tracking", &42u32).await?;
        let _: () = ctx.wait_for_signal("done").await?;
        Ok("delivered".into())
    }
}

/// Publishes nothing.
struct Quiet;
impl Workflow for Quiet {
    const NAME: &'static str = "quiet";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal("done").await
    }
}

/// A value whose serialization fails.
struct Unserializable;
impl Serialize for Unserializable {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("this value cannot be serialized"))
    }
}

/// Tries to publish an unserializable value, then goes on.
struct Careless;
impl Workflow for Careless {
    const NAME: &'static str = "careless";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        let failed = ctx.publish("bad", &Unserializable).await;
        ctx.publish("good", "ok").await?;
        let _: () = ctx.wait_for_signal("done").await?;
        Ok(format!("{failed:?}"))
    }
}

async fn host(dir: &std::path::Path) -> reel::Result<Host> {
    Host::builder()
        .path(dir)
        .register(Order)
        .register(Quiet)
        .register(Careless)
        .build()
        .await
}

fn published(events: &[Event]) -> Vec<(String, reel::Payload)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Published { key, value } => Some((key.clone(), value.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_value_wins_and_a_wait_returns_when_it_lands() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<Order>("o-1", ()).await?;
    run.wait_until_suspended().await?;
    assert_eq!(run.published::<String>("stage").await?, Some("paid".into()));
    assert_eq!(run.published::<u32>("tracking").await?, None);

    // Waiting before "tracking" is published: still waiting while the run waits
    // for its signal (the bounded wait is expected to run out), then answered when
    // the value lands.
    let mut tracking = Box::pin(run.wait_published::<u32>("tracking"));
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut tracking)
            .await
            .is_err(),
        "answered before anything was published"
    );
    run.signal("go", &(), "go-1").await?;
    assert_eq!(within(LIMIT, "the tracking number", tracking).await??, 42);

    // Waiting after: at once, the latest value.
    run.wait_until_suspended().await?;
    assert_eq!(run.wait_published::<String>("stage").await?, "shipped");
    assert_eq!(
        run.published::<String>("stage").await?,
        Some("shipped".into())
    );

    // A value of another type is a codec error.
    assert!(matches!(
        run.published::<u32>("stage").await,
        Err(Error::Codec(_))
    ));
    assert!(matches!(
        run.wait_published::<u32>("stage").await,
        Err(Error::Codec(_))
    ));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_survive_a_restart_and_replay_does_not_record_them_twice() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host1 = host(dir.path()).await?;
    let run = host1.start::<Order>("o-2", ()).await?;
    run.wait_until_suspended().await?;
    run.signal("go", &(), "go-1").await?;
    within(
        LIMIT,
        "the tracking number",
        run.wait_published::<u32>("tracking"),
    )
    .await??;
    run.wait_until_suspended().await?;
    host1.shutdown().await?;

    let host2 = host(dir.path()).await?;
    let run = host2.handle::<Order>("o-2");
    assert_eq!(
        run.published::<String>("stage").await?,
        Some("shipped".into())
    );
    assert_eq!(run.wait_published::<u32>("tracking").await?, 42);
    // Waking the run replays it past its four publishes.
    run.signal("done", &(), "done-1").await?;
    assert_eq!(run.result().await?, "delivered");
    let events = run.events().await?;
    let keys: Vec<String> = published(&events).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["stage", "stage", "stage", "tracking"]);
    // A finished run's values stay readable.
    assert_eq!(
        run.published::<String>("stage").await?,
        Some("shipped".into())
    );
    host2.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ends_without_the_key_answers_run_finished() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let run = host.start::<Quiet>("q-1", ()).await?;
    run.wait_until_suspended().await?;

    // A wait under way when the run ends is told so.
    let mut waiting = Box::pin(run.wait_published::<String>("stage"));
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut waiting)
            .await
            .is_err()
    );
    run.signal("done", &(), "done-1").await?;
    assert_eq!(
        within(LIMIT, "the end of the run", waiting).await?,
        Err(Error::RunFinished("q-1".into()))
    );
    // And one started afterwards at once.
    assert_eq!(
        run.wait_published::<String>("stage").await,
        Err(Error::RunFinished("q-1".into()))
    );
    assert_eq!(run.published::<String>("stage").await?, None);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_runs_and_shutdown_are_errors() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let nobody = host.handle::<Order>("nobody");
    assert_eq!(
        nobody.published::<String>("stage").await,
        Err(Error::UnknownRun("nobody".into()))
    );
    assert_eq!(
        nobody.wait_published::<String>("stage").await,
        Err(Error::UnknownRun("nobody".into()))
    );

    let run = host.start::<Quiet>("q-2", ()).await?;
    run.wait_until_suspended().await?;
    let mut waiting = Box::pin(run.wait_published::<String>("stage"));
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut waiting)
            .await
            .is_err()
    );
    host.shutdown().await?;
    assert_eq!(
        within(LIMIT, "the wait to end", waiting).await?,
        Err(Error::Shutdown)
    );
    assert_eq!(
        run.wait_published::<String>("stage").await,
        Err(Error::Shutdown)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unserializable_value_records_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host1 = host(dir.path()).await?;
    let run = host1.start::<Careless>("c-1", ()).await?;
    run.wait_until_suspended().await?;
    assert_eq!(run.published::<String>("good").await?, Some("ok".into()));
    assert_eq!(run.published::<String>("bad").await?, None);
    host1.shutdown().await?;

    // The log stays consistent: a replay gets the same error at the same point and
    // matches what follows.
    let host2 = host(dir.path()).await?;
    let run = host2.handle::<Careless>("c-1");
    run.signal("done", &(), "done-1").await?;
    let out = run.result().await?;
    assert!(
        out.contains("Codec") && out.contains("cannot be serialized"),
        "{out}"
    );
    let keys: Vec<String> = published(&run.events().await?)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["good"]);
    host2.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn canned_histories_match_publishes_by_key() -> anyhow::Result<()> {
    use reel::testing::{History, Replayed, replay};

    #[derive(Clone)]
    struct Stages;
    impl Workflow for Stages {
        const NAME: &'static str = "stages";
        type Input = ();
        type Output = u32;
        async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
            ctx.publish("stage", "paid").await?;
            let n: u32 = ctx
                .step("pack", |_| async { Ok::<_, String>(2u32) })
                .await?;
            ctx.publish("stage", "packed").await?;
            Ok(n)
        }
    }
    let full = History::start::<Stages>(&())?
        .published("stage", "paid")?
        .step_completed("pack", &2u32)?
        .published("stage", "packed")?
        .build();
    assert_eq!(replay(Stages, &full).await?, Replayed::Completed(2));
    // Every prefix: the next publish is what the handler would do next.
    assert_eq!(
        replay(Stages, &full[..1]).await?,
        Replayed::Pending("publish `stage`".into())
    );
    assert_eq!(
        replay(Stages, &full[..4]).await?,
        Replayed::Pending("publish `stage`".into())
    );
    // Another key at that position diverges.
    let other = History::start::<Stages>(&())?
        .published("status", "paid")?
        .build();
    assert_eq!(
        replay(Stages, &other).await,
        Err(Error::ReplayDivergence {
            index: 1,
            expected: "published value `status`".into(),
            found: "called published value `stage`".into()
        })
    );
    Ok(())
}
