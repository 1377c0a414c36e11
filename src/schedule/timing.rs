//! When a schedule fires: its spec compiled into [`Timing`] (a parsed cron
//! expression in a time zone, or a fixed interval), the nominal fire times around
//! a moment, and the deterministic jitter of a firing.

use std::str::FromStr;

use chrono::{DateTime, Offset, TimeZone};
use chrono_tz::Tz;
use croner::Cron;

use super::{ScheduleSpec, When};
use crate::{Error, Result};

/// The most missed firings one catch-up starts (`CatchUp::All`).
pub(super) const MAX_CATCH_UP: usize = 1000;

/// A spec's fire times.
pub(super) enum Timing {
    Cron(Box<Cron>, Tz),
    /// Every this many ms, at multiples of it since the Unix epoch.
    Every(u64),
}

impl Timing {
    /// Compiles `spec`: the cron expression and time zone are checked here.
    pub(super) fn of(id: &str, spec: &ScheduleSpec) -> Result<Timing> {
        let invalid = |reason: String| Error::InvalidSchedule {
            id: id.to_owned(),
            reason,
        };
        match &spec.when {
            When::Cron { expr, tz } => {
                let cron = Cron::from_str(expr)
                    .map_err(|e| invalid(format!("cron expression `{expr}`: {e}")))?;
                let tz = match tz {
                    None => Tz::UTC,
                    Some(name) => Tz::from_str(name)
                        .map_err(|_| invalid(format!("unknown time zone `{name}`")))?,
                };
                Ok(Timing::Cron(Box::new(cron), tz))
            }
            When::Every { ms } if *ms == 0 => Err(invalid("a zero interval".to_owned())),
            When::Every { ms } => Ok(Timing::Every(*ms)),
        }
    }

    fn at(tz: Tz, ms: u64) -> Option<DateTime<Tz>> {
        tz.timestamp_millis_opt(i64::try_from(ms).ok()?).single()
    }

    fn ms<Z: TimeZone>(t: &DateTime<Z>) -> Option<u64> {
        u64::try_from(t.timestamp_millis()).ok()
    }

    /// The first fire time strictly after `ms` (`None`: never again).
    pub(super) fn next_after(&self, ms: u64) -> Option<u64> {
        match self {
            Timing::Every(every) => (ms / every).checked_add(1)?.checked_mul(*every),
            Timing::Cron(cron, tz) => {
                // croner answers the earlier of two equal wall-clock times, so
                // inside a repeated hour its answer may be at or before `ms`: the
                // search then starts an hour later (bounded: never a past time).
                let mut from = ms;
                for _ in 0..3 {
                    let t = Timing::cron_next(cron, *tz, from)?;
                    if t > ms {
                        return Some(t);
                    }
                    from = from.checked_add(3_600_000)?;
                }
                None
            }
        }
    }

    /// croner's next fire time after `ms`, or a time in the hour the clocks
    /// repeat. When the clocks go back, the repeated wall-clock times are not
    /// found again (cron's wall clock has passed them). A time the old offset
    /// would reach first, and that matches in the zone's real wall clock, is one of
    /// them: an hourly job fires in the repeated hour too, as crontab runs
    /// wildcard-hour jobs; a job at a fixed hour fires once.
    fn cron_next(cron: &Cron, tz: Tz, ms: u64) -> Option<u64> {
        // From the whole second: croner keeps a start's fraction of a second in
        // what it finds, and a cron's times are whole seconds.
        let now = Timing::at(tz, ms / 1000 * 1000)?;
        let next = Timing::ms(&cron.find_next_occurrence(&now, false).ok()?)?;
        let fixed = now.offset().fix();
        let repeated = cron
            .find_next_occurrence(&now.with_timezone(&fixed), false)
            .ok()
            .and_then(|t| Timing::ms(&t))
            .filter(|&t| t > ms && (t < next || next <= ms))
            .filter(|&t| {
                Timing::at(tz, t)
                    .is_some_and(|local| cron.is_time_matching(&local).unwrap_or(false))
            });
        Some(repeated.unwrap_or(next))
    }

    /// The last fire time at or before `ms`, if it is at or after `from`.
    pub(super) fn last_between(&self, from: u64, ms: u64) -> Option<u64> {
        let last = match self {
            Timing::Every(every) => ms / every * every,
            Timing::Cron(cron, tz) => {
                // The last whole second before the next one after `ms` (croner
                // keeps a start's fraction of a second, as in `cron_next`).
                let probe = (ms / 1000).checked_add(1)?.checked_mul(1000)?;
                let prev = cron
                    .find_previous_occurrence(&Timing::at(*tz, probe)?, false)
                    .ok()?;
                Timing::ms(&prev)?
            }
        };
        (from <= last && last <= ms).then_some(last)
    }

    /// The earliest of the last [`MAX_CATCH_UP`] fire times in `[from, to]`
    /// (`from` when there are fewer), walking back from `to`.
    fn earliest_of_latest(&self, from: u64, to: u64) -> u64 {
        let mut earliest = from;
        let mut at = to;
        for _ in 0..MAX_CATCH_UP {
            let Some(t) = self.last_between(from, at) else {
                return from;
            };
            earliest = t;
            let Some(before) = t.checked_sub(1) else {
                break;
            };
            at = before;
        }
        earliest
    }

    /// The fire times in `[from, to]`, at most [`MAX_CATCH_UP`] (the latest ones).
    pub(super) fn between(&self, from: u64, to: u64) -> Vec<u64> {
        let mut out = std::collections::VecDeque::new();
        let first = match self {
            // Arithmetic, not a walk: an interval of a millisecond over a year of
            // downtime is billions of fire times.
            Timing::Every(every) => {
                let skip = to.saturating_sub(every.saturating_mul(MAX_CATCH_UP as u64));
                from.max(skip).div_ceil(*every).checked_mul(*every)
            }
            // The walk forward starts at the earliest of the latest fire times,
            // found walking back from `to`: a cron firing every second over a long
            // downtime has more fire times than a walk from `from` could take.
            Timing::Cron(..) => match self.earliest_of_latest(from, to).checked_sub(1) {
                Some(before) => self.next_after(before),
                None => Some(0),
            },
        };
        let mut t = first;
        // A cron expression firing every second still ends the walk.
        let mut steps = 0u32;
        while let Some(at) = t.filter(|at| *at <= to && steps < 1_000_000) {
            steps += 1;
            if out.len() == MAX_CATCH_UP {
                out.pop_front();
            }
            out.push_back(at);
            t = self.next_after(at);
        }
        out.into()
    }
}

/// The jitter of the firing of schedule `id` at `fire_ms`: a delay in
/// `[0, jitter_ms]` that is the same on every host and after every restart.
pub(super) fn jitter(id: &str, fire_ms: u64, jitter_ms: u64) -> u64 {
    if jitter_ms == 0 {
        return 0;
    }
    // FNV-1a: stable across builds, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_bytes().iter().chain(&fire_ms.to_be_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % jitter_ms.saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every quarter hour across New York's fall-back night (2026-11-01, 02:00
    /// EDT = 06:00Z becomes 01:00 EST): every real quarter hour fires once, in
    /// order, the repeated hour included.
    #[test]
    fn a_quarter_hourly_cron_fires_every_real_quarter_hour_when_clocks_go_back() {
        let cron = Cron::from_str("*/15 * * * *").expect("cron");
        let timing = Timing::Cron(Box::new(cron), Tz::America__New_York);
        let from = 1_793_505_600_000; // 2026-11-01T04:00:00Z, 00:00 EDT
        let mut at = from;
        let mut fired = Vec::new();
        while at < from + 6 * 3_600_000 {
            let next = timing.next_after(at).expect("a next time");
            assert!(next > at, "{next} after {at}");
            fired.push(next);
            at = next;
        }
        let expected: Vec<u64> = (1..=24).map(|k| from + k * 900_000).collect();
        assert_eq!(fired, expected);
    }
}
