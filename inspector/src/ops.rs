//! The operating API the inspector calls, one function per operation.
//!
//! **Adapter.** Issue 12's operating API (`Host::list`, `Host::count`,
//! `AnyRun::watch`, `pause`/`resume`/`retry`/`delete`, `Host::fork`) is not on this
//! branch yet. Each function below is what the routes call; the ones marked FAKE
//! stand in with what exists today and switch to the real call (one line each)
//! once it is merged:
//!
//! - [`list`] FAKE: reads every run (`Host::runs`), filters, sorts by run id and
//!   pages in memory (cursor = last run id). Switch to `Host::list(RunFilter)`
//!   (newest first by creation time, store-side paging).
//! - [`count`] FAKE: counts `Host::runs` by status. Switch to `Host::count()`.
//! - [`created_at`] FAKE: the time of the run's first record. Switch to the
//!   creation time `RunInfo` carries.
//! - [`watch`] FAKE: the records after `after`, then the stream ends (the page's
//!   `EventSource` reconnects with `Last-Event-ID`, the CLI re-requests). Switch to
//!   `AnyRun::watch()`, which stays open.
//! - [`pause`], [`resume`], [`retry`], [`delete`], [`fork`]: answer 501 until the
//!   real calls exist.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use futures::stream::{self, BoxStream, StreamExt};
use reel::{Host, Record, RunInfo, StatusKind};

use crate::error::ApiError;

/// What a listing asks for.
#[derive(Debug, Default, Clone)]
pub(crate) struct Filter {
    pub(crate) status: Vec<StatusKind>,
    pub(crate) workflow: Option<String>,
    pub(crate) parent: Option<String>,
    pub(crate) created_after: Option<SystemTime>,
    pub(crate) created_before: Option<SystemTime>,
    pub(crate) limit: usize,
    pub(crate) cursor: Option<String>,
    pub(crate) ascending: bool,
}

/// One page of a listing.
pub(crate) struct Page {
    pub(crate) runs: Vec<RunInfo>,
    pub(crate) next: Option<String>,
}

/// FAKE (see the module doc): switch to `host.list(filter)`.
pub(crate) async fn list(host: &Host, f: &Filter) -> Result<Page, ApiError> {
    let mut runs: Vec<RunInfo> = host
        .runs()
        .await?
        .into_iter()
        .filter(|r| f.status.is_empty() || f.status.contains(&r.status.kind()))
        .filter(|r| f.workflow.as_ref().is_none_or(|w| &r.workflow == w))
        .filter(|r| f.parent.is_none() || r.parent == f.parent)
        .collect();
    runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    if !f.ascending {
        runs.reverse();
    }
    let after_cursor = |r: &RunInfo| match &f.cursor {
        None => true,
        Some(c) if f.ascending => r.run_id.as_str() > c.as_str(),
        Some(c) => r.run_id.as_str() < c.as_str(),
    };
    let mut page = Vec::new();
    let mut more = false;
    for r in runs.into_iter().filter(after_cursor) {
        if f.created_after.is_some() || f.created_before.is_some() {
            let Some(at) = created_at(host, &r.run_id).await? else {
                continue;
            };
            if f.created_after.is_some_and(|t| at < t) || f.created_before.is_some_and(|t| at >= t)
            {
                continue;
            }
        }
        if page.len() == f.limit {
            more = true;
            break;
        }
        page.push(r);
    }
    let next = if more {
        page.last().map(|r| r.run_id.clone())
    } else {
        None
    };
    Ok(Page { runs: page, next })
}

/// FAKE (see the module doc): switch to `host.count()`.
pub(crate) async fn count(host: &Host) -> Result<BTreeMap<StatusKind, u64>, ApiError> {
    let mut counts: BTreeMap<StatusKind, u64> = StatusKind::ALL.iter().map(|k| (*k, 0)).collect();
    for r in host.runs().await? {
        *counts.entry(r.status.kind()).or_default() += 1;
    }
    Ok(counts)
}

/// FAKE (see the module doc): switch to the creation time in `RunInfo`.
pub(crate) async fn created_at(host: &Host, run_id: &str) -> Result<Option<SystemTime>, ApiError> {
    let records = host.run(run_id).records().await?;
    Ok(records.first().map(|r| r.at))
}

/// How long a client waits before it asks a [`watch`] again: the FAKE watch ends
/// after the records there are.
pub(crate) const WATCH_RETRY: Duration = Duration::from_millis(500);

/// FAKE (see the module doc): switch to `host.run(run_id).watch()` (skipping
/// records up to `after`).
pub(crate) async fn watch(
    host: &Host,
    run_id: &str,
    after: Option<u64>,
) -> Result<BoxStream<'static, Result<Record, ApiError>>, ApiError> {
    let records = host.run(run_id).records().await?;
    let fresh: Vec<Result<Record, ApiError>> = records
        .into_iter()
        .filter(|r| after.is_none_or(|a| r.seq > a))
        .map(Ok)
        .collect();
    Ok(stream::iter(fresh).boxed())
}

fn not_yet(op: &str) -> ApiError {
    ApiError::not_implemented(format!(
        "{op} is not available yet: this host's reel has no {op} operation (issue 12)"
    ))
}

/// Switch to `host.run(run_id).pause()`.
pub(crate) async fn pause(host: &Host, run_id: &str) -> Result<(), ApiError> {
    host.run(run_id).status().await?;
    Err(not_yet("pause"))
}

/// Switch to `host.run(run_id).resume()`.
pub(crate) async fn resume(host: &Host, run_id: &str) -> Result<(), ApiError> {
    host.run(run_id).status().await?;
    Err(not_yet("resume"))
}

/// Switch to `host.run(run_id).retry()`.
pub(crate) async fn retry(host: &Host, run_id: &str) -> Result<(), ApiError> {
    host.run(run_id).status().await?;
    Err(not_yet("retry"))
}

/// Switch to `host.run(run_id).delete()`.
pub(crate) async fn delete(host: &Host, run_id: &str) -> Result<(), ApiError> {
    host.run(run_id).status().await?;
    Err(not_yet("delete"))
}

/// Switch to `host.fork(run_id, at_seq, new_run_id)`.
pub(crate) async fn fork(
    host: &Host,
    run_id: &str,
    _at_seq: u64,
    _new_run_id: &str,
) -> Result<(), ApiError> {
    host.run(run_id).status().await?;
    Err(not_yet("fork"))
}
