//! [`AnyRun::watch`]: a run's log as a stream, the records already there and then
//! each one as it lands, read from the store (so every record comes exactly once,
//! in order, with the time it was appended), ending after the run's terminal
//! record. The store tells the host when a watched log grows; a watcher that reads
//! slowly only falls behind in the store, never holds the run up.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::Stream;
use reel_actors::LogWatch;
use reel_storage::{Event, Record};

use crate::{AnyRun, Error, Result};

/// A follower of one run's log.
struct Follow {
    run: AnyRun,
    /// The sequence number of the next record to yield.
    next: u64,
    watch: Option<LogWatch>,
    buffer: VecDeque<Record>,
    done: bool,
    /// When the watched run was created, once seen: a run of the same id created
    /// at another time is another run (the watched one was deleted and its id
    /// used again), whose records the watch never yields.
    created_at: Option<u64>,
}

fn ends_run(event: &Event) -> bool {
    matches!(
        event,
        Event::RunCompleted { .. } | Event::RunFailed { .. } | Event::RunCancelled { .. }
    )
}

impl Follow {
    /// Whether the run of this id is still the one watched (not deleted, nor
    /// deleted and created again).
    async fn same_run(&self, core: &reel_actors::Core) -> bool {
        matches!(
            core.meta(&self.run.run_id).await,
            Ok(Some(meta)) if Some(meta.created_at) == self.created_at
        )
    }

    /// The next item, or `None` once the stream is over.
    async fn next_item(&mut self) -> Option<Result<Record>> {
        if self.done {
            return None;
        }
        let item = self.advance().await;
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }

    async fn advance(&mut self) -> Option<Result<Record>> {
        loop {
            if let Some(record) = self.buffer.pop_front() {
                if ends_run(&record.event) {
                    self.done = true;
                }
                return Some(Ok(record));
            }
            let core = match self.run.core() {
                Ok(core) => core.clone(),
                Err(e) => return Some(Err(e)),
            };
            let run_id = &self.run.run_id;
            if self.watch.is_none() {
                // Before the first read, so nothing lands unseen in between.
                match core.watch_log(run_id) {
                    Ok(w) => self.watch = Some(w),
                    Err(e) => return Some(Err(e.into())),
                }
            }
            // The state before the records: a run seen finished here has all its
            // records readable (they land in the batch that finishes it).
            let finished = match core.meta(run_id).await {
                Ok(Some(meta)) if self.created_at.is_some_and(|c| c != meta.created_at) => {
                    // Deleted while watched, and its id used again.
                    return None;
                }
                Ok(Some(meta)) => {
                    self.created_at = Some(meta.created_at);
                    meta.state.is_finished()
                }
                Ok(None) if self.next == 0 && self.created_at.is_none() => {
                    return Some(Err(Error::UnknownRun(run_id.to_string())));
                }
                // Deleted while watched.
                Ok(None) => return None,
                Err(e) => return Some(Err(e.into())),
            };
            match core.records_from(run_id, self.next).await {
                Err(e) => return Some(Err(e.into())),
                Ok(records) => {
                    if !records.is_empty() && !self.same_run(&core).await {
                        // Deleted and created again between the two reads.
                        return None;
                    }
                    if let Some(last) = records.last() {
                        self.next = last.seq + 1;
                        self.buffer.extend(records);
                        continue;
                    }
                }
            }
            if finished {
                // Started past the terminal record.
                return None;
            }
            let watch = self.watch.as_mut()?;
            if let Err(e) = watch.changed().await {
                return Some(Err(e.into()));
            }
        }
    }
}

impl AnyRun {
    /// The run's log as a stream of [`Record`]s: what is in the log now, then each
    /// record as it lands, ending after the record that ends the run
    /// (`RunCompleted`, `RunFailed` or `RunCancelled`; a `ContinuedAsNew` does not
    /// end it: the next segment follows). Every record comes once, in order, read
    /// from the store: a watcher that reads slowly falls behind without holding the
    /// run up or missing anything. Any number of watchers; watching wakes nothing
    /// (a passivated run stays passivated until something else wakes it).
    ///
    /// # Errors
    /// Items: [`Error::UnknownRun`] (first item, then the stream ends),
    /// [`Error::Storage`] (a corrupt record), [`Error::Shutdown`] when the host
    /// shuts down while the run is watched; the stream ends after an error.
    pub fn watch(&self) -> impl Stream<Item = Result<Record>> + Send + 'static {
        self.watch_from(0)
    }

    /// [`AnyRun::watch`] from sequence number `seq` on: resumes a watch after a
    /// disconnect (pass the last seen `seq + 1`). Past the end of a finished run's
    /// log the stream ends at once. A sequence number names no run of an id: if
    /// the run was deleted and its id used again meanwhile, this reads the new
    /// run (a watch that stays connected ends when its run is deleted). To resume
    /// the watch of one run, whatever became of its id, use
    /// [`AnyRun::watch_run_from`].
    ///
    /// # Errors
    /// As [`AnyRun::watch`].
    pub fn watch_from(&self, seq: u64) -> impl Stream<Item = Result<Record>> + Send + 'static {
        self.follow(seq, None)
    }

    /// [`AnyRun::watch_from`] that keeps to the run created at `created_at`
    /// ([`RunInfo::created_at`](crate::RunInfo), read when the watch began): a
    /// resume after that run was deleted ends at once, also when its id has been
    /// used again by a new run, whose records it never reads.
    ///
    /// # Errors
    /// As [`AnyRun::watch`], but a run that is gone ends the stream (as when it is
    /// deleted while watched) rather than [`Error::UnknownRun`].
    pub fn watch_run_from(
        &self,
        created_at: SystemTime,
        seq: u64,
    ) -> impl Stream<Item = Result<Record>> + Send + 'static {
        let ms = created_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.follow(seq, Some(ms))
    }

    fn follow(
        &self,
        seq: u64,
        created_at: Option<u64>,
    ) -> impl Stream<Item = Result<Record>> + Send + 'static {
        let follow = Follow {
            run: self.clone(),
            next: seq,
            watch: None,
            buffer: VecDeque::new(),
            done: false,
            created_at,
        };
        futures::stream::unfold(follow, |mut f| async move {
            let item = f.next_item().await?;
            Some((item, f))
        })
    }
}
