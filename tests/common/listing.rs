//! Reading `Host::list` to its end.

use reel::{Cursor, Host, RunFilter, RunInfo};

/// Every page of `filter`, following the cursors (as strings); each page holds
/// no more than the filter's limit.
pub async fn walk(host: &Host, filter: RunFilter) -> anyhow::Result<Vec<RunInfo>> {
    let mut all = Vec::new();
    let mut after: Option<Cursor> = None;
    for _ in 0..1_000_000 {
        let page = host.list(filter.clone().after(after.take())).await?;
        anyhow::ensure!(page.items.len() <= filter.limit, "page over its limit");
        all.extend(page.items);
        match page.next {
            Some(next) => after = Some(next.to_string().parse()?),
            None => return Ok(all),
        }
    }
    anyhow::bail!("a listing did not end")
}

/// The rows are in the listing's order: by creation time, then id, strictly.
pub fn assert_sorted(rows: &[RunInfo], newest_first: bool) {
    for pair in rows.windows(2) {
        let a = (pair[0].created_at, &pair[0].run_id);
        let b = (pair[1].created_at, &pair[1].run_id);
        if newest_first {
            assert!(a > b, "{a:?} listed before {b:?} newest first");
        } else {
            assert!(a < b, "{a:?} listed before {b:?} oldest first");
        }
    }
}
