//! Scenario 6, listing: `Host::list` (a page of 50, unfiltered, by status and by
//! workflow) and `Host::count` over a store holding 1,000,000 runs, against raw
//! fjall on the same directory: reading the first 50 metadata records (what a page
//! cannot beat) and scanning every one (what listing or counting cost before the
//! indexes).
//!
//! The runs are written as metadata only, straight through the store's writer
//! (which keeps the indexes and counts as for any run), a third each suspended,
//! completed and failed, of three workflows: starting a million real runs would
//! measure starts, not listing.

use std::time::{Duration, Instant, UNIX_EPOCH};

use futures::future::try_join_all;
use reel::{Failure, FjallStore, Host, RunFilter, StatusKind, Store};
use reel_storage::{Append, LogWriter, RunMeta, RunState};

use crate::Config;
use crate::util::*;

fn meta(i: usize, now_ms: u64) -> RunMeta {
    let state = match i % 3 {
        0 => RunState::Suspended {
            waiting_on: "signal `go`".into(),
            awaits_child: false,
        },
        1 => RunState::Completed,
        _ => RunState::Failed {
            error: Failure::Other("boom".into()),
        },
    };
    RunMeta {
        run_id: format!("run-{i:08}"),
        workflow: ["checkout", "refund", "export"][i / 3 % 3].to_owned(),
        version: 1,
        state,
        created_at: now_ms + (i / 100) as u64,
        updated_at: now_ms + (i / 100) as u64,
        parent: None,
        segment_start: 0,
        segment: 0,
        queue: None,
    }
}

async fn populate(store: &FjallStore, runs: usize) -> BenchResult<()> {
    let now_ms = UNIX_EPOCH.elapsed()?.as_millis() as u64;
    for chunk in (0..runs).collect::<Vec<_>>().chunks(8_192) {
        let tickets = chunk.iter().map(|&i| {
            let m = meta(i, now_ms);
            store.submit(Append {
                run_id: m.run_id.clone(),
                meta: Some(m),
                durable: false,
                ..Append::default()
            })
        });
        try_join_all(tickets).await?;
    }
    Ok(())
}

/// Median ms of `n` calls of `f`.
async fn timed<F, Fut, T>(n: usize, mut f: F) -> BenchResult<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = reel::Result<T>>,
{
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f().await?;
        times.push(ms(t.elapsed()));
    }
    Ok(median(times))
}

struct Listing {
    page: f64,
    by_status: f64,
    by_workflow: f64,
    deep: f64,
    count: f64,
}

async fn reel_listing(path: &std::path::Path, runs: usize) -> BenchResult<Listing> {
    let store = FjallStore::open(path)?;
    let t = Instant::now();
    populate(&store, runs).await?;
    store.close();
    drop(store);
    println!(
        "  wrote {runs} runs' metadata (and indexes) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let host = Host::builder().path(path).build().await?;
    let counts = host.count().await?;
    let total: u64 = counts.values().sum();
    if total != runs as u64 {
        return Err(format!("count() says {total} runs, {runs} written").into());
    }
    let page = timed(50, || host.list(RunFilter::default())).await?;
    let by_status = timed(50, || {
        host.list(RunFilter::default().status([StatusKind::Failed]))
    })
    .await?;
    let by_workflow = timed(50, || host.list(RunFilter::default().workflow("refund"))).await?;
    // The 20th page of a walk, oldest first.
    let mut after = None;
    for _ in 0..19 {
        after = host
            .list(RunFilter::default().oldest_first().after(after))
            .await?
            .next;
    }
    let deep = timed(50, || {
        host.list(RunFilter::default().oldest_first().after(after.clone()))
    })
    .await?;
    let count = timed(50, || host.count()).await?;
    host.shutdown().await?;
    Ok(Listing {
        page,
        by_status,
        by_workflow,
        deep,
        count,
    })
}

/// (first 50 records, every record) of the `runs` keyspace, decoded, in ms.
fn raw_listing(path: &std::path::Path) -> BenchResult<(f64, f64)> {
    let db = fjall::Database::builder(path).open()?;
    let runs = db.keyspace("runs", fjall::KeyspaceCreateOptions::default)?;
    let mut first = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        for g in runs.iter().take(50) {
            let (k, v) = g.into_inner()?;
            RunMeta::decode("runs", &k, &v).map_err(|e| e.to_string())?;
        }
        first.push(ms(t.elapsed()));
    }
    let mut all = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut n = 0usize;
        for g in runs.iter() {
            let (k, v) = g.into_inner()?;
            RunMeta::decode("runs", &k, &v).map_err(|e| e.to_string())?;
            n += 1;
        }
        std::hint::black_box(n);
        all.push(ms(t.elapsed()));
    }
    Ok((median(first), median(all)))
}

pub(crate) fn listing(rt: &tokio::runtime::Runtime, cfg: &Config) -> Vec<Row> {
    let runs = cfg.listing_runs;
    println!("\n## listing: list and count over {runs} runs");
    let target = "no scan: flat in the number of runs".to_owned();
    let dir = temp_dir();
    let reel = match rt.block_on(within(
        Duration::from_secs(600),
        "the listing scenario",
        reel_listing(dir.path(), runs),
    )) {
        Ok(r) => r,
        Err(e) => return vec![Row::failed("listing", &target, &e)],
    };
    let (raw_page, raw_all) = match raw_listing(dir.path()) {
        Ok(r) => r,
        Err(e) => return vec![Row::failed("listing (raw)", &target, &e)],
    };
    println!(
        "  list page of 50: {:.3} ms; by status {:.3} ms; by workflow {:.3} ms; 20th page {:.3} ms; count {:.3} ms",
        reel.page, reel.by_status, reel.by_workflow, reel.deep, reel.count
    );
    println!(
        "  raw fjall: first 50 records {raw_page:.3} ms; scan of all {runs} records {raw_all:.1} ms"
    );
    let row = |scenario: String, reel_ms: f64, raw: String, raw_ms: f64| Row {
        scenario,
        reel: format!("{reel_ms:.3} ms"),
        raw,
        ratio: format!("{:.2}x", reel_ms / raw_ms),
        target: target.clone(),
    };
    vec![
        row(
            format!("list, page of 50 of {runs} runs"),
            reel.page,
            format!("{raw_page:.3} ms (50 records)"),
            raw_page,
        ),
        row(
            format!("list, page of 50 failed runs of {runs}"),
            reel.by_status,
            format!("{raw_page:.3} ms (50 records)"),
            raw_page,
        ),
        row(
            format!("list, page of 50 of one workflow of {runs}"),
            reel.by_workflow,
            format!("{raw_page:.3} ms (50 records)"),
            raw_page,
        ),
        row(
            format!("list, 20th page of {runs}"),
            reel.deep,
            format!("{raw_page:.3} ms (50 records)"),
            raw_page,
        ),
        row(
            format!("count per status, {runs} runs"),
            reel.count,
            format!("{raw_all:.1} ms (scan of all)"),
            raw_all,
        ),
    ]
}
