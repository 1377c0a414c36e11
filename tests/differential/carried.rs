//! Segments of a run that continued as new, and what must hold of the signals
//! carried from one to the next: none lost, none doubled.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use reel::Event;

use super::checks::{Failure, fail, show_log};
use super::program::begins;
use super::stats;

/// One log segment: from its `RunStarted` to its `ContinuedAsNew` (excluded), or
/// to the log's end.
#[derive(Clone, Debug)]
pub(crate) struct Segment {
    /// Index of its `RunStarted`.
    pub(crate) start: usize,
    /// Index of its `ContinuedAsNew`, or the log's length for the last segment.
    pub(crate) end: usize,
    /// How many signals its `ContinuedAsNew` says it carried (none for the last).
    pub(crate) carried: Option<u32>,
}

/// The segments of a log, in order.
pub(crate) fn segments(events: &[Event]) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::RunStarted { .. } => out.push(Segment {
                start: i,
                end: events.len(),
                carried: None,
            }),
            Event::ContinuedAsNew { carried } => {
                if let Some(s) = out.last_mut() {
                    s.end = i;
                    s.carried = Some(*carried);
                }
            }
            _ => {}
        }
    }
    out
}

/// What identifies a signal across segments: `name#id` (the test's signal ids are
/// unique per name), or the name alone for approvals (their ids are random).
fn key(name: &str, signal_id: &str) -> String {
    if name.starts_with("approval:") {
        name.to_owned()
    } else {
        format!("{name}#{signal_id}")
    }
}

/// The signals a trace line shows the handler took, as [`key`]s (the harness sends
/// signal `name-k` with payload `100 k + delay`, approvals with feedback `name-k`).
fn consumed(line: &str) -> Option<String> {
    if let Some((_, rest)) = line.split_once(" signal ") {
        let (name, v) = rest.split_once(" -> ")?;
        let v: u32 = v.parse().ok()?;
        return Some(key(name, &format!("{name}-{}", v / 100)));
    }
    let (_, rest) = line.split_once(" approval ")?;
    let (name, _) = rest.split_once(" -> ")?;
    Some(key(&format!("approval:{name}"), ""))
}

type Bag = BTreeMap<String, u32>;

/// The `n` signals carried into segment `next`: the first of its batch (after its
/// `RunStarted`, among deadlines and a cancel request). `Err`: how many are missing.
fn carried_into(events: &[Event], next: &Segment, n: u32) -> Result<Bag, u32> {
    let mut bag = Bag::new();
    let mut left = n;
    for e in &events[next.start + 1..next.end] {
        if left == 0 {
            break;
        }
        match e {
            Event::SignalReceived {
                name, signal_id, ..
            } => {
                add(&mut bag, key(name, signal_id));
                left -= 1;
            }
            Event::Deadline { .. }
            | Event::CancelRequested { .. }
            | Event::SignalIdsSeen { .. } => {}
            _ => break,
        }
    }
    if left > 0 { Err(left) } else { Ok(bag) }
}

/// The ids segment `next` begins knowing (`SignalIdsSeen`, right after its
/// `RunStarted`) are those of the signals the segment before it received and did
/// not carry on, each once; none when it consumed none.
fn check_seen_ids(events: &[Event], seg: &Segment, next: &Segment, n: u32) -> Result<(), String> {
    fn ids(e: &Event) -> Option<&str> {
        match e {
            Event::SignalReceived { signal_id, .. } => Some(signal_id),
            _ => None,
        }
    }
    let carried: BTreeSet<&str> = events[next.start + 1..next.end]
        .iter()
        .filter_map(ids)
        .take(n as usize)
        .collect();
    let consumed: BTreeSet<&str> = events[seg.start..seg.end]
        .iter()
        .filter_map(ids)
        .filter(|id| !carried.contains(id))
        .collect();
    let seen: Vec<&str> = match events.get(next.start + 1) {
        Some(Event::SignalIdsSeen { ids }) => ids.iter().map(String::as_str).collect(),
        _ => Vec::new(),
    };
    let seen_set: BTreeSet<&str> = seen.iter().copied().collect();
    if seen_set != consumed || seen_set.len() != seen.len() {
        return Err(format!(
            "consumed {consumed:?}, the next segment begins knowing {seen:?}"
        ));
    }
    Ok(())
}

fn add(bag: &mut Bag, k: String) {
    *bag.entry(k).or_default() += 1;
}

/// Checks the signals of a run that continued as new against its trace (what the
/// handler took, segment by segment): each segment's signals (received, or carried
/// in at its start) are exactly those its handler took plus those carried into the
/// next (`signal-lost`); the last segment's handler took only signals it had; no
/// signal id arrives again in a later segment unless carried (`signal-doubled`).
pub(crate) fn check_signals(
    run_id: &str,
    events: &[Event],
    trace: &[String],
) -> Result<(), Failure> {
    let segs = segments(events);
    if segs.len() < 2 {
        return Ok(());
    }
    // The trace, cut where each later segment begins.
    let mut cuts = vec![0];
    for k in 1..segs.len() {
        let at = trace
            .iter()
            .position(|l| *l == begins(k as u8))
            .ok_or_else(|| {
                fail(
                    "trace-segments",
                    format!(
                        "run {run_id}: {} segments, no `{}` in the trace {trace:?}",
                        segs.len(),
                        begins(k as u8)
                    ),
                )
            })?;
        cuts.push(at);
    }
    cuts.push(trace.len());
    let mut seen_ids: BTreeSet<String> = BTreeSet::new();
    let mut carried_in = Bag::new();
    for (k, seg) in segs.iter().enumerate() {
        let mut took = Bag::new();
        for line in &trace[cuts[k]..cuts[k + 1]] {
            if let Some(c) = consumed(line) {
                add(&mut took, c);
            }
        }
        // Carried in signals the handler took.
        for (c, n) in &took {
            let from = carried_in.get(c).copied().unwrap_or(0).min(*n);
            stats::CARRIED_CONSUMED.fetch_add(u64::from(from), Ordering::Relaxed);
        }
        let mut had = Bag::new();
        let next_in = match segs.get(k + 1) {
            None => Bag::new(),
            Some(next) => {
                let n = seg.carried.unwrap_or(0);
                check_seen_ids(events, seg, next, n).map_err(|why| {
                    fail(
                        "signal-ids-seen",
                        format!(
                            "run {run_id}: segment {k} hands on the wrong signal ids: {why}\n  log: {}",
                            show_log(events)
                        ),
                    )
                })?;
                carried_into(events, next, n).map_err(|missing| {
                    fail(
                        "signal-lost",
                        format!(
                            "run {run_id}: segment {k} says it carried {n} signals, segment {} begins with {missing} fewer\n  log: {}",
                            k + 1,
                            show_log(events)
                        ),
                    )
                })?
            }
        };
        // The first signals of a later segment are the copies carried in.
        let carried_here = if k == 0 {
            0
        } else {
            segs[k - 1].carried.unwrap_or(0) as usize
        };
        let signals = events[seg.start..seg.end]
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Event::SignalReceived {
                    name, signal_id, ..
                } => Some((seg.start + i, name, signal_id)),
                _ => None,
            });
        for (j, (at, name, signal_id)) in signals.enumerate() {
            let key = key(name, signal_id);
            add(&mut had, key.clone());
            let fresh = j >= carried_here;
            if fresh && !name.starts_with("approval:") && !seen_ids.insert(key.clone()) {
                return Err(fail(
                    "signal-doubled",
                    format!(
                        "run {run_id}: signal {key} (event {at}, segment {k}) was received before, and not carried here"
                    ),
                ));
            }
        }
        let mut expected = took.clone();
        for (c, n) in &next_in {
            *expected.entry(c.clone()).or_default() += n;
        }
        let ok = if k + 1 < segs.len() {
            had == expected
        } else {
            took.iter().all(|(c, n)| had.get(c).is_some_and(|h| h >= n))
        };
        if !ok {
            return Err(fail(
                "signal-lost",
                format!(
                    "run {run_id}: segment {k} had signals {had:?}; its handler took {took:?} and {next_in:?} were carried on"
                ),
            ));
        }
        carried_in = next_in;
    }
    Ok(())
}
