//! Acceptance, ported from peers' own test suites: large payloads where the
//! earlier rounds did not put them: a child's input and output, a signal from one
//! run to another, a cancel or terminate reason, and a step's error message. Each
//! test names the peer test it ports (microsoft/durabletask-dotnet's
//! `LargePayloadTests` run each of these through its payload store; reel keeps
//! them in its log).

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::within;
use reel::testing::TestClock;
use reel::{Ctx, Error, Event, Failure, Host, RunStatus, StepError, Workflow};

const LIMIT: Duration = Duration::from_secs(60);
const KB: usize = 1024;
const MB: usize = 1024 * KB;

/// `len` bytes of ASCII that do not compress.
fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

// ---------------------------------------------------------------------------
// A large child input and a large step output in one flow.
// ---------------------------------------------------------------------------

/// Echoes its input.
struct EchoChild;
impl Workflow for EchoChild {
    const NAME: &'static str = "echo-child";
    type Input = String;
    type Output = String;
    async fn run(&self, _ctx: Ctx, input: String) -> reel::Result<String> {
        Ok(input)
    }
}

/// Calls a child with 2 MB, runs a step producing 3 MB, then waits for `go` and
/// returns both.
struct BigFlow;
impl Workflow for BigFlow {
    const NAME: &'static str = "big-flow";
    type Input = ();
    type Output = (String, String);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(String, String)> {
        let echoed = ctx
            .child::<EchoChild>(&format!("{}/child", ctx.run_id()), noise(1, 2 * MB))
            .await?;
        let produced = ctx
            .step("ProduceBig", |_| async {
                Ok::<_, String>(noise(2, 3 * MB))
            })
            .await?;
        let _: () = ctx.wait_for_signal("go").await?;
        Ok((echoed, produced))
    }
}

/// Ports microsoft/durabletask-dotnet `test/Grpc.IntegrationTests/LargePayloadTests.cs::LargeSubOrchestrationAndActivityOutput`
/// (a 650 KB child input echoed back and an 820 KB activity output), at several
/// MB: both reach the parent byte for byte, live and after a restart that
/// replays them from the log, and the parent's log replays without a host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_child_input_and_step_output_reach_the_parent() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = || async {
        Host::builder()
            .path(dir.path())
            .register(BigFlow)
            .register(EchoChild)
            .build()
            .await
    };
    let host = open().await?;
    let run = host.start::<BigFlow>("big", ()).await?;
    within(LIMIT, "the wait on go", run.wait_until_suspended()).await??;
    host.shutdown().await?;
    let host = open().await?;
    let run = host.handle::<BigFlow>("big");
    run.signal("go", &(), "go-1").await?;
    let (echoed, produced) = within(LIMIT, "the result", run.result()).await??;
    assert!(echoed == noise(1, 2 * MB), "the child's output differs");
    assert!(produced == noise(2, 3 * MB), "the step's output differs");
    let child: String = host.run("big/child").result().await?;
    assert!(child == echoed);
    let replayed = reel::testing::replay_as(BigFlow, "big", &run.events().await?).await?;
    assert!(
        matches!(&replayed, reel::testing::Replayed::Completed((e, p)) if *e == echoed && *p == produced),
        "the log does not replay to the same output"
    );
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A large signal from one run to another.
// ---------------------------------------------------------------------------

/// Returns the payload of its `big` signal.
struct Receiver;
impl Workflow for Receiver {
    const NAME: &'static str = "receiver";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.wait_for_signal("big").await
    }
}

/// Signals run `receiver` with 2 MB, then waits for `go`.
struct Sender;
impl Workflow for Sender {
    const NAME: &'static str = "sender";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.signal("receiver", "big", &noise(3, 2 * MB), "big-1")
            .await?;
        ctx.wait_for_signal("go").await
    }
}

/// Ports microsoft/durabletask-dotnet `LargePayloadTests.cs::LargeExternalEvent`
/// (a 512 KB event payload) with the event sent by another run (Temporal
/// sdk-core `signals.rs::sends_signal_to_other_wf`): 2 MB arrive once, byte for
/// byte, and the sender's replay after a restart does not send them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_signal_from_another_run_arrives_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = || async {
        Host::builder()
            .path(dir.path())
            .register(Receiver)
            .register(Sender)
            .build()
            .await
    };
    let host = open().await?;
    let receiver = host.start::<Receiver>("receiver", ()).await?;
    let sender = host.start::<Sender>("sender", ()).await?;
    let got = within(LIMIT, "the receiver", receiver.result()).await??;
    assert!(got == noise(3, 2 * MB), "the payload differs");
    within(LIMIT, "the sender's wait", sender.wait_until_suspended()).await??;
    host.shutdown().await?;
    let host = open().await?;
    let sender = host.handle::<Sender>("sender");
    sender.signal("go", &(), "go-1").await?;
    within(LIMIT, "the sender", sender.result()).await??;
    let received = host
        .run("receiver")
        .events()
        .await?
        .iter()
        .filter(|e| matches!(e, Event::SignalReceived { .. }))
        .count();
    assert_eq!(received, 1);
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Large cancel and terminate reasons.
// ---------------------------------------------------------------------------

/// Waits for a signal that never comes.
struct Idle;
impl Workflow for Idle {
    const NAME: &'static str = "idle";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.wait_for_signal("never").await
    }
}

/// Waits on an `idle` child.
struct IdleParent;
impl Workflow for IdleParent {
    const NAME: &'static str = "idle-parent";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.child::<Idle>(&format!("{}/kid", ctx.run_id()), ())
            .await
    }
}

async fn until_suspended(host: &Host, id: &str) -> anyhow::Result<()> {
    within(LIMIT, id, async {
        loop {
            if let Ok(RunStatus::Suspended { .. }) = host.run(id).status().await {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?
}

/// Ports microsoft/durabletask-dotnet `LargePayloadTests.cs::LargeTerminateWithPayload`
/// and `SuspendAndResume_Reason_IsExternalizedByClient` (reasons of 650-900 KB):
/// a cancel reason and a terminate reason of 900 KB end the runs with exactly
/// that reason, reach the waited-on child in the README's words ("parent
/// cancelled: …"), and read back the same after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_cancel_and_terminate_reasons_are_kept_whole() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = || async {
        Host::builder()
            .path(dir.path())
            .register(IdleParent)
            .register(Idle)
            .build()
            .await
    };
    let cancel_reason = noise(4, 900 * KB);
    let terminate_reason = noise(5, 900 * KB);
    let host = open().await?;
    let cancelled = host.start::<IdleParent>("cancelled", ()).await?;
    let terminated = host.start::<IdleParent>("terminated", ()).await?;
    until_suspended(&host, "cancelled/kid").await?;
    until_suspended(&host, "terminated/kid").await?;
    within(LIMIT, "the cancel", cancelled.cancel(&cancel_reason)).await??;
    within(
        LIMIT,
        "the terminate",
        terminated.terminate(&terminate_reason),
    )
    .await??;

    let check = |host: Host| {
        let (cancel_reason, terminate_reason) = (cancel_reason.clone(), terminate_reason.clone());
        async move {
            for (id, reason) in [
                ("cancelled", &cancel_reason),
                ("terminated", &terminate_reason),
            ] {
                let r: reel::Result<()> = within(LIMIT, id, host.run(id).result()).await?;
                assert!(
                    matches!(&r, Err(Error::Cancelled(got)) if got == reason),
                    "{id}: the reason differs ({} bytes)",
                    match &r {
                        Err(Error::Cancelled(got)) => got.len(),
                        _ => 0,
                    }
                );
                let kid = format!("{id}/kid");
                let k: reel::Result<()> = within(LIMIT, &kid, host.run(&kid).result()).await?;
                let Err(Error::Cancelled(got)) = &k else {
                    panic!("{kid}: {:?}", k.map_err(|e| e.to_string().len()));
                };
                assert!(got.starts_with("parent cancelled: "), "{kid}");
                assert!(got.ends_with(reason.as_str()), "{kid}: the reason is cut");
            }
            anyhow::Ok(())
        }
    };
    check(host.clone()).await?;
    host.shutdown().await?;
    let host = open().await?;
    check(host.clone()).await?;
    host.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// A large step error.
// ---------------------------------------------------------------------------

/// One step whose every attempt fails with 1 MB of text (the attempt number
/// first), under the default policy of three attempts.
struct BigError;
impl Workflow for BigError {
    const NAME: &'static str = "big-error";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.step("fail", |s| async move {
            Err::<(), _>(StepError::retryable(format!(
                "{}:{}",
                s.attempt(),
                noise(6, MB)
            )))
        })
        .await
    }
}

/// Ports microsoft/durabletask-dotnet `LargePayloadTests.cs` (each large value
/// recorded whole) for a failure's details, as Temporal's
/// `activities.rs::activity_non_retryable_failure_with_error` reads them: three
/// attempts fail with 1 MB each; the run fails with `Error::Step` carrying the
/// last attempt's whole message, its `RunFailed` event records every attempt's
/// message in order, and all of it reads back the same after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_step_error_is_recorded_whole_for_every_attempt() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = TestClock::auto(t0());
    let host = common::hosts::open_on(dir.path(), &clock, BigError).await?;
    let run = host.start::<BigError>("big-error", ()).await?;
    let expected = |n: u32| format!("{n}:{}", noise(6, MB));
    let check = |run: reel::RunHandle<BigError>| {
        let expected = &expected;
        async move {
            let r = within(LIMIT, "the result", run.result()).await?;
            assert!(
                matches!(&r, Err(Error::Step { step, message }) if step == "fail" && *message == expected(3)),
                "the error differs"
            );
            let status = run.status().await?;
            assert!(
                matches!(&status, RunStatus::Failed { error } if error.contains(&expected(3))),
                "the status differs"
            );
            let events = run.events().await?;
            let Some(Event::RunFailed { error }) = events.last() else {
                panic!("no RunFailed last");
            };
            let Failure::Step { attempts, .. } = error else {
                panic!("not a step failure");
            };
            let messages: Vec<bool> = attempts
                .iter()
                .enumerate()
                .map(|(i, a)| a.error == expected(i as u32 + 1))
                .collect();
            assert_eq!(messages, vec![true, true, true]);
            anyhow::Ok(())
        }
    };
    check(run).await?;
    host.shutdown().await?;
    let host = common::hosts::open_on(dir.path(), &clock, BigError).await?;
    check(host.handle::<BigError>("big-error")).await?;
    host.shutdown().await?;
    Ok(())
}
