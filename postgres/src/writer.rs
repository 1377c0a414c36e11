//! The group-commit writer: drains the queue, writes every append it took in one
//! transaction, answers each caller.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use deadpool_postgres::Pool;
use deadpool_postgres::{Object, Transaction};
use reel_storage::{CommitListener, Result, StorageError, WriterFences};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::error::SqlState;

use crate::encoded::Encoded;
use crate::listing::MetaRow;
use crate::rows::{get, seq_sql};
use crate::{partition_of, pg_err, tx_stmt};

const MAX_BATCH: usize = 4096;

pub(crate) struct Request {
    pub(crate) append: Encoded,
    pub(crate) reply: oneshot::Sender<Result<()>>,
}

/// Who the writer tells which logs a commit grew.
pub(crate) type Listener = Arc<RwLock<Option<Arc<dyn CommitListener>>>>;

pub(crate) async fn writer_loop(
    pool: Pool,
    mut rx: mpsc::UnboundedReceiver<Request>,
    listener: Listener,
    fence: Option<String>,
) {
    let mut pending = Vec::with_capacity(MAX_BATCH);
    let mut fences = WriterFences::default();
    while rx.recv_many(&mut pending, MAX_BATCH).await > 0 {
        let registered = listener.read().ok().and_then(|l| l.clone());
        let watching = registered.clone().filter(|l| l.wants());
        // What each append would grow its log to, told once it landed.
        let grows: Vec<Option<(String, u64)>> = match &watching {
            Some(_) => pending.iter().map(|r| r.append.grows()).collect(),
            None => Vec::new(),
        };
        let (replies, answers): (Vec<_>, Vec<_>) = std::mem::take(&mut pending)
            .into_iter()
            .map(|r| {
                let (tx, rx) = oneshot::channel();
                (
                    r.reply,
                    (
                        Request {
                            append: r.append,
                            reply: tx,
                        },
                        rx,
                    ),
                )
            })
            .unzip();
        let (mut requests, receivers): (Vec<_>, Vec<_>) = answers.into_iter().unzip();
        commit(&pool, &mut requests, fence.as_deref(), &mut fences).await;
        // A watch taken during this batch may have read a log before the commit:
        // what grew was not collected, so it must re-read (told before any answer,
        // as `grew` is).
        if watching.is_none()
            && let Some(l) = registered.filter(|l| l.wants())
        {
            l.missed();
        }
        for (i, (reply, rx)) in replies.into_iter().zip(receivers).enumerate() {
            let outcome = rx.await.unwrap_or(Err(StorageError::Closed));
            if outcome.is_ok()
                && let (Some(l), Some(Some((run_id, next)))) = (&watching, grows.get(i))
            {
                l.grew(run_id, *next);
            }
            let _ = reply.send(outcome);
        }
    }
}

/// Answers `req` with `outcome`, fencing its writer when it is refused
/// (`WriterFences`).
fn answer(req: Request, outcome: Result<()>, fences: &mut WriterFences) {
    if outcome.is_err() {
        fences.fence(req.append.writer);
    }
    let _ = req.reply.send(outcome);
}

async fn commit(
    pool: &Pool,
    pending: &mut Vec<Request>,
    fence: Option<&str>,
    fences: &mut WriterFences,
) {
    let mut client = match get(pool).await {
        Ok(c) => c,
        Err(e) => {
            for req in pending.drain(..) {
                answer(req, Err(e.clone_io()), fences);
            }
            return;
        }
    };
    let appends: Vec<&Encoded> = pending.iter().map(|r| &r.append).collect();
    match write(&mut client, &appends, fence, fences).await {
        Ok(outcomes) => {
            for (req, outcome) in pending.drain(..).zip(outcomes) {
                answer(req, outcome, fences);
            }
        }
        Err(e)
            if transient(&e)
                || (matches!(e, StorageError::Conflict { .. }) && pending.len() > 1) =>
        {
            tracing::debug!(error = %e, "reel-postgres: batch failed, writing its appends one by one");
            for req in pending.drain(..) {
                let mut attempts = 1;
                let outcome = loop {
                    let outcome = match write(&mut client, &[&req.append], fence, fences).await {
                        Ok(mut o) => o.pop().unwrap_or(Ok(())),
                        Err(e) => Err(e),
                    };
                    match outcome {
                        Err(e) if transient(&e) && attempts < TRANSIENT_ATTEMPTS => attempts += 1,
                        outcome => break outcome,
                    }
                };
                answer(req, outcome, fences);
            }
        }
        Err(e) => {
            for req in pending.drain(..) {
                answer(req, Err(e.clone_io()), fences);
            }
        }
    }
}

/// Clones the errors the writer answers several callers with.
trait CloneIo {
    fn clone_io(&self) -> StorageError;
}

impl CloneIo for StorageError {
    fn clone_io(&self) -> StorageError {
        match self {
            StorageError::Closed => StorageError::Closed,
            StorageError::Conflict {
                run_id,
                expected,
                actual,
            } => StorageError::Conflict {
                run_id: run_id.clone(),
                expected: *expected,
                actual: *actual,
            },
            StorageError::NotOwner { run_id, partition } => StorageError::NotOwner {
                run_id: run_id.clone(),
                partition: *partition,
            },
            e => StorageError::Io(e.to_string()),
        }
    }
}

/// Writes `appends` in one transaction. Appends whose expected sequence number does
/// not match get a conflict in their slot of the answer and are left out; so do
/// appends to runs of partitions this host does not lease, when it is one of
/// several (`fence` is its host id): they get [`StorageError::NotOwner`]. A
/// creation needs no lease, but the lease of its partition is checked (and locked)
/// all the same: one this host does not hold gets a wake-up posted to the owner
/// (`Encoded::mail_to_post`). The appends of a writer in `fences`, or one of
/// whose appends in this batch is refused, get a conflict too (`WriterFences`).
/// The error is for the transaction as a whole.
async fn write(
    client: &mut Object,
    appends: &[&Encoded],
    fence: Option<&str>,
    fences: &WriterFences,
) -> Result<Vec<Result<()>>> {
    let tx = client.transaction().await.map_err(|e| pg_err(&e))?;
    // Statements that do not depend on each other are issued together: the
    // connection pipelines them, one round trip for the lot.
    let lazy = async {
        if !appends.iter().any(|a| a.durable) {
            // Still reaches the server (survives a crash of this process), made
            // durable by the next synchronous commit, which is ordered after it.
            tx.batch_execute("SET LOCAL synchronous_commit = off")
                .await
                .map_err(|e| pg_err(&e))?;
        }
        Ok(())
    };
    let fenced: Vec<i16> = match fence {
        Some(_) => {
            let mut parts: Vec<i16> = appends.iter().map(|a| partition_of(&a.run_id)).collect();
            parts.sort_unstable();
            parts.dedup();
            parts
        }
        None => Vec::new(),
    };
    let leased = async {
        match fence {
            Some(host) => crate::membership::fence(&tx, host, &fenced).await,
            None => Ok(Default::default()),
        }
    };
    let ((), mut next, leased) = tokio::try_join!(lazy, next_seqs(&tx, appends), leased)?;
    let mut outcomes = Vec::with_capacity(appends.len());
    let (mut log_runs, mut log_seqs, mut log_parts, mut log_records) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // The last metadata of each run in the batch, and each timer key's final presence:
    // the same end state as applying the appends one after the other.
    let mut metas: BTreeMap<&str, &(Vec<u8>, bool, MetaRow)> = BTreeMap::new();
    let mut timers: HashMap<&[u8], Option<(&str, u64)>> = HashMap::new();
    let mut mails: Vec<(i16, &str, &[u8])> = Vec::new();
    // Writers with an append refused in this batch.
    let mut refused = WriterFences::default();
    for a in appends {
        let part = partition_of(&a.run_id);
        // One host alone (no fence) owns every partition.
        let owned = fence.is_none() || leased.contains(&part);
        if !owned && !a.creates() {
            refused.fence(a.writer);
            outcomes.push(Err(StorageError::NotOwner {
                run_id: a.run_id.clone(),
                partition: u16::try_from(part).unwrap_or(0),
            }));
            continue;
        }
        let actual = next.get(a.run_id.as_str()).copied().unwrap_or(0);
        let Ok(checked) = refused.check(a.writer, a.expected_seq, fences.refuses(a.writer), || {
            Ok::<_, std::convert::Infallible>(actual)
        });
        match checked {
            Err((expected, actual)) => {
                outcomes.push(Err(StorageError::Conflict {
                    run_id: a.run_id.clone(),
                    expected,
                    actual,
                }));
                continue;
            }
            Ok(None) => {}
            Ok(Some(expected)) => {
                for (i, record) in a.records.iter().enumerate() {
                    log_runs.push(a.run_id.as_str());
                    log_seqs.push(seq_sql(expected + i as u64));
                    log_parts.push(part);
                    log_records.push(record.as_slice());
                }
                next.insert(a.run_id.as_str(), expected + a.records.len() as u64);
            }
        }
        if let Some(meta) = &a.meta {
            metas.insert(a.run_id.as_str(), meta);
        }
        if let Some(mail) = a.mail_to_post(owned) {
            mails.push((part, a.run_id.as_str(), mail));
        }
        for (to_part, to_run, letter) in &a.letters {
            mails.push((*to_part, to_run.as_str(), letter.as_slice()));
        }
        for key in &a.remove_timers {
            timers.insert(key.as_slice(), None);
        }
        for (key, run, fire_at) in &a.add_timers {
            timers.insert(key.as_slice(), Some((run.as_str(), *fire_at)));
        }
        outcomes.push(Ok(()));
    }
    let log = async {
        if !log_runs.is_empty() {
            tx.execute(
                &tx_stmt(
                    &tx,
                    "INSERT INTO reel_log (run_id, seq, part, record) \
                     SELECT * FROM unnest($1::text[], $2::bigint[], $3::smallint[], $4::bytea[])",
                )
                .await?,
                &[&log_runs, &log_seqs, &log_parts, &log_records],
            )
            .await
            .map_err(|e| conflict_or_io(&e, appends))?;
        }
        Ok(())
    };
    let notify = async {
        if fence.is_some() && !metas.is_empty() {
            // Hosts waiting on these runs (`result()` elsewhere) hear of the change
            // once this commits.
            let runs: Vec<&str> = metas.keys().copied().collect();
            tx.execute(
                &tx_stmt(
                    &tx,
                    "SELECT pg_notify('reel_changed', r) FROM unnest($1::text[]) AS r",
                )
                .await?,
                &[&runs],
            )
            .await
            .map_err(|e| pg_err(&e))?;
        }
        Ok(())
    };
    let (log, meta, timers, notify, mail) = tokio::join!(
        log,
        write_meta(&tx, &metas, appends),
        write_timers(&tx, &timers),
        notify,
        crate::membership::post_in(&tx, &mails)
    );
    cause([log, meta, timers, notify, mail])?;
    tx.commit().await.map_err(|e| pg_err(&e))?;
    Ok(outcomes)
}

/// The next sequence number of every run the batch appends events to.
async fn next_seqs<'a>(
    tx: &Transaction<'_>,
    appends: &[&'a Encoded],
) -> Result<HashMap<&'a str, u64>> {
    let mut runs: Vec<&str> = appends
        .iter()
        .filter(|a| a.expected_seq.is_some())
        .map(|a| a.run_id.as_str())
        .collect();
    runs.sort_unstable();
    runs.dedup();
    let mut next = HashMap::with_capacity(runs.len());
    if runs.is_empty() {
        return Ok(next);
    }
    let rows = tx
        .query(
            &tx_stmt(
                tx,
                // One backward index probe per run (a generic plan of `max(seq) ...
                // GROUP BY` may scan the table), in the order of `runs`.
                "SELECT (SELECT l.seq + 1 FROM reel_log l WHERE l.run_id = r.run_id \
                 ORDER BY l.seq DESC LIMIT 1) \
                 FROM unnest($1::text[]) WITH ORDINALITY AS r(run_id, n) ORDER BY r.n",
            )
            .await?,
            &[&runs],
        )
        .await
        .map_err(|e| pg_err(&e))?;
    for (run, row) in runs.iter().zip(&rows) {
        let seq: Option<i64> = row.get(0);
        next.insert(*run, seq.map_or(0, |s| u64::try_from(s).unwrap_or(0)));
    }
    Ok(next)
}

/// Attempts of one append whose transaction the server aborted for a deadlock or a
/// serialization failure.
const TRANSIENT_ATTEMPTS: u32 = 5;

/// The server aborted the transaction to resolve a deadlock (two hosts creating
/// one run at once take the same locks in different orders) or a serialization
/// failure: nothing of it landed, so it is written again.
fn transient(e: &StorageError) -> bool {
    [
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::T_R_SERIALIZATION_FAILURE,
    ]
    .iter()
    .any(|s| crate::has_sql_state(e, s))
}

/// The outcome of statements pipelined in one transaction. The first to fail makes
/// those after it fail with "current transaction is aborted" (25P02), and
/// whichever answer arrives first is not necessarily the cause: a conflict (a
/// duplicate key, which the batch retries append by append) is reported before any
/// other error, and any other before an aborted transaction.
fn cause<const N: usize>(results: [Result<()>; N]) -> Result<()> {
    let aborted = |e: &StorageError| crate::has_sql_state(e, &SqlState::IN_FAILED_SQL_TRANSACTION);
    let mut errors: Vec<StorageError> = results.into_iter().filter_map(Result::err).collect();
    errors.sort_by_key(|e| match e {
        StorageError::Conflict { .. } => 0,
        e if aborted(e) => 2,
        _ => 1,
    });
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A duplicate sequence number means another writer won the race since the check:
/// a conflict, of the append itself when it was alone, and otherwise of the batch,
/// whose appends are then retried one by one. (Only this error is retried: after
/// any other, such as a connection lost during `COMMIT`, the batch may have landed,
/// and a retry would report its own records as a conflict.)
fn conflict_or_io(e: &tokio_postgres::Error, appends: &[&Encoded]) -> StorageError {
    if e.code() != Some(&SqlState::UNIQUE_VIOLATION) {
        return pg_err(e);
    }
    let (run_id, expected) = match appends {
        [a] => (a.run_id.clone(), a.expected_seq.unwrap_or(0)),
        _ => (String::new(), 0),
    };
    StorageError::Conflict {
        run_id,
        expected,
        actual: expected + 1,
    }
}

async fn write_meta(
    tx: &Transaction<'_>,
    metas: &BTreeMap<&str, &(Vec<u8>, bool, MetaRow)>,
    appends: &[&Encoded],
) -> Result<()> {
    if metas.is_empty() {
        return Ok(());
    }
    let runs: Vec<&str> = metas.keys().copied().collect();
    let parts: Vec<i16> = runs.iter().map(|r| partition_of(r)).collect();
    let bytes: Vec<&[u8]> = metas.values().map(|m| m.0.as_slice()).collect();
    let rows: Vec<&MetaRow> = metas.values().map(|m| &m.2).collect();
    let created: Vec<i64> = rows.iter().map(|r| r.created_at).collect();
    let status: Vec<&str> = rows.iter().map(|r| r.status).collect();
    let workflow: Vec<&str> = rows.iter().map(|r| r.workflow.as_str()).collect();
    let version: Vec<i32> = rows.iter().map(|r| r.version).collect();
    let parent: Vec<Option<&str>> = rows.iter().map(|r| r.parent.as_deref()).collect();
    tx.execute(
        &tx_stmt(
            tx,
            "INSERT INTO reel_runs (run_id, part, meta, created_at, status, workflow, \
             version, parent) \
             SELECT * FROM unnest($1::text[], $2::smallint[], $3::bytea[], $4::bigint[], \
             $5::text[], $6::text[], $7::int[], $8::text[]) \
             ON CONFLICT (run_id) DO UPDATE SET meta = EXCLUDED.meta, \
             created_at = EXCLUDED.created_at, status = EXCLUDED.status, \
             workflow = EXCLUDED.workflow, version = EXCLUDED.version, \
             parent = EXCLUDED.parent",
        )
        .await?,
        &[
            &runs, &parts, &bytes, &created, &status, &workflow, &version, &parent,
        ],
    )
    .await
    .map_err(|e| pg_err(&e))?;
    let (mut live, mut live_parts, mut live_bytes, mut done) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut queues, mut keys) = (Vec::new(), Vec::new());
    for ((run, meta), part) in metas.iter().zip(&parts) {
        if meta.1 {
            done.push(*run);
        } else {
            live.push(*run);
            live_parts.push(*part);
            live_bytes.push(meta.0.as_slice());
            queues.push(meta.2.queue.as_deref());
            keys.push(meta.2.dedup_key.as_deref());
        }
    }
    if !done.is_empty() {
        tx.execute(
            &tx_stmt(tx, "DELETE FROM reel_active WHERE run_id = ANY($1)").await?,
            &[&done],
        )
        .await
        .map_err(|e| pg_err(&e))?;
    }
    if !live.is_empty() {
        tx.execute(
            &tx_stmt(
                tx,
                "INSERT INTO reel_active (run_id, part, meta, queue, dedup_key) \
             SELECT * FROM unnest($1::text[], $2::smallint[], $3::bytea[], $4::text[], \
             $5::text[]) \
             ON CONFLICT (run_id) DO UPDATE SET meta = EXCLUDED.meta, \
             queue = EXCLUDED.queue, dedup_key = EXCLUDED.dedup_key",
            )
            .await?,
            &[&live, &live_parts, &live_bytes, &queues, &keys],
        )
        .await
        // A de-duplication key another unfinished run holds: a conflict, as
        // for a taken run id (the batch is retried one append at a time).
        .map_err(|e| conflict_or_io(&e, appends))?;
    }
    Ok(())
}

async fn write_timers(
    tx: &Transaction<'_>,
    timers: &HashMap<&[u8], Option<(&str, u64)>>,
) -> Result<()> {
    let removed: Vec<&[u8]> = timers
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| *k)
        .collect();
    if !removed.is_empty() {
        tx.execute(
            &tx_stmt(tx, "DELETE FROM reel_timers WHERE key = ANY($1)").await?,
            &[&removed],
        )
        .await
        .map_err(|e| pg_err(&e))?;
    }
    let (mut keys, mut runs, mut parts, mut due) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (key, v) in timers {
        if let Some((run, fire_at)) = v {
            keys.push(*key);
            runs.push(*run);
            parts.push(partition_of(run));
            due.push(seq_sql(*fire_at));
        }
    }
    if !keys.is_empty() {
        tx.execute(
            &tx_stmt(
                tx,
                "INSERT INTO reel_timers (key, run_id, part, fire_at) \
             SELECT * FROM unnest($1::bytea[], $2::text[], $3::smallint[], $4::bigint[]) \
             ON CONFLICT (key) DO NOTHING",
            )
            .await?,
            &[&keys, &runs, &parts, &due],
        )
        .await
        .map_err(|e| pg_err(&e))?;
    }
    Ok(())
}
