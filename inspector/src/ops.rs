//! The operating API the inspector calls, one function per operation: the routes
//! translate HTTP into these, and these into reel's calls (`Host::list`,
//! `Host::count`, `AnyRun::watch_from`, `pause`/`resume`/`retry`/`delete`,
//! `Host::fork`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::stream::{BoxStream, StreamExt};
use reel::{Cursor, Host, Record, RunFilter, RunInfo, StatusKind};

use crate::error::ApiError;

/// What a listing asks for.
#[derive(Debug, Default, Clone)]
pub(crate) struct Filter {
    pub(crate) status: Vec<StatusKind>,
    pub(crate) workflow: Option<String>,
    pub(crate) version: Option<u32>,
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

/// A page of `host.list`, newest first unless asked otherwise.
pub(crate) async fn list(host: &Host, f: &Filter) -> Result<Page, ApiError> {
    let after = match &f.cursor {
        Some(c) => Some(c.parse::<Cursor>()?),
        None => None,
    };
    let mut filter = RunFilter::default()
        .limit(f.limit)
        .after(after)
        .created(f.created_after, f.created_before);
    filter.newest_first = !f.ascending;
    if !f.status.is_empty() {
        filter = filter.status(f.status.iter().copied());
    }
    if let Some(w) = &f.workflow {
        filter = filter.workflow(w.clone());
    }
    if let Some(v) = f.version {
        filter = filter.version(v);
    }
    if let Some(p) = &f.parent {
        filter = filter.parent(p.clone());
    }
    let page = host.list(filter).await?;
    Ok(Page {
        runs: page.items,
        next: page.next.map(|c| c.to_string()),
    })
}

/// The counts per status the store keeps.
pub(crate) async fn count(host: &Host) -> Result<BTreeMap<StatusKind, u64>, ApiError> {
    Ok(host.count().await?)
}

/// How long a client waits before it reconnects to a [`watch`] that dropped.
pub(crate) const WATCH_RETRY: Duration = Duration::from_millis(500);

/// The run's records after `after` (all of them without it), then each one as
/// it lands, ending after the run's terminal record. With `created_at` (ms),
/// only the run created then: none of a later run under its id.
pub(crate) async fn watch(
    host: &Host,
    run_id: &str,
    after: Option<u64>,
    created_at: Option<u64>,
) -> Result<BoxStream<'static, Result<Record, ApiError>>, ApiError> {
    let run = host.run(run_id);
    // An unknown run is a 404, not a stream with an error in it.
    run.status().await?;
    let from = after.map_or(0, |a| a.saturating_add(1));
    let records = match created_at {
        Some(ms) => run
            .watch_run_from(UNIX_EPOCH + Duration::from_millis(ms), from)
            .boxed(),
        None => run.watch_from(from).boxed(),
    };
    Ok(records.map(|r| r.map_err(ApiError::from)).boxed())
}

/// `host.run(run_id).pause()`.
pub(crate) async fn pause(host: &Host, run_id: &str) -> Result<(), ApiError> {
    Ok(host.run(run_id).pause().await?)
}

/// `host.run(run_id).resume()`.
pub(crate) async fn resume(host: &Host, run_id: &str) -> Result<(), ApiError> {
    Ok(host.run(run_id).resume().await?)
}

/// `host.run(run_id).retry()`.
pub(crate) async fn retry(host: &Host, run_id: &str) -> Result<(), ApiError> {
    Ok(host.run(run_id).retry().await?)
}

/// `host.run(run_id).delete()`.
pub(crate) async fn delete(host: &Host, run_id: &str) -> Result<(), ApiError> {
    Ok(host.run(run_id).delete().await?)
}

/// `host.fork(run_id, at_seq, new_run_id)`.
pub(crate) async fn fork(
    host: &Host,
    run_id: &str,
    at_seq: u64,
    new_run_id: &str,
) -> Result<(), ApiError> {
    host.fork(run_id, at_seq, new_run_id).await?;
    Ok(())
}
