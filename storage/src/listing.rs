//! Listing runs page by page: the query every backend answers
//! ([`MetaReader::list_page`](crate::MetaReader::list_page)), the cursor that
//! continues it, and the order every backend lists in.
//!
//! Runs are listed by creation time, then run id: an order that never changes for a
//! run (a status change does not move it), so a cursor (the last position seen)
//! continues a listing without repeating or skipping a run that existed when the
//! listing started, whatever else changes meanwhile. A run started during the
//! listing shows up only if its position is still ahead.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::{CorruptRecord, RunMeta, StatusKind};

/// How many index entries a backend examines at most for one page beyond the
/// page's own rows. A selective filter (a workflow name the index does not cover)
/// can leave a page short; its cursor continues where the examination stopped.
pub const SCAN_BUDGET: usize = 10_000;

/// One page request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs in one of these states (`None`: any).
    pub status: Option<Vec<StatusKind>>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs of this workflow version (with or without `workflow`).
    pub version: Option<u32>,
    /// Only runs created at or after this time (Unix ms).
    pub created_after: Option<u64>,
    /// Only runs created before this time (Unix ms).
    pub created_before: Option<u64>,
    /// Only the children of this run.
    pub parent: Option<String>,
    /// Rows per page, at least 1.
    pub limit: usize,
    /// Continue after this position.
    pub after: Option<ListCursor>,
    /// Newest first (else oldest first).
    pub newest_first: bool,
}

impl RunQuery {
    /// Whether `meta` passes every filter (the cursor and the limit aside).
    pub fn matches(&self, meta: &RunMeta) -> bool {
        self.status
            .as_ref()
            .is_none_or(|s| s.contains(&meta.state.kind()))
            && self.workflow.as_ref().is_none_or(|w| *w == meta.workflow)
            && self.version.is_none_or(|v| v == meta.version)
            && self.created_after.is_none_or(|t| meta.created_at >= t)
            && self.created_before.is_none_or(|t| meta.created_at < t)
            && self
                .parent
                .as_ref()
                .is_none_or(|p| meta.parent.as_ref().is_some_and(|l| l.run_id == *p))
    }

    /// Whether `position` comes after the cursor in this query's order.
    pub fn is_past_cursor(&self, position: &ListCursor) -> bool {
        match &self.after {
            None => true,
            Some(after) => self.order(position, after) == Ordering::Greater,
        }
    }

    /// Compares two positions in this query's order.
    pub fn order(&self, a: &ListCursor, b: &ListCursor) -> Ordering {
        let natural = a.cmp(b);
        if self.newest_first {
            natural.reverse()
        } else {
            natural
        }
    }
}

/// A position in a listing: a run's creation time and id. Prints as
/// `<created ms>:<run id>` and parses back from it, so it can travel through a URL
/// or a command line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListCursor {
    /// The run's creation time, Unix ms.
    pub created_ms: u64,
    /// The run id.
    pub run_id: String,
}

impl ListCursor {
    /// The position of a run.
    pub fn of(meta: &RunMeta) -> ListCursor {
        ListCursor {
            created_ms: meta.created_at,
            run_id: meta.run_id.clone(),
        }
    }
}

impl fmt::Display for ListCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.created_ms, self.run_id)
    }
}

impl FromStr for ListCursor {
    type Err = String;

    fn from_str(s: &str) -> Result<ListCursor, String> {
        let bad = || format!("malformed cursor `{s}` (expected `<created ms>:<run id>`)");
        let (ms, run_id) = s.split_once(':').ok_or_else(bad)?;
        let created_ms = ms.parse().map_err(|_| bad())?;
        if run_id.is_empty() {
            return Err(bad());
        }
        Ok(ListCursor {
            created_ms,
            run_id: run_id.to_owned(),
        })
    }
}

/// One page of runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaPage {
    /// The runs, in the query's order.
    pub items: Vec<RunMeta>,
    /// Where the next page starts; `None` when nothing is left.
    pub next: Option<ListCursor>,
    /// Records met on the way that do not decode (left out of `items`).
    pub corrupt: Vec<CorruptRecord>,
}

/// A page cut from runs already sorted in the query's order and past its cursor:
/// what a backend without indexes (the in-memory store) answers.
pub fn page_of_sorted(query: &RunQuery, sorted: impl Iterator<Item = RunMeta>) -> MetaPage {
    let limit = query.limit.max(1);
    let mut page = MetaPage::default();
    let mut rows = sorted.filter(|m| query.matches(m)).peekable();
    while page.items.len() < limit {
        match rows.next() {
            Some(m) => page.items.push(m),
            None => break,
        }
    }
    if rows.peek().is_some() {
        page.next = page.items.last().map(ListCursor::of);
    }
    page
}
