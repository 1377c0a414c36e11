//! "Same signal id twice = one delivery" holds across `continue_as_new`: a signal
//! the old segment consumed, sent again under the same id (a retried send whose
//! first answer was lost, an at-least-once queue redelivering), is not delivered
//! to the new segment; the new segment begins with the ids the old one consumed
//! (`SignalIdsSeen`). It holds on the live run, after a host restart (the ids are
//! read back from the log), and for a retried `signal_with_start`. The window is
//! one segment: a segment hands on the ids it consumed, not those it was handed.

mod common;

use std::time::Duration;

use common::{until_log, waits_on, within};
use reel::{Ctx, Event, Host, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

/// An account: each `add` signal is applied and the run continues as new with
/// the new balance; an `add` of 0 ends it with the balance.
struct Account;

impl Workflow for Account {
    const NAME: &'static str = "account";
    type Input = u64;
    type Output = u64;
    async fn run(&self, ctx: Ctx, balance: u64) -> reel::Result<u64> {
        let add: u64 = ctx.wait_for_signal("add").await?;
        if add == 0 {
            return Ok(balance);
        }
        ctx.continue_as_new::<Account>(balance + add).await
    }
}

async fn host(dir: &std::path::Path) -> Host {
    Host::builder()
        .path(dir)
        .register(Account)
        .build()
        .await
        .expect("host")
}

/// Waits until the run has continued as new `segments` times and its last
/// segment waits for its signal.
async fn until_segment_waits(host: &Host, id: &str, segments: usize) {
    let run = host.handle::<Account>(id);
    until_log(&run, LIMIT, "the new segment's wait", |events| {
        let ended = events
            .iter()
            .filter(|e| matches!(e, Event::ContinuedAsNew { .. }))
            .count();
        ended == segments && waits_on(events, "add") == segments + 1
    })
    .await
    .expect("the segment waits");
}

fn received(events: &[Event], signal_id: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::SignalReceived { signal_id: s, .. } if s == signal_id))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumed_signal_sent_again_after_continue_as_new_is_not_delivered_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let host = host(dir.path()).await;
    let run = host.start::<Account>("acct-1", 100).await.expect("start");
    run.signal("add", &5u64, "deposit-1")
        .await
        .expect("deposit");
    until_segment_waits(&host, "acct-1", 1).await;

    // The retry of `deposit-1`, on the live run: answered, not delivered.
    run.signal("add", &5u64, "deposit-1")
        .await
        .expect("a retried send is answered");
    let events = run.events().await.expect("events");
    assert_eq!(received(&events, "deposit-1"), 1, "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::SignalIdsSeen { ids } if ids == &["deposit-1"])),
        "the new segment names the id it must not take again: {events:#?}"
    );

    // Across a restart: the new host reads the ids back from the log.
    host.shutdown().await.expect("shutdown");
    let host = self::host(dir.path()).await;
    let run = host.handle::<Account>("acct-1");
    run.signal("add", &5u64, "deposit-1")
        .await
        .expect("a retried send after a restart is answered");
    run.signal("add", &1u64, "deposit-2")
        .await
        .expect("a new deposit");
    until_segment_waits(&host, "acct-1", 2).await;
    run.signal("add", &0u64, "close").await.expect("close");
    let balance = within(LIMIT, "result", run.result())
        .await
        .expect("in time")
        .expect("result");
    assert_eq!(balance, 106, "each deposit applied once");
    let events = run.events().await.expect("events");
    assert_eq!(received(&events, "deposit-1"), 1, "{events:#?}");
    host.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_signal_with_start_after_continue_as_new_is_not_delivered_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let host = host(dir.path()).await;
    let run = host
        .signal_with_start::<Account, _>("acct-2", 10, "add", &7u64, "order-9")
        .await
        .expect("signal_with_start");
    until_segment_waits(&host, "acct-2", 1).await;
    // The same call again (its first answer lost): the run exists, the signal
    // id is known to its new segment.
    host.signal_with_start::<Account, _>("acct-2", 10, "add", &7u64, "order-9")
        .await
        .expect("the retried call is answered");
    run.signal("add", &0u64, "close").await.expect("close");
    let balance = within(LIMIT, "result", run.result())
        .await
        .expect("in time")
        .expect("result");
    assert_eq!(balance, 17, "the order applied once");
    host.shutdown().await.expect("shutdown");
}
