//! Differential test of replay (invariants 2 and 3 under concurrency): random handler
//! programs (steps with retries, sleeps, signal waits with and without deadlines,
//! approvals, recorded values, child runs, patches, published values, nested in
//! sequences, joins, unordered joins and selects) run live on a real host, some of
//! them asked to cancel mid-way, then
//!
//! 1. replay their final log with `reel::testing::replay`: same ending (output, or
//!    `Error::Cancelled` with the same reason), the same trace observed, no
//!    divergence (failure kinds `replay-output-differs`, `replay-trace-differs`,
//!    `replay-ending-differs`, `replay-error`);
//! 2. check that every execution of the live run (one per wake-up) observed a prefix
//!    of the final trace: a re-run from the top sees the same interleaving
//!    (`execution-not-prefix`);
//! 3. replay every prefix of that log: never a divergence or an error, and what the
//!    handler observes is a prefix of the live trace (or, once it has ended, the
//!    live ending), as after a crash at that point (`prefix-replay`). This assumes
//!    results are handed to the handler in log order; `REEL_DIFF_PREFIXES=0` turns
//!    the check off for an engine that records the order of delivery some other way;
//! 4. run again on a host shut down and reopened mid-way (one to three times): the
//!    run ends (`hang`, `run-failed`), its status and log agree with its ending
//!    (`status-differs`, `log-end`), and the checks above hold for it too;
//! 5. check that no step id completed twice in a log, and no body whose completion
//!    is recorded ran to completion twice: shutdowns here are graceful
//!    (`step-completed-twice`, `body-rerun`);
//! 6. cancellation: a run ends cancelled only if its case asks it to cancel
//!    (`run-cancelled`; a child when its parent is asked), and completes if its
//!    program returns a value after the cancel (`cancelled-despite-value`). The
//!    request (`RunHandle::request_cancel`) is one more entry of the signal schedule,
//!    sent to both copies of the case. Programs react to it: a `select` may have a
//!    `ctx.cancelled()` branch, `is_cancelled` nodes record `ctx.is_cancelled()`, a
//!    guard runs a cleanup through `ctx.shielded()` when its body ends with
//!    `Error::Cancelled` (then ends or resumes), step bodies stop early on
//!    `StepCtx::cancelled`, and every cancellation error is recorded in the trace
//!    where the handler saw it.
//!
//! 7. continue-as-new: some runs continue as new (`ctx.continue_as_new`) one to
//!    three times, at the end of their program or at a point of its top-level
//!    `seq`; each segment re-runs the program (later ones after a prologue of waits
//!    on a signal the program never waits on, so the first segment's copies of it
//!    are carried over), and the next segment's input carries the trace so far, so
//!    the output is every segment's trace. A replay of the final log replays its
//!    last segment; a prefix that ends in an older segment replays that one and
//!    observes a prefix of the live trace, or continues as new exactly where the
//!    live run did (`Replayed::ContinuedAsNew`: required once the prefix holds the
//!    whole segment). Each segment's signals are those its handler took plus those
//!    carried into the next (`signal-lost`), no signal arrives again in a later
//!    segment unless carried (`signal-doubled`), a segment begins knowing the ids
//!    of exactly the signals its predecessor consumed (`signal-ids-seen`), a
//!    cancel request is carried over (`cancel-lost`), and checks 5 and 1-4 hold
//!    per segment (step ids repeat
//!    across segments; idempotency keys do not).
//!
//! Child runs started by a program get the same checks.
//!
//! The interpreter's output is the *trace* of what its handler observed, in the
//! order it observed it (step results, timers fired, signals received or timed out,
//! which branch of a select won, the completion order of an unordered join, where a
//! cancellation reached it), so any difference in interleaving between live
//! execution and replay shows up as a different trace. A run that ends cancelled
//! has no output: its trace is what its last execution observed, and replays
//! record theirs the same way.
//!
//! Knobs (environment): `REEL_DIFF_CASES` (default 200), `REEL_DIFF_BATCH` (programs
//! run concurrently on one host, default 8), `REEL_DIFF_SEED` (reproduces the
//! generated programs; timing still varies), `REEL_DIFF_KEEP_GOING=1` (run every
//! batch and tally the failures instead of stopping at the first failing batch),
//! `REEL_DIFF_SHRINK_SECS` (time spent shrinking a failure, default 60; 0 = off),
//! `REEL_DIFF_HANG_SECS` (how long a run may take, default 20), `REEL_DIFF_ONLY_SEQ=1`
//! (programs without concurrency: a check of the harness itself),
//! `REEL_DIFF_CANCEL` (percentage of cases asked to cancel, default 35; 0 = none),
//! `REEL_DIFF_CAN` (percentage of cases that continue as new, default 40; 0 =
//! none).
//!
//! Every case runs its program twice, on two hosts at once (one left alone, one shut
//! down and reopened), next to the other programs of its batch; a failure prints the
//! program, its schedule, the log and the seed, then shrinks it. The parts live in
//! `tests/differential/`.

mod differential;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use differential::checks::Failure;
use differential::generate::{Case, case};
use differential::harness::run_batch;
use differential::interp::LIVE_EXECUTIONS;
use differential::shrink::{rng, shrink};
use differential::{HANG, env_u64, lock, stats};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_agrees_with_live_runs_of_random_programs() -> anyhow::Result<()> {
    let cases = env_u64("REEL_DIFF_CASES", 200) as usize;
    let batch = env_u64("REEL_DIFF_BATCH", 8).max(1) as usize;
    let keep_going = std::env::var("REEL_DIFF_KEEP_GOING").is_ok_and(|v| v == "1");
    let shrink_budget = Duration::from_secs(env_u64("REEL_DIFF_SHRINK_SECS", 60));
    let hang = Duration::from_secs(env_u64("REEL_DIFF_HANG_SECS", HANG.as_secs()));
    let seed = env_u64(
        "REEL_DIFF_SEED",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    );
    eprintln!("replay_differential: {cases} cases, batches of {batch}, REEL_DIFF_SEED={seed}");

    let mut runner = TestRunner::new_with_rng(Config::default(), rng(seed));
    let strategy = case();
    let started = Instant::now();
    let mut tally: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut examples: BTreeMap<&'static str, (usize, Case, Failure)> = BTreeMap::new();
    let mut first: Option<(usize, Case, Failure)> = None;
    let mut first_tree = None;
    let mut done = 0;
    while done < cases {
        let n = batch.min(cases - done);
        let mut trees = Vec::with_capacity(n);
        for _ in 0..n {
            trees.push(
                strategy
                    .new_tree(&mut runner)
                    .map_err(|e| anyhow::anyhow!("generating a case: {e}"))?,
            );
        }
        let batch_cases = trees.iter().map(|t| t.current()).collect::<Vec<_>>();
        let verdicts = run_batch(&batch_cases, hang).await?;
        for (i, (verdict, tree)) in verdicts.into_iter().zip(trees).enumerate() {
            if let Err(f) = verdict {
                *tally.entry(f.kind).or_default() += 1;
                examples
                    .entry(f.kind)
                    .or_insert_with(|| (done + i, batch_cases[i].clone(), f.clone()));
                if first.is_none() {
                    first = Some((done + i, batch_cases[i].clone(), f));
                    first_tree = Some(tree);
                }
            }
        }
        done += n;
        if first.is_some() && !keep_going {
            break;
        }
    }
    let elapsed = started.elapsed();
    let executions = lock(&LIVE_EXECUTIONS)
        .values()
        .map(|e| lock(e).len())
        .collect::<Vec<_>>();
    eprintln!(
        "replay_differential: {done} cases in {elapsed:.1?}; {} runs (children included), \
         {} executions; {} host restarts cut {} unfinished runs; {} runs ended cancelled, \
         {} completed after a cancel request; runs whose trace shows a reaction to it: {:?}; \
         {} ContinuedAsNew events, {} of them carrying {} signals in all, {} carried signals \
         taken by a later segment, {} cancel requests carried; {} prefix replays continued as new",
        executions.len(),
        executions.iter().sum::<usize>(),
        stats::RESTARTS.load(Ordering::Relaxed),
        stats::RUNS_CUT.load(Ordering::Relaxed),
        stats::ENDED_CANCELLED.load(Ordering::Relaxed),
        stats::COMPLETED_AFTER_CANCEL.load(Ordering::Relaxed),
        lock(&stats::REACTIONS),
        stats::CONTINUED.load(Ordering::Relaxed),
        stats::CARRIED_SOME.load(Ordering::Relaxed),
        stats::CARRIED.load(Ordering::Relaxed),
        stats::CARRIED_CONSUMED.load(Ordering::Relaxed),
        stats::CANCEL_CARRIED.load(Ordering::Relaxed),
        stats::PREFIX_CONTINUED.load(Ordering::Relaxed),
    );

    if keep_going {
        for (index, case, failure) in examples.values() {
            eprintln!(
                "\nreplay_differential: first {} (case {index}):\n{case}\n{failure}",
                failure.kind
            );
        }
    }
    let (Some((index, case, failure)), Some(tree)) = (first, first_tree) else {
        return Ok(());
    };
    eprintln!(
        "replay_differential: case {index} (REEL_DIFF_SEED={seed}) failed: {failure}\n{case}\nfailures by kind: {tally:?}\nshrinking for up to {shrink_budget:?}..."
    );
    let (small, small_failure, tries) = shrink(tree, failure.clone(), shrink_budget).await?;
    anyhow::bail!(
        "replay differs from live execution.\n\
         seed: REEL_DIFF_SEED={seed}, case {index} of {done}; failures by kind: {tally:?}\n\
         first failure:\n{case}\n{failure}\n\n\
         shrunk ({tries} tries):\n{small}\n{small_failure}"
    )
}
