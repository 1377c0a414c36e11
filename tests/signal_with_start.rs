//! `Host::signal_with_start`: the first message to an entity creates it, with the
//! message in the run's first write; later ones reach the live run, the passivated
//! run and a run still waiting on its queue; a retried message with the same id is
//! delivered once; calls racing on one new id create one run and deliver every
//! message; the new run and its signal survive a host restart; a run of another
//! workflow, an ended run, an unregistered workflow and a reserved name are typed
//! errors that change nothing.

use std::time::Duration;

mod common;

use common::cart::{Cart, received};
use reel::{Ctx, Error, Event, Host, QueueOptions, RunStatus, Workflow};

/// Another workflow, to hold an id the cart cannot take.
struct Other;
impl Workflow for Other {
    const NAME: &'static str = "other";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal::<()>("never").await
    }
}

/// A host whose runs stay live while they wait (no passivation during a test).
async fn host(dir: &std::path::Path) -> anyhow::Result<Host> {
    host_passivating_after(dir, Duration::MAX).await
}

async fn host_passivating_after(dir: &std::path::Path, idle: Duration) -> anyhow::Result<Host> {
    Ok(Host::builder()
        .path(dir)
        .register(Cart)
        .register(Other)
        .queue("one-at-a-time", QueueOptions::default().concurrency(1))
        .passivate_after(idle)
        .build()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_message_creates_the_run_with_it_others_reach_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let cart = host
        .signal_with_start::<Cart, _>("cart-1", "ann".into(), "add", "apple", "m-1")
        .await?;
    // The signal is in the run's first write, right behind its start.
    let events = cart.events().await?;
    assert!(matches!(events[0], Event::RunStarted { .. }), "{events:?}");
    assert!(
        matches!(&events[1], Event::SignalReceived { signal_id, .. } if signal_id == "m-1"),
        "{events:?}"
    );
    cart.wait_until_suspended().await?;
    assert_eq!(host.live_runs().await, 1, "the run waits live");
    // A retry of the first message (its answer lost, say) delivers nothing new.
    host.signal_with_start::<Cart, _>("cart-1", "ignored".into(), "add", "apple", "m-1")
        .await?;
    host.signal_with_start::<Cart, _>("cart-1", "ignored".into(), "add", "pear", "m-2")
        .await?;
    host.signal_with_start::<Cart, _>("cart-1", "ignored".into(), "add", "pear", "m-2")
        .await?;
    host.signal_with_start::<Cart, _>("cart-1", "ignored".into(), "add", "checkout", "m-3")
        .await?;
    assert_eq!(
        cart.result().await?,
        ["ann", "apple", "pear"],
        "the input of the call that created it"
    );
    assert_eq!(received(&cart.events().await?), ["m-1", "m-2", "m-3"]);

    // Ended: the id names that run for good.
    let ended = host
        .signal_with_start::<Cart, _>("cart-1", "bob".into(), "add", "fig", "m-4")
        .await;
    assert!(matches!(ended, Err(Error::RunFinished(_))), "{ended:?}");
    assert_eq!(received(&cart.events().await?), ["m-1", "m-2", "m-3"]);
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_reach_a_passivated_run_and_a_run_waiting_on_its_queue() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host_passivating_after(dir.path(), Duration::from_millis(1)).await?;
    let cart = host
        .signal_with_start::<Cart, _>("cart-p", "fay".into(), "add", "kiwi", "m-1")
        .await?;
    cart.wait_until_suspended().await?;
    tokio::time::timeout(Duration::from_secs(30), async {
        while host.live_runs().await > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    host.signal_with_start::<Cart, _>("cart-p", "ignored".into(), "add", "lime", "m-2")
        .await?;
    host.signal_with_start::<Cart, _>("cart-p", "ignored".into(), "add", "checkout", "m-3")
        .await?;
    assert_eq!(cart.result().await?, ["fay", "kiwi", "lime"]);

    // The queue's one slot is taken; the second cart waits for it, enqueued.
    let first = host
        .start_on::<Cart>("one-at-a-time", "cart-q1", "gus".into())
        .await?;
    let queued = host
        .start_on::<Cart>("one-at-a-time", "cart-q2", "hal".into())
        .await?;
    assert_eq!(queued.status().await?, RunStatus::Enqueued);
    host.signal_with_start::<Cart, _>("cart-q2", "ignored".into(), "add", "date", "m-1")
        .await?;
    host.signal_with_start::<Cart, _>("cart-q2", "ignored".into(), "add", "checkout", "m-2")
        .await?;
    assert_eq!(
        queued.status().await?,
        RunStatus::Enqueued,
        "still waiting for the slot"
    );
    first.signal("add", "checkout", "done").await?;
    assert_eq!(first.result().await?, ["gus"]);
    assert_eq!(
        queued.result().await?,
        ["hal", "date"],
        "admitted, it sees both"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_calls_create_one_run_and_deliver_every_message() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = std::sync::Arc::new(host(dir.path()).await?);
    let calls: Vec<_> = (0..16)
        .map(|i| {
            let host = host.clone();
            tokio::spawn(async move {
                host.signal_with_start::<Cart, _>(
                    "cart-race",
                    format!("owner-{i}"),
                    "add",
                    &format!("item-{i}"),
                    &format!("m-{i}"),
                )
                .await
                .map(|_| ())
            })
        })
        .collect();
    for call in calls {
        call.await??;
    }
    let runs = host.runs().await?;
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    let cart = host.handle::<Cart>("cart-race");
    let mut ids = received(&cart.events().await?);
    ids.sort();
    let mut want: Vec<String> = (0..16).map(|i| format!("m-{i}")).collect();
    want.sort();
    assert_eq!(ids, want, "every message delivered once");
    cart.signal("add", "checkout", "done").await?;
    let items = cart.result().await?;
    assert_eq!(items.len(), 17, "the owner and 16 items: {items:?}");
    let host = std::sync::Arc::try_unwrap(host).map_err(|_| anyhow::anyhow!("host shared"))?;
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_created_run_and_its_message_survive_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host1 = host(dir.path()).await?;
    host1
        .signal_with_start::<Cart, _>("cart-2", "cy".into(), "add", "plum", "m-1")
        .await?;
    host1.shutdown().await?;
    let host2 = host(dir.path()).await?;
    let cart = host2
        .signal_with_start::<Cart, _>("cart-2", "ignored".into(), "add", "checkout", "m-2")
        .await?;
    assert_eq!(cart.result().await?, ["cy", "plum"]);
    host2.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_workflow_unregistered_and_reserved_names_are_typed_errors() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host(dir.path()).await?;
    let other = host.start::<Other>("taken", ()).await?;
    let taken = host
        .signal_with_start::<Cart, _>("taken", "dee".into(), "add", "x", "m-1")
        .await;
    assert!(matches!(taken, Err(Error::RunExists { .. })), "{taken:?}");
    assert!(
        received(&other.events().await?).is_empty(),
        "nothing reached the other run"
    );
    assert!(matches!(
        other.status().await?,
        RunStatus::Running | RunStatus::Suspended { .. }
    ));

    struct Unregistered;
    impl Workflow for Unregistered {
        const NAME: &'static str = "unregistered";
        type Input = ();
        type Output = ();
        async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
            Ok(())
        }
    }
    let unknown = host
        .signal_with_start::<Unregistered, _>("u-1", (), "add", "x", "m-1")
        .await;
    assert!(
        matches!(unknown, Err(Error::UnknownWorkflow(_))),
        "{unknown:?}"
    );

    let reserved = host
        .signal_with_start::<Cart, _>("cart-3", "eve".into(), "approval:ship", &true, "m-1")
        .await;
    assert!(
        matches!(reserved, Err(Error::ReservedName(_))),
        "{reserved:?}"
    );
    assert_eq!(
        host.runs().await?.len(),
        1,
        "no run created by a refused call"
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_options_a_new_run_goes_on_its_queue_or_gets_its_timeout() -> anyhow::Result<()> {
    use reel::StartOptions;
    use reel::testing::TestClock;
    const HOUR: Duration = Duration::from_secs(3600);

    let dir = tempfile::tempdir()?;
    let clock = TestClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let host = Host::builder()
        .path(dir.path())
        .clock(clock.clone())
        .register(Cart)
        .queue("one-at-a-time", QueueOptions::default().concurrency(1))
        .build()
        .await?;
    let on_queue = || StartOptions::default().queue("one-at-a-time");

    // Created on the queue: enqueued behind the run holding the slot, with the
    // signal in its first write, and it sees the signal once admitted.
    let first = host
        .start_on::<Cart>("one-at-a-time", "holder", "ida".into())
        .await?;
    let queued = host
        .signal_with_start_with::<Cart, _>("queued", "jan".into(), on_queue(), "add", "fig", "m-1")
        .await?;
    assert_eq!(queued.status().await?, RunStatus::Enqueued);
    assert_eq!(received(&queued.events().await?), ["m-1"]);
    // Existing: the options no longer matter, the signal goes in.
    host.signal_with_start_with::<Cart, _>(
        "queued",
        "ignored".into(),
        StartOptions::default(),
        "add",
        "checkout",
        "m-2",
    )
    .await?;
    first.signal("add", "checkout", "done").await?;
    assert_eq!(first.result().await?, ["ida"]);
    assert_eq!(queued.result().await?, ["jan", "fig"]);
    let unknown = host
        .signal_with_start_with::<Cart, _>(
            "nowhere",
            "kay".into(),
            StartOptions::default().queue("no-such-queue"),
            "add",
            "x",
            "m-1",
        )
        .await;
    assert!(
        matches!(unknown, Err(Error::UnknownQueue(_))),
        "{unknown:?}"
    );

    // Created with a timeout: the deadline cancels it.
    let timed = host
        .signal_with_start_with::<Cart, _>(
            "timed",
            "lou".into(),
            StartOptions::default().timeout(HOUR),
            "add",
            "kiwi",
            "m-1",
        )
        .await?;
    timed.wait_until_suspended().await?;
    clock.advance(2 * HOUR);
    let ended = tokio::time::timeout(Duration::from_secs(30), timed.result()).await?;
    assert!(
        matches!(&ended, Err(Error::Cancelled(reason)) if reason.starts_with("deadline exceeded")),
        "{ended:?}"
    );
    host.shutdown().await?;
    Ok(())
}
