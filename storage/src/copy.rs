//! Copying a whole store into another, offline ([`copy_store`]): how a service
//! moves from the embedded store to PostgreSQL, or back, or takes a copy of a
//! store. Written against the storage traits only, so it copies between any two
//! backends.
//!
//! Every run's records are copied with their sequence numbers and append times
//! (consecutive records of one time go in one append, compare-and-set on the
//! sequence as usual), its metadata, its pending timers, and every schedule. A run
//! whose records do not decode is left out and reported; the others are copied.

use std::collections::HashMap;

use crate::{Append, Record, RunMeta, StorageError, Store, TimerEntry, to_ms};

/// What [`copy_store`] copied, and what it left out.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CopyReport {
    /// Runs copied (metadata, records, timers).
    pub runs: u64,
    /// Records copied.
    pub records: u64,
    /// Timer-index entries copied.
    pub timers: u64,
    /// Schedules copied.
    pub schedules: u64,
    /// What could not be copied: the run id (or the damaged record's key) and why.
    pub skipped: Vec<(String, String)>,
}

/// Why a copy did not begin or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// The destination already holds runs or schedules: a copy only fills an
    /// empty store, so nothing is merged or overwritten by mistake.
    #[error("the destination store is not empty ({runs} runs, {schedules} schedules)")]
    NotEmpty {
        /// Runs found there.
        runs: usize,
        /// Schedules found there.
        schedules: usize,
    },
    /// Reading the source or writing the destination failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Runs whose appends are awaited together.
const WINDOW: usize = 256;

/// Copies everything `from` holds into `to`, which must be empty. No host may
/// use either store meanwhile. The destination is written through its own writer
/// (group-committed), each run's last append fsynced.
///
/// # Errors
/// [`CopyError::NotEmpty`] before anything is written; [`CopyError::Storage`] for a
/// failed read of a whole keyspace or a failed write (the destination then holds
/// part of the copy: empty it before trying again).
pub async fn copy_store(from: &dyn Store, to: &dyn Store) -> Result<CopyReport, CopyError> {
    let existing = to.list_runs()?;
    let schedules_there = to.list_schedules()?.len();
    let runs_there = existing.items.len() + existing.corrupt.len();
    if runs_there > 0 || schedules_there > 0 {
        return Err(CopyError::NotEmpty {
            runs: runs_there,
            schedules: schedules_there,
        });
    }
    let mut report = CopyReport::default();
    let runs = from.list_runs()?;
    let timers = from.timers()?;
    for bad in runs.corrupt.iter().chain(&timers.corrupt) {
        let what = bad
            .run_id
            .clone()
            .unwrap_or_else(|| format!("{:?}", bad.key));
        report.skipped.push((what, bad.to_string()));
    }
    let mut timers_of: HashMap<String, Vec<TimerEntry>> = HashMap::new();
    for t in timers.items {
        timers_of.entry(t.run_id.clone()).or_default().push(t);
    }
    for chunk in runs.items.chunks(WINDOW) {
        let mut tickets = Vec::new();
        for meta in chunk {
            let records = match from.read_records(&meta.run_id, 0) {
                Ok(r) => r,
                Err(e) => {
                    report.skipped.push((meta.run_id.clone(), e.to_string()));
                    continue;
                }
            };
            let timers = timers_of.remove(&meta.run_id).unwrap_or_default();
            report.records += records.len() as u64;
            report.timers += timers.len() as u64;
            report.runs += 1;
            for append in appends(meta, records, timers) {
                tickets.push(to.submit(append));
            }
        }
        for ticket in tickets {
            ticket.await?;
        }
    }
    for schedule in from.list_schedules()? {
        to.put_schedule(&schedule)?;
        report.schedules += 1;
    }
    Ok(report)
}

/// The appends that rebuild one run: its records grouped by append time, the
/// metadata and timers with the last (fsynced).
fn appends(meta: &RunMeta, records: Vec<Record>, timers: Vec<TimerEntry>) -> Vec<Append> {
    let mut out: Vec<Append> = Vec::new();
    for record in records {
        let at = to_ms(record.at);
        match out.last_mut() {
            Some(last)
                if last.at == Some(at)
                    && last.expected_seq.map(|s| s + last.events.len() as u64)
                        == Some(record.seq) =>
            {
                last.events.push(record.event)
            }
            _ => out.push(Append {
                run_id: meta.run_id.clone(),
                expected_seq: Some(record.seq),
                events: vec![record.event],
                at: Some(at),
                ..Append::default()
            }),
        }
    }
    if out.is_empty() {
        out.push(Append {
            run_id: meta.run_id.clone(),
            ..Append::default()
        });
    }
    if let Some(last) = out.last_mut() {
        last.meta = Some(meta.clone());
        last.add_timers = timers;
        last.durable = true;
    }
    out
}
