//! Listing runs: every run's metadata or a page of it, with a stand-in for a run
//! whose metadata record is damaged; the counts per status.

use std::collections::BTreeMap;

use reel_storage::listing::{MetaPage, RunQuery};
use reel_storage::{Event, Failure, RunMeta, RunState, StatusKind, Store};

use super::Core;
use crate::blocking::blocking;
use crate::error::ActorError;

/// What `runs()` lists for a run whose metadata record is damaged: parked with the
/// damage, under the workflow and version its log starts with (if readable).
fn stand_in_meta(store: &dyn Store, run_id: String, error: Failure) -> RunMeta {
    let (workflow, version) = match store.read_log(&run_id).map(|log| log.into_iter().next()) {
        Ok(Some(Event::RunStarted {
            workflow, version, ..
        })) => (workflow, version),
        _ => ("<unreadable>".to_owned(), 0),
    };
    RunMeta {
        run_id,
        workflow,
        version,
        state: RunState::Parked { error },
        created_at: 0,
        updated_at: 0,
        parent: None,
        segment_start: 0,
        segment: 0,
        queue: None,
    }
}

impl Core {
    /// Every run's metadata, ordered by run id. A run whose metadata record does not
    /// decode is listed as parked with the damage (`Failure::Corrupt`), its workflow
    /// and version read from its log when that can be read.
    ///
    /// # Errors
    /// Storage errors (I/O); a damaged record is not one.
    pub async fn list(&self) -> Result<Vec<RunMeta>, ActorError> {
        let store = self.store.clone();
        let mut metas = blocking(move || {
            let scan = store.list_runs()?;
            let mut metas = scan.items;
            for record in scan.corrupt {
                let (Some(error), Some(run_id)) = (record.failure(), record.run_id.clone()) else {
                    tracing::error!(%record, "reel: corrupt metadata record names no run; skipped");
                    continue;
                };
                metas.push(stand_in_meta(&*store, run_id, error));
            }
            Ok(metas)
        })
        .await?;
        for meta in &mut metas {
            self.apply_held_park(meta);
        }
        metas.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        Ok(metas)
    }

    /// One page of runs (see [`MetaReader::list_page`](reel_storage::MetaReader::list_page)).
    /// A run whose metadata record does not decode is listed as for [`Core::list`]
    /// when it passes the filters.
    ///
    /// # Errors
    /// Storage errors (I/O); a damaged record is not one.
    pub async fn list_page(&self, query: RunQuery) -> Result<MetaPage, ActorError> {
        let store = self.store.clone();
        let asked = query.clone();
        let mut page = blocking(move || {
            let query = asked;
            let mut page = store.list_page(&query)?;
            for record in std::mem::take(&mut page.corrupt) {
                let (Some(error), Some(run_id)) = (record.failure(), record.run_id.clone()) else {
                    continue;
                };
                let stand_in = stand_in_meta(&*store, run_id, error);
                if query.matches(&stand_in) {
                    page.items.push(stand_in);
                }
            }
            Ok(page)
        })
        .await?;
        // A park the store refused is held in memory: such a run reads parked
        // here as everywhere, and a status filter sees it so (its stored state's
        // filter drops it; the first page of a filter on parked adds it).
        let held = self.held_parks();
        if held.is_empty() {
            return Ok(page);
        }
        for meta in &mut page.items {
            self.apply_held_park(meta);
        }
        page.items.retain(|m| query.matches(m));
        let wants_parked = query
            .status
            .as_ref()
            .is_some_and(|s| s.contains(&StatusKind::Parked));
        if wants_parked && query.after.is_none() {
            for run_id in held {
                if page.items.iter().any(|m| m.run_id == run_id) {
                    continue;
                }
                if let Some(mut meta) = self.store.get_run(&run_id)? {
                    self.apply_held_park(&mut meta);
                    if query.matches(&meta) {
                        page.items.push(meta);
                    }
                }
            }
        }
        Ok(page)
    }

    /// How many runs are in each state, from the counts the store keeps; a run
    /// whose park the store refused (held in memory) counts as parked.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn counts(&self) -> Result<BTreeMap<StatusKind, u64>, ActorError> {
        let store = self.store.clone();
        let mut counts = blocking(move || store.count_by_status()).await?;
        for run_id in self.held_parks() {
            let Some(meta) = self.store.get_run(&run_id)? else {
                continue;
            };
            let stored = meta.state.kind();
            if meta.state.is_finished() || stored == StatusKind::Parked {
                continue;
            }
            if let Some(n) = counts.get_mut(&stored) {
                *n = n.saturating_sub(1);
            }
            *counts.entry(StatusKind::Parked).or_default() += 1;
        }
        Ok(counts)
    }
}
