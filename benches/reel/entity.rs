//! Scenario 5, entity: one long-lived run that loops `wait_for_signal` + one
//! step, signalled 10,000 times one after another (each signal waits for the run
//! to be suspended on the next one). Prints ms per signal over the first 100 and the last 100, against
//! two raw insert + fdatasync measured in the same run (a signal costs two durable
//! writes: the signal itself, then the step's result).
//!
//! Each variant is a workflow with the same input and output: [`Entity`] keeps one
//! log segment for the whole loop, [`ContinuedEntity`] continues as new every
//! 1,000 signals (the target: its last 100 within 1.5x of its first 100).

use std::time::Instant;

use reel::{Ctx, Host, Workflow};
use serde::{Deserialize, Serialize};

use crate::Config;
use crate::sequential::RawSequential;
use crate::util::*;

/// Signals averaged at each end of the loop.
const WINDOW: usize = 100;

/// Signals per log segment of [`ContinuedEntity`].
const PER_SEGMENT: u32 = 1_000;

/// What is left of the loop, and the sum so far.
#[derive(Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Loop {
    left: u32,
    sum: u64,
}

/// One signal of the loop: waits for `tick`, then applies it in one step.
async fn tick(ctx: &Ctx, state: &mut Loop) -> reel::Result<()> {
    let v: u32 = ctx.wait_for_signal("tick").await?;
    state.sum += ctx
        .step(
            "apply",
            move |_| async move { Ok::<_, String>(u64::from(v)) },
        )
        .await?;
    state.left -= 1;
    Ok(())
}

/// Loops `left` times over [`tick`] in one log segment. Returns the sum of the
/// payloads.
#[derive(Default)]
pub(crate) struct Entity;
impl Workflow for Entity {
    const NAME: &'static str = "bench-entity";
    type Input = Loop;
    type Output = u64;
    async fn run(&self, ctx: Ctx, mut state: Loop) -> reel::Result<u64> {
        while state.left > 0 {
            tick(&ctx, &mut state).await?;
        }
        Ok(state.sum)
    }
}

/// [`Entity`] that continues as new every [`PER_SEGMENT`] signals.
#[derive(Default)]
pub(crate) struct ContinuedEntity;
impl Workflow for ContinuedEntity {
    const NAME: &'static str = "bench-entity-continued";
    type Input = Loop;
    type Output = u64;
    async fn run(&self, ctx: Ctx, mut state: Loop) -> reel::Result<u64> {
        for _ in 0..PER_SEGMENT {
            if state.left == 0 {
                return Ok(state.sum);
            }
            tick(&ctx, &mut state).await?;
        }
        ctx.continue_as_new::<ContinuedEntity>(state).await
    }
}

/// ms of each signal -> next suspension (the last: -> result) of one run of `W`.
async fn reel_entity<W>(n: u32) -> BenchResult<Vec<f64>>
where
    W: Workflow<Input = Loop, Output = u64> + Default,
{
    let dir = temp_dir();
    let host = Host::builder()
        .path(dir.path())
        .register(W::default())
        .build()
        .await?;
    let run = host.start::<W>("entity", Loop { left: n, sum: 0 }).await?;
    within(LIMIT, "first suspension", run.wait_until_suspended()).await?;
    let mut times = Vec::with_capacity(n as usize);
    for i in 0..n {
        let start = Instant::now();
        within(
            LIMIT,
            &format!("signal {i}"),
            run.signal("tick", &i, &format!("tick-{i}")),
        )
        .await?;
        if i + 1 < n {
            within(
                LIMIT,
                &format!("suspension after signal {i}"),
                run.wait_until_suspended(),
            )
            .await?;
        } else {
            let sum = within(LIMIT, "result()", run.result()).await?;
            let expected = (0..u64::from(n)).sum::<u64>();
            if sum != expected {
                return Err(format!("entity returned {sum}, expected {expected}").into());
            }
        }
        times.push(ms(start.elapsed()));
    }
    within(LIMIT, "host.shutdown()", host.shutdown()).await?;
    Ok(times)
}

type Variant = fn(&tokio::runtime::Runtime, u32) -> BenchResult<Vec<f64>>;

pub(crate) fn entity(rt: &tokio::runtime::Runtime, cfg: &Config) -> Vec<Row> {
    let variants: [(&str, Variant); 2] = [
        ("one segment", |rt, n| rt.block_on(reel_entity::<Entity>(n))),
        ("continue-as-new every 1,000", |rt, n| {
            rt.block_on(reel_entity::<ContinuedEntity>(n))
        }),
    ];
    variants
        .into_iter()
        .map(|(label, run)| entity_variant(rt, cfg, label, run))
        .collect()
}

fn entity_variant(rt: &tokio::runtime::Runtime, cfg: &Config, label: &str, run: Variant) -> Row {
    let n = cfg.entity_signals;
    println!("\n## entity ({label}): one run looping signal wait + step, {n} signals");
    let target = "last 100 <= 1.5x first 100";
    let scenario = format!("entity loop ({label}), {n} signals, ms/signal");
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let result = (|| {
        let mut raw = RawSequential::open()?;
        let raw_before = raw.round(2 * WINDOW as u32)?;
        let times = run(rt, n)?;
        let raw_after = raw.round(2 * WINDOW as u32)?;
        // Two durable writes per signal.
        let raw_ms = ms(raw_before + raw_after);
        BenchResult::Ok((times, raw_ms))
    })();
    let (times, raw_ms) = match result {
        Ok(v) => v,
        Err(e) => {
            println!("  FAILED: {e}");
            return Row::failed(&scenario, target, &e);
        }
    };
    let w = WINDOW.min(times.len());
    let first = mean(&times[..w]);
    let last = mean(&times[times.len() - w..]);
    let growth = last / first;
    println!(
        "  reel: first {w} signals {first:.3} ms/signal, last {w} {last:.3} ms/signal ({growth:.2}x); mean of all {:.3} ms",
        mean(&times)
    );
    let tenth = (times.len() / 10).max(1);
    println!(
        "  ms/signal by tenth of the loop: {}",
        times
            .chunks(tenth)
            .map(|c| format!("{:.2}", mean(c)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  raw fjall, 2 x (insert + persist(SyncData)): {raw_ms:.3} ms; reel/raw: first {:.2}x, last {:.2}x",
        first / raw_ms,
        last / raw_ms
    );
    Row {
        scenario,
        reel: format!("first {first:.3}, last {last:.3}"),
        raw: format!("{raw_ms:.3} (2 x insert + fdatasync)"),
        ratio: format!(
            "{:.2}x / {:.2}x raw; last/first {growth:.2}x",
            first / raw_ms,
            last / raw_ms
        ),
        target: format!("{target} ({})", verdict(growth <= 1.5)),
    }
}
