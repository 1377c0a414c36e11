//! Listing and counting runs by index: the columns of `reel_runs` that the
//! writer fills from each run's metadata ([`MetaRow`]), the page query built
//! from a [`RunQuery`], the counts by state, and the backfill of those columns in
//! a database written before they existed.
//!
//! A page is one indexed range scan in `(created_at, run_id)` order, filtered in
//! the database, of at most the page plus one rows. A row whose metadata did not
//! decode when it was backfilled has no columns: it is read on the first page and
//! reported as corrupt there.

use std::collections::BTreeMap;

use deadpool_postgres::Object;
use reel_storage::listing::{ListCursor, MetaPage, RunQuery};
use reel_storage::{Result, RunMeta, StatusKind};
use tokio_postgres::types::ToSql;

use crate::pg_err;

/// The columns of a run's row that listing filters and sorts on.
#[derive(Clone, Debug)]
pub(crate) struct MetaRow {
    pub(crate) created_at: i64,
    pub(crate) status: &'static str,
    pub(crate) workflow: String,
    pub(crate) version: i32,
    pub(crate) parent: Option<String>,
    /// The run's queue and de-duplication key (`reel_active`).
    pub(crate) queue: Option<String>,
    pub(crate) dedup_key: Option<String>,
}

impl MetaRow {
    pub(crate) fn of(meta: &RunMeta) -> MetaRow {
        MetaRow {
            created_at: i64::try_from(meta.created_at).unwrap_or(i64::MAX),
            status: meta.state.kind().as_str(),
            workflow: meta.workflow.clone(),
            version: i32::try_from(meta.version).unwrap_or(i32::MAX),
            parent: meta.parent.as_ref().map(|p| p.run_id.clone()),
            queue: meta.queue.as_ref().map(|q| q.name.clone()),
            dedup_key: meta.queue.as_ref().and_then(|q| q.dedup_key.clone()),
        }
    }
}

/// One page of `query`.
pub(crate) async fn page(c: &Object, query: &RunQuery) -> Result<MetaPage> {
    let limit = query.limit.max(1);
    let mut filters: Vec<String> = Vec::new();
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    let mut param = |value: Box<dyn ToSql + Sync + Send>| {
        params.push(value);
        format!("${}", params.len())
    };
    if let Some(states) = &query.status {
        let states: Vec<String> = states.iter().map(|s| s.as_str().to_owned()).collect();
        filters.push(format!("status = ANY({}::text[])", param(Box::new(states))));
    }
    if let Some(w) = &query.workflow {
        filters.push(format!("workflow = {}", param(Box::new(w.clone()))));
    }
    if let Some(v) = query.version {
        let v = i32::try_from(v).unwrap_or(i32::MAX);
        filters.push(format!("version = {}", param(Box::new(v))));
    }
    if let Some(t) = query.created_after {
        let t = i64::try_from(t).unwrap_or(i64::MAX);
        filters.push(format!("created_at >= {}", param(Box::new(t))));
    }
    if let Some(t) = query.created_before {
        let t = i64::try_from(t).unwrap_or(i64::MAX);
        filters.push(format!("created_at < {}", param(Box::new(t))));
    }
    if let Some(p) = &query.parent {
        filters.push(format!("parent = {}", param(Box::new(p.clone()))));
    }
    let (cmp, dir) = if query.newest_first {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    let mut conditions = vec![match filters.is_empty() {
        true => "TRUE".to_owned(),
        false => filters.join(" AND "),
    }];
    let mut damaged = "status IS NULL";
    if let Some(after) = &query.after {
        let ms = i64::try_from(after.created_ms).unwrap_or(i64::MAX);
        let (ms, run) = (param(Box::new(ms)), param(Box::new(after.run_id.clone())));
        conditions.push(format!("(created_at, run_id) {cmp} ({ms}, {run})"));
        // Reported on the first page only.
        damaged = "FALSE";
    }
    let limit_param = param(Box::new(i64::try_from(limit + 1).unwrap_or(i64::MAX)));
    let sql = format!(
        "(SELECT run_id, meta FROM reel_runs WHERE {} \
         ORDER BY created_at {dir}, run_id {dir} LIMIT {limit_param}) \
         UNION ALL (SELECT run_id, meta FROM reel_runs WHERE {damaged})",
        conditions.join(" AND "),
    );
    let refs: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let rows = c.query(&sql, &refs).await.map_err(|e| pg_err(&e))?;
    let scan = crate::rows::scan_meta("runs", &rows);
    let mut page = MetaPage {
        corrupt: scan.corrupt,
        ..MetaPage::default()
    };
    // The union keeps no order; rows of the damaged branch that still decode
    // (none, once backfilled) are not of this page.
    let mut items = scan.items;
    items.sort_by(|a, b| query.order(&ListCursor::of(a), &ListCursor::of(b)));
    let mut rows = items
        .into_iter()
        .filter(|m| query.matches(m) && query.is_past_cursor(&ListCursor::of(m)));
    for m in rows.by_ref().take(limit) {
        page.items.push(m);
    }
    if rows.next().is_some() {
        page.next = page.items.last().map(ListCursor::of);
    }
    Ok(page)
}

/// Runs in each state, every state present.
pub(crate) async fn counts(c: &Object) -> Result<BTreeMap<StatusKind, u64>> {
    let rows = c
        .query(
            "SELECT status, count(*) FROM reel_runs WHERE status IS NOT NULL GROUP BY status",
            &[],
        )
        .await
        .map_err(|e| pg_err(&e))?;
    let mut counts: BTreeMap<StatusKind, u64> =
        StatusKind::ALL.into_iter().map(|k| (k, 0)).collect();
    for row in rows {
        let status: &str = row.get(0);
        let n: i64 = row.get(1);
        if let Ok(kind) = status.parse::<StatusKind>() {
            *counts.entry(kind).or_default() += u64::try_from(n).unwrap_or(0);
        }
    }
    Ok(counts)
}

/// Fills the listing columns of rows written before they existed, decoding each
/// row's metadata here (a row that does not decode keeps none).
pub(crate) async fn backfill(tx: &tokio_postgres::Transaction<'_>) -> Result<()> {
    let rows = tx
        .query(
            "SELECT run_id, meta FROM reel_runs WHERE status IS NULL",
            &[],
        )
        .await
        .map_err(|e| pg_err(&e))?;
    let scan = crate::rows::scan_meta("runs", &rows);
    for chunk in scan.items.chunks(1000) {
        let rows: Vec<MetaRow> = chunk.iter().map(MetaRow::of).collect();
        let ids: Vec<&str> = chunk.iter().map(|m| m.run_id.as_str()).collect();
        let created: Vec<i64> = rows.iter().map(|r| r.created_at).collect();
        let status: Vec<&str> = rows.iter().map(|r| r.status).collect();
        let workflow: Vec<&str> = rows.iter().map(|r| r.workflow.as_str()).collect();
        let version: Vec<i32> = rows.iter().map(|r| r.version).collect();
        let parent: Vec<Option<&str>> = rows.iter().map(|r| r.parent.as_deref()).collect();
        tx.execute(
            "UPDATE reel_runs AS r SET created_at = v.created_at, status = v.status, \
             workflow = v.workflow, version = v.version, parent = v.parent \
             FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::int[], \
             $6::text[]) AS v(run_id, created_at, status, workflow, version, parent) \
             WHERE r.run_id = v.run_id",
            &[&ids, &created, &status, &workflow, &version, &parent],
        )
        .await
        .map_err(|e| pg_err(&e))?;
    }
    Ok(())
}
