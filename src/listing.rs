//! Listing and counting runs for operators: [`RunFilter`], [`Page`], [`Cursor`],
//! [`Host::list`] and [`Host::count`]. Both read indexes the store keeps as it
//! writes metadata, never logs, so they stay cheap with a million runs.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use reel_storage::StatusKind;
use reel_storage::listing::{ListCursor, RunQuery};

use crate::{Error, Host, Result, RunInfo};

/// Which runs [`Host::list`] returns, and which page of them. The default lists
/// every run, newest first, 50 a page.
///
/// # Examples
/// ```
/// use reel::{RunFilter, StatusKind};
/// let stuck = RunFilter::default()
///     .status([StatusKind::Parked, StatusKind::Failed])
///     .workflow("checkout")
///     .limit(20);
/// assert_eq!(stuck.limit, 20);
///
/// // Or as a struct, the rest from the default:
/// let page = RunFilter { workflow: Some("checkout".into()), limit: 10, ..RunFilter::default() };
/// assert!(page.newest_first);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs in one of these states.
    pub status: Option<Vec<StatusKind>>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs bound to this workflow version.
    pub version: Option<u32>,
    /// Only runs started at or after this time.
    pub created_after: Option<SystemTime>,
    /// Only runs started before this time.
    pub created_before: Option<SystemTime>,
    /// Only the child runs of this run.
    pub parent: Option<String>,
    /// Rows per page (1 to [`RunFilter::MAX_LIMIT`]).
    pub limit: usize,
    /// Continue after this position: the `next` of the previous page.
    pub after: Option<Cursor>,
    /// Newest first (the default), or oldest first.
    pub newest_first: bool,
}

impl Default for RunFilter {
    fn default() -> Self {
        RunFilter {
            status: None,
            workflow: None,
            version: None,
            created_after: None,
            created_before: None,
            parent: None,
            limit: 50,
            after: None,
            newest_first: true,
        }
    }
}

impl RunFilter {
    /// The largest page [`Host::list`] returns.
    pub const MAX_LIMIT: usize = 10_000;

    /// Sets [`RunFilter::status`].
    pub fn status(mut self, kinds: impl IntoIterator<Item = StatusKind>) -> Self {
        self.status = Some(kinds.into_iter().collect());
        self
    }

    /// Sets [`RunFilter::workflow`].
    pub fn workflow(mut self, name: impl Into<String>) -> Self {
        self.workflow = Some(name.into());
        self
    }

    /// Sets [`RunFilter::version`].
    pub fn version(mut self, version: u32) -> Self {
        self.version = Some(version);
        self
    }

    /// Sets [`RunFilter::created_after`] and [`RunFilter::created_before`].
    pub fn created(mut self, after: Option<SystemTime>, before: Option<SystemTime>) -> Self {
        self.created_after = after;
        self.created_before = before;
        self
    }

    /// Sets [`RunFilter::parent`].
    pub fn parent(mut self, run_id: impl Into<String>) -> Self {
        self.parent = Some(run_id.into());
        self
    }

    /// Sets [`RunFilter::limit`].
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Sets [`RunFilter::after`].
    pub fn after(mut self, cursor: Option<Cursor>) -> Self {
        self.after = cursor;
        self
    }

    /// Oldest first.
    pub fn oldest_first(mut self) -> Self {
        self.newest_first = false;
        self
    }
}

/// Where the next page of a listing starts. Prints as a string and parses back
/// from it, so it can travel through a URL or a command line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cursor(ListCursor);

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Cursor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Cursor> {
        s.parse().map(Cursor).map_err(Error::InvalidArgument)
    }
}

/// One page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    /// The rows, in the filter's order.
    pub items: Vec<T>,
    /// The cursor of the next page; `None` when there is nothing more. A page can
    /// be shorter than the limit (a selective filter examined its budget of index
    /// entries) and still have a `next`.
    pub next: Option<Cursor>,
}

/// A bound as the store compares it: whole milliseconds since the epoch, where
/// runs' start times are kept. Rounded up, so a bound inside a millisecond
/// keeps the runs started in it on the side they are reported on
/// ([`RunInfo::created_at`] is that millisecond): before a later bound, not at
/// or after it.
fn bound_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        if d.subsec_nanos() % 1_000_000 == 0 {
            ms
        } else {
            ms.saturating_add(1)
        }
    })
}

impl Host {
    /// One page of runs passing `filter`, newest first unless the filter says
    /// otherwise, ordered by start time then run id. Reads indexes and metadata,
    /// never logs: a page costs the same with a million runs. Follow
    /// [`Page::next`] with [`RunFilter::after`] for the next page; a run never
    /// appears twice in one walk, and every run that existed when the walk began
    /// appears (a status filter sees a run where it stood when its page was read).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a limit of 0 or over
    /// [`RunFilter::MAX_LIMIT`], [`Error::Storage`].
    pub async fn list(&self, filter: RunFilter) -> Result<Page<RunInfo>> {
        if filter.limit == 0 || filter.limit > RunFilter::MAX_LIMIT {
            return Err(Error::InvalidArgument(format!(
                "a page holds 1 to {} runs, not {}",
                RunFilter::MAX_LIMIT,
                filter.limit
            )));
        }
        let query = RunQuery {
            status: filter.status,
            workflow: filter.workflow,
            version: filter.version,
            created_after: filter.created_after.map(bound_millis),
            created_before: filter.created_before.map(bound_millis),
            parent: filter.parent,
            limit: filter.limit,
            after: filter.after.map(|c| c.0),
            newest_first: filter.newest_first,
        };
        let page = self.core().list_page(query).await?;
        Ok(Page {
            items: page.items.into_iter().map(RunInfo::from).collect(),
            next: page.next.map(Cursor),
        })
    }

    /// How many runs are in each state (every state present, zeros included). The
    /// store keeps these counts as it writes, so this costs a few reads whatever
    /// the number of runs.
    ///
    /// # Errors
    /// [`Error::Storage`].
    pub async fn count(&self) -> Result<BTreeMap<StatusKind, u64>> {
        Ok(self.core().counts().await?)
    }
}
