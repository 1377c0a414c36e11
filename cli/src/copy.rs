//! `reel copy FROM TO`: copies a whole store into an empty one, offline (no host
//! may hold either). Each side is a store directory or a PostgreSQL URL
//! (`postgres://…`), so a service moves from the embedded store to Postgres (or
//! back) with one command.

use std::path::Path;
use std::sync::Arc;

use reel_storage::{FjallStore, StorageError, Store, copy_store};
use serde_json::json;

fn is_postgres(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

async fn open(s: &str, create: bool) -> Result<Arc<dyn Store>, String> {
    if is_postgres(s) {
        let pg = reel_postgres::PgStore::connect(s)
            .await
            .map_err(|e| format!("{s}: {}", reel::Error::from(e)))?;
        return Ok(pg);
    }
    let dir = Path::new(s);
    if !create && !FjallStore::exists(dir) {
        return Err(format!("no store at `{s}`"));
    }
    let path = dir.to_owned();
    let opened = tokio::task::spawn_blocking(move || FjallStore::open(path))
        .await
        .map_err(|e| e.to_string())?;
    opened.map(|f| f as Arc<dyn Store>).map_err(|e| match e {
        StorageError::Locked { .. } => format!(
            "`{s}`: {}; stop the host first (a copy is made offline)",
            reel::Error::from(e)
        ),
        e => format!("`{s}`: {}", reel::Error::from(e)),
    })
}

/// Copies `from` into `to` and prints what was copied.
pub(crate) fn copy(from: &str, to: &str, as_json: bool) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let source = open(from, false).await?;
        let target = match open(to, true).await {
            Ok(t) => t,
            Err(e) => {
                source.close();
                return Err(e);
            }
        };
        let copied = copy_store(&*source, &*target).await;
        let (s, t) = (source.clone(), target.clone());
        let _ = tokio::task::spawn_blocking(move || {
            s.close();
            t.close();
        })
        .await;
        let report = copied.map_err(|e| e.to_string())?;
        if as_json {
            let skipped: Vec<_> = report
                .skipped
                .iter()
                .map(|(what, why)| json!({ "what": what, "why": why }))
                .collect();
            let v = json!({
                "runs": report.runs, "records": report.records, "timers": report.timers,
                "schedules": report.schedules, "skipped": skipped,
            });
            println!("{v}");
        } else {
            println!(
                "copied {} runs ({} records, {} timers) and {} schedules",
                report.runs, report.records, report.timers, report.schedules
            );
            for (what, why) in &report.skipped {
                println!("skipped {what}: {why}");
            }
        }
        if report.skipped.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} damaged records were not copied (listed above)",
                report.skipped.len()
            ))
        }
    })
}
