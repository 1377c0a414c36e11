//! Reading a store directory no host holds: runs, one run, its records.

use std::path::Path;
use std::sync::Arc;

use reel::{FjallStore, RunInfo, StatusKind};
use reel_storage::{LogReader, MetaReader, StorageError};
use serde_json::{Value, json};

/// An opened store.
pub(crate) struct Reader {
    store: Arc<FjallStore>,
}

fn storage(e: StorageError) -> String {
    reel::Error::from(e).to_string()
}

impl Reader {
    pub(crate) fn open(dir: &Path) -> Result<Reader, String> {
        // Opening creates a store where there is none: a directory named by a
        // typo must be left as it was.
        if !dir.is_dir() || !FjallStore::exists(dir) {
            return Err(format!("no store at `{}`", dir.display()));
        }
        let store = FjallStore::open(dir).map_err(|e| match e {
            StorageError::Locked { .. } => format!(
                "{}; ask the host instead: reel --url <its admin endpoint> ...",
                reel::Error::from(e)
            ),
            e => storage(e),
        })?;
        Ok(Reader { store })
    }

    pub(crate) fn runs(
        &self,
        status: Option<&str>,
        workflow: Option<&str>,
        parent: Option<&str>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Value, String> {
        let kinds: Vec<StatusKind> = match status {
            None => Vec::new(),
            Some(s) => s
                .split(',')
                .map(|p| {
                    StatusKind::ALL
                        .into_iter()
                        .find(|k| k.as_str() == p)
                        .ok_or_else(|| format!("unknown status `{p}`"))
                })
                .collect::<Result<_, _>>()?,
        };
        let mut metas = self.store.list_runs().map_err(storage)?.items;
        metas.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        let mut runs = metas
            .into_iter()
            .map(RunInfo::from)
            .filter(|r| kinds.is_empty() || kinds.contains(&r.status.kind()))
            .filter(|r| workflow.is_none_or(|w| r.workflow == w))
            .filter(|r| parent.is_none_or(|p| r.parent.as_deref() == Some(p)))
            .filter(|r| cursor.is_none_or(|c| r.run_id.as_str() > c));
        let page: Vec<RunInfo> = runs.by_ref().take(limit).collect();
        let next = match runs.next() {
            Some(_) => page.last().map(|r| r.run_id.clone()),
            None => None,
        };
        let page: Vec<Value> = page.iter().map(reel_inspector::run_info_to_json).collect();
        Ok(json!({ "runs": page, "next": next }))
    }

    pub(crate) fn show(&self, run: &str) -> Result<Value, String> {
        let meta = self
            .store
            .get_run(run)
            .map_err(storage)?
            .ok_or_else(|| format!("unknown run `{run}`"))?;
        let created_at = meta.created_at;
        let mut v = reel_inspector::run_info_to_json(&RunInfo::from(meta));
        v["created_at"] = created_at.into();
        Ok(v)
    }

    pub(crate) fn records(&self, run: &str) -> Result<Vec<Value>, String> {
        if self.store.get_run(run).map_err(storage)?.is_none() {
            return Err(format!("unknown run `{run}`"));
        }
        let records = self.store.read_records(run, 0).map_err(storage)?;
        Ok(records.iter().map(reel_inspector::record_to_json).collect())
    }
}
