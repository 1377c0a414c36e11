//! Replay tests on canned histories (`reel::testing`): every primitive replayed in
//! full and incrementally (every prefix of its log), divergence shown with the
//! original and the changed handler side by side, and a property test that random
//! step/sleep/signal programs recorded by a real host replay to the same outcome.

mod common;

use std::time::Duration;

use common::replay::replay_incrementally;
use futures::future::join;
use proptest::prelude::*;
use reel::testing::{History, Replayed, replay};
use reel::{Ctx, Error, Event, Payload, Workflow};
use serde::{Deserialize, Serialize};

fn payload<T: Serialize>(v: &T) -> Payload {
    Payload(rmp_serde::to_vec_named(v).expect("encode"))
}

#[derive(Clone)]
struct Steps;
impl Workflow for Steps {
    const NAME: &'static str = "steps";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let mut total = n;
        for _ in 0..3 {
            total += ctx
                .step("add", |_| async move { Ok::<_, String>(1u32) })
                .await?;
        }
        Ok(total)
    }
}

#[tokio::test]
async fn steps_replay_from_canned_history_without_running_bodies() -> anyhow::Result<()> {
    // Bodies would return 1; the history says 10, 20, 30: replay must use the log.
    let log = History::start::<Steps>(&5)?
        .step_completed("add", &10u32)?
        .step_completed("add#2", &20u32)?
        .step_completed("add#3", &30u32)?
        .build();
    assert_eq!(
        replay_incrementally(&Steps, &log).await,
        Replayed::Completed(65)
    );
    // A step that failed for good is re-raised on replay.
    let failed = History::start::<Steps>(&5)?
        .step_completed("add", &1u32)?
        .push(Event::StepStarted {
            id: "add#2".into(),
            attempt: 1,
        })
        .push(Event::StepFailed {
            id: "add#2".into(),
            attempt: 1,
            error: "nope".into(),
            retry_at: None,
        })
        .build();
    assert_eq!(
        replay(Steps, &failed).await?,
        Replayed::Failed(Error::Step {
            step: "add#2".into(),
            message: "nope".into()
        })
    );
    Ok(())
}

#[derive(Clone)]
struct Waits;
impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = ();
    type Output = String;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
        ctx.sleep(Duration::from_secs(3600)).await?;
        let a: String = ctx.wait_for_signal("msg").await?;
        let late: Option<String> = ctx
            .wait_for_signal_timeout("msg", Duration::from_secs(1))
            .await?;
        let b: String = ctx.wait_for_signal("msg").await?;
        let ok = ctx.approval("boss").await?;
        let t = ctx.now().await?;
        let r = ctx.random_u64().await?;
        Ok(format!(
            "{a}|{late:?}|{b}|{}|{}|{r}",
            ok.approved,
            t.duration_since(std::time::UNIX_EPOCH)
                .map_err(reel::Error::failed)?
                .as_millis()
        ))
    }
}

#[tokio::test]
async fn waits_and_recorded_values_replay_from_log_order() -> anyhow::Result<()> {
    let log = History::start::<Waits>(&())?
        .timer_fired("timer#1")
        // Buffered before the wait: kept for it.
        .signal("msg", &"first")?
        .push(Event::SignalAwaited {
            id: "signal#1".into(),
            name: "msg".into(),
            deadline: None,
        })
        .push(Event::SignalAwaited {
            id: "signal#2".into(),
            name: "msg".into(),
            deadline: Some(1),
        })
        // The deadline fired before the next signal: the timed wait consumed none.
        .push(Event::TimerFired {
            id: "signal#2".into(),
        })
        .signal("msg", &"second")?
        .push(Event::SignalAwaited {
            id: "signal#3".into(),
            name: "msg".into(),
            deadline: None,
        })
        .push(Event::SignalAwaited {
            id: "approval#1".into(),
            name: "approval:boss".into(),
            deadline: None,
        })
        .push(Event::SignalReceived {
            name: "approval:boss".into(),
            signal_id: "a".into(),
            payload: payload(&reel::Approval {
                approved: true,
                feedback: None,
            }),
        })
        .push(Event::Recorded {
            id: "now#1".into(),
            kind: "now".into(),
            value: payload(&1234u64),
        })
        .push(Event::Recorded {
            id: "random#1".into(),
            kind: "random".into(),
            value: payload(&77u64),
        })
        .build();
    assert_eq!(
        replay_incrementally(&Waits, &log).await,
        Replayed::Completed("first|None|second|true|1234|77".into())
    );
    // The history cut before the timer fired: the handler would wait for it.
    match replay(Waits, &log[..2]).await? {
        Replayed::Pending(what) => assert!(what.contains("timer#1"), "{what}"),
        other => panic!("{other:?}"),
    }
    Ok(())
}

#[derive(Clone)]
struct Concurrent;
impl Workflow for Concurrent {
    const NAME: &'static str = "concurrent";
    type Input = ();
    type Output = (u32, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u32, u32)> {
        // Ids are assigned at the call, in code order, whatever the poll order.
        let (a, b) = join(
            ctx.step("left", |_| async { Ok::<_, String>(1u32) }),
            ctx.step("right", |_| async { Ok::<_, String>(2u32) }),
        )
        .await;
        Ok((a?, b?))
    }
}

#[tokio::test]
async fn joined_steps_replay_whatever_order_their_completions_landed() -> anyhow::Result<()> {
    let log = History::start::<Concurrent>(&())?
        .push(Event::StepStarted {
            id: "left".into(),
            attempt: 1,
        })
        .push(Event::StepStarted {
            id: "right".into(),
            attempt: 1,
        })
        .push(Event::StepCompleted {
            id: "right".into(),
            output: payload(&20u32),
        })
        .push(Event::StepCompleted {
            id: "left".into(),
            output: payload(&10u32),
        })
        .build();
    assert_eq!(
        replay_incrementally(&Concurrent, &log).await,
        Replayed::Completed((10, 20))
    );
    Ok(())
}

/// The original handler and a changed one, side by side.
#[derive(Clone)]
struct Original;
impl Workflow for Original {
    const NAME: &'static str = "ship";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.step("pack", |_| async { Ok::<_, String>(()) }).await?;
        ctx.sleep(Duration::from_secs(60)).await?;
        ctx.step("send", |_| async { Ok::<_, String>(()) }).await?;
        Ok(())
    }
}

#[derive(Clone)]
struct SleepRemoved;
impl Workflow for SleepRemoved {
    const NAME: &'static str = "ship";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.step("pack", |_| async { Ok::<_, String>(()) }).await?;
        ctx.step("send", |_| async { Ok::<_, String>(()) }).await?;
        Ok(())
    }
}

#[derive(Clone)]
struct StepDropped;
impl Workflow for StepDropped {
    const NAME: &'static str = "ship";
    type Input = ();
    type Output = ();
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
        ctx.step("pack", |_| async { Ok::<_, String>(()) }).await?;
        Ok(())
    }
}

#[tokio::test]
async fn changed_handlers_report_the_first_divergent_event() -> anyhow::Result<()> {
    let log = History::start::<Original>(&())?
        .step_completed("pack", &())?
        .timer_fired("timer#1")
        .step_completed("send", &())?
        .build();
    assert_eq!(replay(Original, &log).await?, Replayed::Completed(()));
    assert_eq!(
        replay(SleepRemoved, &log).await,
        Err(Error::ReplayDivergence {
            index: 3,
            expected: "timer `timer#1`".into(),
            found: "called step `send`".into()
        })
    );
    assert_eq!(
        replay(StepDropped, &log).await,
        Err(Error::ReplayDivergence {
            index: 3,
            expected: "timer `timer#1`".into(),
            found: "returned before reaching it".into()
        })
    );
    Ok(())
}

#[derive(Clone, Debug, Serialize, Deserialize)]
enum Op {
    Step(u8),
    Sleep,
    Signal(u8),
    Join,
}

#[derive(Clone)]
struct Program;
impl Workflow for Program {
    const NAME: &'static str = "program";
    type Input = Vec<Op>;
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, ops: Vec<Op>) -> reel::Result<Vec<String>> {
        let mut out = Vec::new();
        for op in ops {
            match op {
                Op::Step(n) => {
                    let v: u32 = ctx
                        .step(&format!("s{n}"), |_| async move {
                            Ok::<_, String>(u32::from(n))
                        })
                        .await?;
                    out.push(format!("step {v}"));
                }
                Op::Sleep => {
                    ctx.sleep(Duration::from_millis(1)).await?;
                    out.push("slept".into());
                }
                Op::Signal(n) => {
                    let v: String = ctx.wait_for_signal(&format!("sig{n}")).await?;
                    out.push(v);
                }
                Op::Join => {
                    let (a, b) = join(
                        ctx.step("j", |_| async { Ok::<_, String>(1u32) }),
                        ctx.sleep(Duration::from_millis(1)),
                    )
                    .await;
                    b?;
                    out.push(format!("joined {}", a?));
                }
            }
        }
        Ok(out)
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3).prop_map(Op::Step),
        Just(Op::Sleep),
        (0u8..2).prop_map(Op::Signal),
        Just(Op::Join),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random interleavings of steps, sleeps and signals, recorded by a real host,
    /// replay to the same outcome in full and never diverge on a prefix.
    #[test]
    fn random_programs_replay_to_the_same_outcome(ops in prop::collection::vec(op(), 1..8)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        rt.block_on(async {
            let dir = tempfile::tempdir()?;
            let host = common::hosts::open(dir.path(), Program).await?;
            let run = host.start::<Program>("p", ops.clone()).await?;
            // Signals may arrive before their wait: they are buffered.
            for (i, op) in ops.iter().enumerate() {
                if let Op::Signal(n) = op {
                    run.signal(&format!("sig{n}"), &format!("signal {i}"), &format!("id-{i}")).await?;
                }
            }
            let live = run.result().await?;
            let log = run.events().await?;
            host.shutdown().await?;
            // The log ends with RunCompleted, which replay does not need.
            let body = &log[..log.len() - 1];
            assert_eq!(replay_incrementally(&Program, body).await, Replayed::Completed(live));
            Ok::<_, anyhow::Error>(())
        }).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}
