//! What must hold of a finished run: its live executions, its log and the replays
//! of that log agree.

use std::collections::BTreeMap;
use std::fmt;

use reel::testing::{Replayed, replay};
use reel::{Error, Event};

use std::sync::atomic::Ordering;

use super::carried::{Segment, check_signals, segments};
use super::interp::{BODY_COMPLETIONS, Executions, Interp, executions_of, last_trace};
use super::program::begins;
use super::{HANG, lock, stats};

/// A property that did not hold, with what shows it.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    pub(crate) kind: &'static str,
    pub(crate) detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.kind, self.detail)
    }
}

pub(crate) fn fail(kind: &'static str, detail: String) -> Failure {
    Failure { kind, detail }
}

/// How a live run ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ending {
    /// With this output (the handler's trace).
    Completed(Vec<String>),
    /// Cancelled, with this reason.
    Cancelled(String),
}

/// What a replay of a log must show: `Some(ending)` for the whole log (as live),
/// `None` for a prefix (a prefix of the live trace, or the live ending).
fn agrees(
    r: &Replayed<Vec<String>>,
    seen: &[String],
    ending: &Ending,
    trace: &[String],
    whole: bool,
) -> bool {
    match (r, ending) {
        (Replayed::Pending(_), _) => !whole && trace.starts_with(seen),
        (Replayed::Completed(o), Ending::Completed(out)) => o == out,
        (Replayed::Failed(Error::Cancelled(r)), Ending::Cancelled(reason)) => {
            r == reason && seen == trace
        }
        _ => false,
    }
}

/// What a replay of a prefix of an older segment (`k`, which continued as new)
/// must show: a prefix of the live trace, and continuing as new (`version`) exactly
/// where the live run did (the trace goes on with the next segment's beginning);
/// that, not `Pending`, once the prefix holds the whole segment (`whole`).
fn agrees_older(
    r: &Replayed<Vec<String>>,
    seen: &[String],
    trace: &[String],
    k: usize,
    version: u32,
    whole: bool,
) -> bool {
    let prefix = trace.starts_with(seen);
    match r {
        Replayed::Pending(_) => !whole && prefix,
        Replayed::ContinuedAsNew { version: v } => {
            *v == version && prefix && trace.get(seen.len()) == Some(&begins(k as u8 + 1))
        }
        _ => false,
    }
}

/// Replays `events` against a fresh interpreter: the result and the trace its
/// handler observed.
async fn replay_observing(
    run_id: &str,
    events: &[Event],
    what: &str,
) -> Result<(reel::Result<Replayed<Vec<String>>>, Vec<String>), Failure> {
    let sink = Executions::default();
    let r = tokio::time::timeout(
        HANG,
        replay(
            Interp {
                sink: Some(sink.clone()),
            },
            events,
        ),
    )
    .await
    .map_err(|_| {
        fail(
            "replay-hang",
            format!("run {run_id}: replay of {what} did not finish"),
        )
    })?;
    let seen = lock(&sink)
        .first()
        .map(|t| lock(t).clone())
        .unwrap_or_default();
    Ok((r, seen))
}

/// Checks a finished run's log against how it ended and what it observed.
pub(crate) async fn check_run(
    run_id: &str,
    ending: &Ending,
    events: &[Event],
) -> Result<(), Failure> {
    let log = || show_log(events);
    // The live trace: the output, or what the last execution observed.
    let executions = executions_of(run_id);
    let trace = match ending {
        Ending::Completed(out) => out.clone(),
        Ending::Cancelled(_) => last_trace(&executions).ok_or_else(|| {
            fail(
                "no-execution",
                format!("run {run_id} ended cancelled without executing"),
            )
        })?,
    };
    let last = events.last().map(Event::kind);
    let expected_last = match ending {
        Ending::Completed(_) => "RunCompleted",
        Ending::Cancelled(_) => "RunCancelled",
    };
    if last != Some(expected_last) {
        return Err(fail(
            "log-end",
            format!(
                "run {run_id} ended {ending:?}, its log ends with {last:?}\n  log: {}",
                log()
            ),
        ));
    }

    // Replay of the whole log: the same ending, having observed the same.
    let (whole, seen) = replay_observing(run_id, events, "the whole log").await?;
    match &whole {
        Ok(r) if agrees(r, &seen, ending, &trace, true) => {}
        Ok(r) => {
            let kind = match (r, ending) {
                (Replayed::Completed(_), Ending::Completed(_)) => "replay-output-differs",
                (Replayed::Failed(Error::Cancelled(_)), Ending::Cancelled(_)) => {
                    "replay-trace-differs"
                }
                _ => "replay-ending-differs",
            };
            return Err(fail(
                kind,
                format!(
                    "run {run_id}: live ended {ending:?}, replay {r:?}\n  live trace:     {trace:?}\n  replayed trace: {seen:?}\n  log: {}",
                    log()
                ),
            ));
        }
        Err(e) => {
            return Err(fail(
                "replay-error",
                format!("run {run_id}: {e}\n  live: {trace:?}\n  log: {}", log()),
            ));
        }
    }

    // Every execution of the live run observed a prefix of the trace.
    let executions = lock(&executions).clone();
    for (i, e) in executions.iter().enumerate() {
        let seen = lock(e).clone();
        if !trace.starts_with(&seen) {
            return Err(fail(
                "execution-not-prefix",
                format!(
                    "run {run_id}: execution {} of {} observed\n  {seen:?}\n  final trace\n  {trace:?}\n  log: {}",
                    i + 1,
                    executions.len(),
                    log()
                ),
            ));
        }
    }

    // Replays of every prefix of the log: no divergence, and observations that are a
    // prefix of the trace (or the live ending, once the handler has ended).
    let prefixes = if std::env::var("REEL_DIFF_PREFIXES").is_ok_and(|v| v == "0") {
        0
    } else {
        events.len()
    };
    let segs = segments(events);
    for n in 1..prefixes {
        let what = format!("the first {n} events");
        let (r, seen) = replay_observing(run_id, &events[..n], &what).await?;
        // The segment the replay picks: the prefix's last `RunStarted`.
        let k = segs.iter().rposition(|s| s.start < n).unwrap_or(0);
        if let Ok(Replayed::ContinuedAsNew { .. }) = &r {
            stats::PREFIX_CONTINUED.fetch_add(1, Ordering::Relaxed);
        }
        let ok = match segs.get(k + 1) {
            None => r
                .as_ref()
                .is_ok_and(|r| agrees(r, &seen, ending, &trace, false)),
            Some(next) => {
                let version = match &events[next.start] {
                    Event::RunStarted { version, .. } => *version,
                    _ => 0,
                };
                r.as_ref()
                    .is_ok_and(|r| agrees_older(r, &seen, &trace, k, version, n >= segs[k].end))
            }
        };
        if !ok {
            return Err(fail(
                "prefix-replay",
                format!(
                    "run {run_id}: replay of the first {n} of {} events (segment {k} of {}) gave {r:?}, observing\n  {seen:?}\n  live trace ({ending:?})\n  {trace:?}\n  log: {}",
                    events.len(),
                    segs.len(),
                    log()
                ),
            ));
        }
    }

    check_steps(run_id, events, &segs)?;
    check_cancel_carried(run_id, events, &segs)?;
    check_signals(run_id, events, &trace)
}

/// Steps: one completion per id within a segment (ids repeat across segments), and
/// a recorded body ran to completion once (its idempotency key names the segment).
fn check_steps(run_id: &str, events: &[Event], segs: &[Segment]) -> Result<(), Failure> {
    let bodies = lock(&BODY_COMPLETIONS).clone();
    for (k, seg) in segs.iter().enumerate() {
        let mut completed: BTreeMap<&str, u32> = BTreeMap::new();
        for e in &events[seg.start..seg.end] {
            if let Event::StepCompleted { id, .. } = e {
                *completed.entry(id.as_str()).or_default() += 1;
            }
        }
        if let Some((id, n)) = completed.iter().find(|(_, n)| **n > 1) {
            return Err(fail(
                "step-completed-twice",
                format!("run {run_id}: step `{id}` completed {n} times in segment {k} of the log"),
            ));
        }
        for id in completed.keys() {
            let key = idempotency_key(run_id, k, id);
            let n = bodies.get(&key).copied().unwrap_or(0);
            if n > 1 {
                return Err(fail(
                    "body-rerun",
                    format!(
                        "run {run_id}: body of recorded step `{id}` (segment {k}, key {key}) ran to completion {n} times"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A cancel request an older segment received is carried into the next one
/// (`cancel-lost`).
fn check_cancel_carried(run_id: &str, events: &[Event], segs: &[Segment]) -> Result<(), Failure> {
    let requested = |s: &Segment| {
        events[s.start..s.end]
            .iter()
            .any(|e| matches!(e, Event::CancelRequested { .. }))
    };
    for (k, pair) in segs.windows(2).enumerate() {
        if requested(&pair[0]) {
            stats::CANCEL_CARRIED.fetch_add(1, Ordering::Relaxed);
            if !requested(&pair[1]) {
                return Err(fail(
                    "cancel-lost",
                    format!(
                        "run {run_id}: segment {k} was asked to cancel, segment {} was not\n  log: {}",
                        k + 1,
                        show_log(events)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `StepCtx::idempotency_key`: the run id with `%` and `/` escaped, `%S<k>` after
/// the first segment, then the step id.
fn idempotency_key(run_id: &str, segment: usize, step_id: &str) -> String {
    let run = run_id.replace('%', "%25").replace('/', "%2F");
    let segment = if segment > 0 {
        format!("%S{segment}")
    } else {
        String::new()
    };
    format!("{run}{segment}/{step_id}")
}

/// The log in short, for failure reports.
pub(crate) fn show_log(events: &[Event]) -> String {
    let lines = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let s = match e {
                Event::RunStarted { .. } => "RunStarted".to_owned(),
                Event::StepStarted { id, attempt } => format!("StepStarted({id}, {attempt})"),
                Event::StepCompleted { id, .. } => format!("StepCompleted({id})"),
                Event::StepFailed {
                    id,
                    attempt,
                    retry_at,
                    ..
                } => format!("StepFailed({id}, {attempt}, retry={})", retry_at.is_some()),
                Event::TimerScheduled { id, .. } => format!("TimerScheduled({id})"),
                Event::TimerFired { id } => format!("TimerFired({id})"),
                Event::TimerCancelled { id } => format!("TimerCancelled({id})"),
                Event::SignalAwaited { id, name, deadline } => format!(
                    "SignalAwaited({id}, {name}{})",
                    if deadline.is_some() { ", deadline" } else { "" }
                ),
                Event::SignalReceived {
                    name, signal_id, ..
                } => format!("SignalReceived({name}, {signal_id})"),
                Event::Recorded { id, .. } => format!("Recorded({id})"),
                Event::ChildStarted { id, run_id, .. } => format!("ChildStarted({id}, {run_id})"),
                Event::ChildCompleted { id, .. } => format!("ChildCompleted({id})"),
                Event::CancelRequested { reason } => format!("CancelRequested({reason})"),
                Event::Deadline { id, .. } => format!("Deadline({id})"),
                Event::Patched { id } => format!("Patched({id})"),
                Event::Published { key, .. } => format!("Published({key})"),
                Event::RunCompleted { .. } => "RunCompleted".to_owned(),
                Event::RunCancelled { .. } => "RunCancelled".to_owned(),
                Event::ContinuedAsNew { carried } => format!("ContinuedAsNew({carried})"),
                other => format!("{other:?}"),
            };
            format!("{i}:{s}")
        })
        .collect::<Vec<_>>();
    lines.join(" ")
}
