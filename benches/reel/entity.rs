//! Scenario 5, entity: one long-lived run that loops `wait_for_signal` + one
//! step, signalled 10,000 times one after another (each signal waits for the run
//! to be suspended on the next one). Prints ms per signal over the first 100 and the last 100, against
//! two raw insert + fdatasync measured in the same run (a signal costs two durable
//! writes: the signal itself, then the step's result).
//!
//! Each variant is a workflow with the same input and output; another variant (for
//! example one that continues as new every 1,000 signals) is a workflow type and
//! one line in [`entity`].

use std::time::Instant;

use reel::{Ctx, Host, Workflow};

use crate::Config;
use crate::sequential::RawSequential;
use crate::util::*;

/// Signals averaged at each end of the loop.
const WINDOW: usize = 100;

/// Loops `n` times: waits for the signal `tick`, then applies it in one step.
/// Returns the sum of the payloads.
#[derive(Default)]
pub(crate) struct Entity;
impl Workflow for Entity {
    const NAME: &'static str = "bench-entity";
    type Input = u32;
    type Output = u64;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u64> {
        let mut sum = 0u64;
        for _ in 0..n {
            let v: u32 = ctx.wait_for_signal("tick").await?;
            sum += ctx
                .step(
                    "apply",
                    move |_| async move { Ok::<_, String>(u64::from(v)) },
                )
                .await?;
        }
        Ok(sum)
    }
}

/// ms of each signal -> next suspension (the last: -> result) of one run of `W`.
async fn reel_entity<W>(n: u32) -> BenchResult<Vec<f64>>
where
    W: Workflow<Input = u32, Output = u64> + Default,
{
    let dir = temp_dir();
    let host = Host::builder()
        .path(dir.path())
        .register(W::default())
        .build()
        .await?;
    let run = host.start::<W>("entity", n).await?;
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
    let variants: [(&str, Variant); 1] = [("no continue-as-new", |rt, n| {
        rt.block_on(reel_entity::<Entity>(n))
    })];
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
