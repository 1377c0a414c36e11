//! The parent's checks of what the children left: the side file against each
//! run's log (no recorded body ran again, bodies ran in handler order), and the
//! figures the summary prints.

use super::*;

/// One line of the side file.
pub(crate) struct Exec {
    /// Line number in the side file: the order in which bodies ran, across processes.
    pub(crate) pos: usize,
    pub(crate) attempt: u32,
    pub(crate) token: String,
}

pub(crate) fn read_side(records: &[String]) -> HashMap<(String, String), Vec<Exec>> {
    let mut side: HashMap<(String, String), Vec<Exec>> = HashMap::new();
    for (pos, line) in records.iter().enumerate() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [run, step, attempt, token] = parts[..] else {
            panic!("malformed side-file line {line:?}");
        };
        side.entry((run.to_owned(), step.to_owned()))
            .or_default()
            .push(Exec {
                pos,
                attempt: attempt.parse().expect("attempt"),
                token: token.to_owned(),
            });
    }
    side
}

#[derive(Default, Debug)]
pub(crate) struct Figures {
    pub(crate) runs: usize,
    pub(crate) steps_recorded: usize,
    pub(crate) bodies_run: usize,
    pub(crate) rerun_before_record: usize,
    pub(crate) rerun_after_record: usize,
    pub(crate) out_of_order: usize,
    pub(crate) failed_attempts_recorded: usize,
    pub(crate) abandoned_steps: usize,
    pub(crate) signals: usize,
    pub(crate) race_signal: usize,
    pub(crate) race_timer: usize,
    pub(crate) timed_waits_signalled: usize,
    pub(crate) timed_waits_timed_out: usize,
    pub(crate) parked: usize,
}

/// Checks one run's final log against the side file; adds to `f`, pushes problems.
pub(crate) fn check_log(
    run: &str,
    events: &[Event],
    side: &HashMap<(String, String), Vec<Exec>>,
    f: &mut Figures,
    problems: &mut Vec<String>,
) {
    let terminal = events
        .iter()
        .position(|e| {
            matches!(
                e,
                Event::RunCompleted { .. } | Event::RunFailed { .. } | Event::RunCancelled { .. }
            )
        })
        .unwrap_or(events.len());
    if terminal + 1 != events.len() {
        problems.push(format!(
            "{run}: the terminal event is at {terminal} of {} events",
            events.len()
        ));
    }
    if !matches!(events.first(), Some(Event::RunStarted { .. })) {
        problems.push(format!("{run}: the log does not start with RunStarted"));
    }
    let mut completed: HashSet<&str> = HashSet::new();
    let mut failed: HashSet<&str> = HashSet::new();
    let mut started: BTreeMap<&str, u32> = BTreeMap::new();
    let mut signal_ids: HashSet<&str> = HashSet::new();
    let no_lines = Vec::new();
    for e in events {
        match e {
            Event::StepStarted { id, attempt } => {
                started.insert(id, *attempt);
            }
            Event::StepCompleted { id, output } => {
                f.steps_recorded += 1;
                if !completed.insert(id) {
                    problems.push(format!("{run}: step {id} completed twice"));
                }
                let token: String = match rmp_serde::from_slice(output.as_bytes()) {
                    Ok(t) => t,
                    Err(e) => {
                        problems.push(format!("{run}: step {id}: undecodable output: {e}"));
                        continue;
                    }
                };
                let lines = side.get(&(run.to_owned(), id.clone())).unwrap_or(&no_lines);
                match lines.iter().rposition(|x| x.token == token) {
                    None => problems.push(format!(
                        "{run}: step {id}: recorded token {token} was never written by a body"
                    )),
                    Some(at) => {
                        let after = lines.len() - 1 - at;
                        if after > 0 {
                            f.rerun_after_record += after;
                            problems.push(format!(
                                "{run}: step {id} ran {after} more time(s) after its result \
                                 {token} was recorded"
                            ));
                        }
                        let attempt = started.get(id.as_str()).copied().unwrap_or(0);
                        if lines[at].attempt != attempt {
                            problems.push(format!(
                                "{run}: step {id}: recorded value from attempt {}, the log's \
                                 last StepStarted says attempt {attempt}",
                                lines[at].attempt
                            ));
                        }
                    }
                }
            }
            Event::StepFailed { id, attempt, .. } => {
                f.failed_attempts_recorded += 1;
                failed.insert(id);
                let lines = side.get(&(run.to_owned(), id.clone())).unwrap_or(&no_lines);
                // The last execution of this attempt failed, and no execution of this or
                // an earlier attempt follows it.
                match lines.iter().rposition(|x| x.attempt == *attempt) {
                    None => problems.push(format!(
                        "{run}: step {id}: failed attempt {attempt} never ran"
                    )),
                    Some(at) => {
                        if !lines[at].token.starts_with("fail-") {
                            problems.push(format!(
                                "{run}: step {id}: attempt {attempt} is recorded as failed, \
                                 its last execution succeeded"
                            ));
                        }
                        let again = lines[at + 1..]
                            .iter()
                            .filter(|x| x.attempt <= *attempt)
                            .count();
                        if again > 0 {
                            f.rerun_after_record += again;
                            problems.push(format!(
                                "{run}: step {id}: attempt {attempt} (or an earlier one) ran \
                                 {again} time(s) after its failure was recorded"
                            ));
                        }
                    }
                }
            }
            Event::SignalReceived { signal_id, .. } => {
                f.signals += 1;
                if !signal_ids.insert(signal_id) {
                    problems.push(format!("{run}: signal id {signal_id} delivered twice"));
                }
            }
            _ => {}
        }
    }
    // Steps that were opened and never finished: only the `slow` step may lose its race.
    for id in started.keys() {
        if completed.contains(id) || failed.contains(id) {
            continue;
        }
        f.abandoned_steps += 1;
        if *id != "slow" {
            problems.push(format!("{run}: step {id} was started and never finished"));
            continue;
        }
        // Whether it ran again once the race was decided is checked against the
        // side-file order by the caller.
    }
}

/// Where a step sits in its handler: a step of a later phase is called only once
/// every step of the earlier phases has returned, that is once their results were
/// recorded (durably) and seen. The steps of a mix run's kid all run inside the
/// mix run's join (phase 2); inside the kid, `k`, `k#2` and `k#3` follow each other.
/// `None`: not a step of these handlers.
pub(crate) fn phase(kid: bool, step: &str) -> Option<u32> {
    let (name, k) = match step.split_once('#') {
        Some((name, k)) => (name, k.parse::<u32>().ok()?),
        None => (step, 1),
    };
    if kid {
        return (name == "k").then_some(k);
    }
    Some(match name {
        "first" => 0,
        "flaky" => 1,
        "left" | "right" => 2,
        "fan" => 3,
        "unord" => 4,
        "slow" => 5,
        "after-race" => 6,
        "ship" | "refund" => 7,
        "loop" => 7 + k,
        _ => return None,
    })
}

/// The bodies of one run's steps, in the form [`check_phases`] takes.
pub(crate) fn phased(
    by_run: &HashMap<&str, Vec<(&str, &Vec<Exec>)>>,
    run: &str,
    kid: bool,
    problems: &mut Vec<String>,
) -> Vec<(u32, String, Vec<usize>)> {
    let mut lines = Vec::new();
    for (step, execs) in by_run.get(run).into_iter().flatten() {
        match phase(kid, step) {
            Some(p) => lines.push((
                p,
                format!("{run}/{step}"),
                execs.iter().map(|x| x.pos).collect(),
            )),
            None => problems.push(format!("{run}: unknown step {step}")),
        }
    }
    lines
}

/// Checks that no body of an earlier phase ran after a body of a later phase had
/// run: that would be a result the handler had seen that was lost (invariant 1), a
/// recorded step that ran again, or a race loser that ran after the race was decided
/// (invariant 2). `lines`: (phase, step, side-file positions). Returns the offenders.
pub(crate) fn check_phases(
    run: &str,
    mut lines: Vec<(u32, String, Vec<usize>)>,
    problems: &mut Vec<String>,
) -> usize {
    lines.sort_by_key(|(phase, _, _)| *phase);
    let mut late = 0;
    for (phase, step, at) in &lines {
        // The first body of any later phase.
        let first_later = lines
            .iter()
            .filter(|(p, _, _)| p > phase)
            .filter_map(|(_, later, at)| Some((*at.iter().min()?, later)))
            .min();
        let Some((first_later, later)) = first_later else {
            continue;
        };
        let n = at.iter().filter(|p| **p > first_later).count();
        if n > 0 {
            late += n;
            problems.push(format!(
                "{run}: step {step} ran {n} time(s) after step {later} had started, which \
                 the handler reaches only once {step} has returned"
            ));
        }
    }
    late
}
