//! The inbox of a host that shares its store: the mail other hosts post for runs
//! owned here (signals, cancels, wake-ups, operations), applied oldest first, a
//! batch of runs at a time. One drain reads at a time ([`InboxTurn`]); a drain
//! asked for while one is under way makes that one read again. `cluster` starts
//! the drains (on the backend's notices and on a periodic poll). A run
//! acknowledges the letters whose signals landed in a log segment before it ends
//! it (`ack_letters`); `gone` keeps those for the reads that may hold them.

mod gone;

use reel_storage::{Letter, Mail};

use super::*;
use crate::message::{Lettered, Pause, Retry, Unpause};

/// Letters taken from the inbox at a time.
const LETTERS: usize = 256;

/// Runs whose letters are applied at once.
const APPLY_AT_ONCE: usize = 64;

/// Whose turn it is to read the inbox. A drain asked for while another is under
/// way is not dropped: the one under way reads again before it ends (a letter
/// may have landed after its last read).
#[derive(Debug, Default)]
pub(crate) struct InboxTurn {
    /// (a drain is under way, it must read again)
    state: Mutex<(bool, bool)>,
    /// Reads of the inbox begun and ended (one drain at a time, so they end in
    /// the order they began).
    reads_begun: std::sync::atomic::AtomicU64,
    reads_ended: std::sync::atomic::AtomicU64,
    /// Told when a read ends.
    read_ended: tokio::sync::Notify,
    /// Letters their runs acknowledged, while a read may hold them.
    gone: gone::Gone,
}

impl InboxTurn {
    /// The turn, or `None` when a drain is under way (which now reads again).
    fn take(&self) -> Option<Turn<'_>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.0 {
            state.1 = true;
            return None;
        }
        *state = (true, false);
        Some(Turn(self))
    }
}

/// A drain's turn; dropping it (a drain cut short too) ends the turn.
struct Turn<'a>(&'a InboxTurn);

impl Turn<'_> {
    /// Whether someone asked for a drain since the last read: then the turn goes
    /// on, and the caller reads again.
    fn again(&self) -> bool {
        let mut state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut state.1)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.0.state.lock().unwrap_or_else(|p| p.into_inner()) = (false, false);
    }
}

/// Ends a read of the inbox when dropped: counts it and tells the waiters.
struct ReadEnds<'a>(&'a InboxTurn);

impl Drop for ReadEnds<'_> {
    fn drop(&mut self) {
        let ended = self.0.reads_ended.fetch_add(1, Ordering::SeqCst) + 1;
        self.0.gone.read_ended(ended);
        self.0.read_ended.notify_waiters();
    }
}

impl Core {
    /// Applies the mail other hosts posted for runs owned here, oldest first.
    pub(crate) async fn drain_inbox(&self) {
        let Some(turn) = self.inbox.take() else {
            // Another drain is under way: it reads again before it ends.
            return;
        };
        self.drain_turn(turn).await;
    }

    async fn drain_turn(&self, turn: Turn<'_>) {
        loop {
            self.drain_once().await;
            if !turn.again() || self.is_closing() {
                return;
            }
        }
    }

    /// Before this host hands a run it owns something directly (a signal), applies
    /// the letters other hosts posted earlier, so that a run sees what one client
    /// sent through several hosts in the order it was sent: waits until a read of
    /// the inbox begun after this call has ended (its own, or that of a drain
    /// under way, which reads again). Nothing on a store of its own, or for a run
    /// owned elsewhere (its letters go the same way as this one's). A letter that
    /// cannot be read or applied now stays for the next drain.
    pub(crate) async fn settle_inbox_for(&self, run_id: &str) {
        if self.cluster().is_none() || self.owned_elsewhere(run_id) {
            return;
        }
        let after = self.inbox.reads_begun.load(Ordering::SeqCst);
        loop {
            let ended = self.inbox.read_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.inbox.reads_ended.load(Ordering::SeqCst) > after || self.is_closing() {
                return;
            }
            match self.inbox.take() {
                Some(turn) => {
                    // One read of its own, not the whole turn: under a stream of
                    // requests a turn may go on for long. What was asked meanwhile
                    // is drained by a task.
                    self.drain_once().await;
                    let again = turn.again();
                    drop(turn);
                    if again && let Some(core) = self.me.upgrade() {
                        tokio::spawn(async move { core.drain_inbox().await });
                    }
                    return;
                }
                None => ended.await,
            }
        }
    }

    /// Reads the inbox until it is empty (or a read fails).
    async fn drain_once(&self) {
        self.inbox.reads_begun.fetch_add(1, Ordering::SeqCst);
        // Counted as ended when dropped, a read cut short too.
        let _ended = ReadEnds(&self.inbox);
        self.read_inbox().await;
    }

    async fn read_inbox(&self) {
        loop {
            let store = self.store.clone();
            let leaving = self
                .leaving
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let letters = blocking(move || match store.cluster() {
                // Those of partitions being given back wait for the next owner.
                Some(c) => c.letters(&c.held().difference(&leaving).copied().collect(), LETTERS),
                None => Ok(Vec::new()),
            })
            .await;
            let letters = match letters {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "reel: reading the inbox failed");
                    return;
                }
            };
            let full = letters.len() == LETTERS;
            // Runs are served at once, each run's letters in the order posted.
            let mut by_run: HashMap<String, Vec<Letter>> = HashMap::new();
            for letter in letters {
                by_run
                    .entry(letter.run_id.clone())
                    .or_default()
                    .push(letter);
            }
            let done: Vec<i64> = futures::stream::iter(by_run.into_values())
                .map(|letters| async move {
                    let mut done = Vec::with_capacity(letters.len());
                    let mut held_up = false;
                    for letter in letters {
                        // Behind a letter left for the next read, only a cancel
                        // goes on: it ends the run whatever the other asked, and
                        // a letter refused for good (a signal to a run whose log
                        // cannot be read, which takes only a cancel) would
                        // otherwise hold it back for ever.
                        if held_up && !matches!(letter.mail, Ok(Mail::Cancel { .. })) {
                            continue;
                        }
                        let id = letter.id;
                        if self.apply(letter).await {
                            done.push(id);
                        } else {
                            held_up = true;
                        }
                    }
                    done
                })
                .buffer_unordered(APPLY_AT_ONCE)
                .flat_map(futures::stream::iter)
                .collect()
                .await;
            if done.is_empty() {
                return;
            }
            let acked = self.ack_inbox(done).await;
            if acked.is_err() || !full || self.is_closing() {
                return;
            }
        }
    }

    /// The signal letters for `run_id` in this host's inbox: (letter id, signal
    /// id).
    ///
    /// # Errors
    ///
    /// The store's error when the inbox could not be read.
    pub(crate) async fn inbox_signals(
        &self,
        run_id: &str,
    ) -> Result<Vec<(i64, String)>, ActorError> {
        let store = self.store.clone();
        let run = run_id.to_owned();
        let letters = blocking(move || match store.cluster() {
            Some(c) => c.letters_of(&run),
            None => Ok(Vec::new()),
        })
        .await?;
        Ok(letters
            .into_iter()
            .filter_map(|l| match l.mail {
                Ok(Mail::Signal { signal_id, .. }) => Some((l.id, signal_id)),
                _ => None,
            })
            .collect())
    }

    /// Acknowledges the letters `ids` of `run_id`, whose signals are in the run's
    /// log segment about to end: neither the next owner (if this host dies) nor a
    /// read under way applies them to a later segment, which would not know their
    /// signal ids.
    ///
    /// # Errors
    ///
    /// The store's error when the acknowledgement could not be written.
    pub(crate) async fn ack_letters(&self, run_id: &str, ids: Vec<i64>) -> Result<(), ActorError> {
        if ids.is_empty() {
            return Ok(());
        }
        // Gone from before the write on (a read under way may hold them), for
        // every read begun before it ended (a read begun later does not see them).
        self.inbox.gone.add(&ids, u64::MAX);
        self.ack_inbox(ids.clone()).await?;
        let begun = self.inbox.reads_begun.load(Ordering::SeqCst);
        self.inbox.gone.add(&ids, begun);
        tracing::debug!(
            run_id,
            letters = ids.len(),
            "reel: letters acknowledged before the segment ends"
        );
        Ok(())
    }

    /// Removes the letters `ids` from the inbox (those of partitions this host no
    /// longer holds stay, for their new owner).
    async fn ack_inbox(&self, ids: Vec<i64>) -> Result<(), StorageError> {
        let store = self.store.clone();
        blocking(move || match store.cluster() {
            Some(c) => c.ack(&ids),
            None => Ok(()),
        })
        .await
    }

    /// Whether the run of letter `id` acknowledged it itself (`ack_letters`):
    /// its signal is in an earlier log segment, and it is not applied again.
    pub(crate) fn letter_gone(&self, id: i64) -> bool {
        self.inbox.gone.has(id)
    }

    /// Applies one letter; `false` leaves it in the inbox for the next read.
    async fn apply(&self, letter: Letter) -> bool {
        let id = letter.id;
        let run_id = letter.run_id;
        let mail = match letter.mail {
            Ok(mail) => mail,
            Err(reason) => {
                tracing::error!(
                    run_id,
                    reason,
                    "reel: dropping inbox mail that does not decode"
                );
                return true;
            }
        };
        let outcome = match mail {
            Mail::Wake { .. } => {
                self.schedule_timers(mail.timer_entries(&run_id));
                self.wake(&run_id).await
            }
            Mail::Pause { reason } => self.deliver(&run_id, Pause { reason }).await,
            Mail::Unpause => self.deliver(&run_id, Unpause).await,
            Mail::Retry => self.deliver(&run_id, Retry).await,
            other => match Delivery::of_mail(other) {
                // Its run may have acknowledged the letter since this read: its
                // actor looks (`letter_gone`).
                Some(delivery @ Delivery::Signal { .. }) => {
                    let letter = Lettered {
                        letter: id,
                        delivery,
                    };
                    self.deliver(&run_id, letter).await
                }
                Some(delivery) => self.deliver(&run_id, delivery).await,
                None => Ok(()),
            },
        };
        match outcome {
            Ok(()) => true,
            // Nothing left to do for it.
            Err(
                ActorError::UnknownRun(_)
                | ActorError::RunFinished(_)
                | ActorError::InvalidState { .. },
            ) => true,
            Err(e) => {
                tracing::warn!(run_id, error = %e, "reel: inbox mail not applied yet; retrying");
                false
            }
        }
    }

    /// A run created or changed by another host: an enqueued one joins its queue
    /// here, an unfinished one runs.
    async fn wake(&self, run_id: &str) -> Result<(), ActorError> {
        let Some(meta) = self.meta(run_id).await? else {
            return Err(ActorError::UnknownRun(run_id.to_owned()));
        };
        match (&meta.state, &meta.queue) {
            // One this host cannot execute waits for a host that can (see
            // `Queues::recover`).
            (RunState::Enqueued, Some(_))
                if self.check_registered(&meta.workflow, meta.version).is_err() =>
            {
                Ok(())
            }
            (RunState::Enqueued, Some(entry)) => {
                self.queues.enqueued(run_id, entry);
                self.admit_later(entry.name.clone(), self.busy());
                Ok(())
            }
            (s, _) if s.is_finished() => Ok(()),
            _ => self.deliver(run_id, Resume).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::InboxTurn;

    #[test]
    fn a_drain_asked_for_during_a_drain_reads_again() {
        let turn = InboxTurn::default();
        let first = turn.take().expect("the first drain has the turn");
        assert!(!first.again(), "nobody asked meanwhile");
        assert!(turn.take().is_none(), "one drain at a time");
        assert!(first.again(), "asked meanwhile: read again");
        assert!(!first.again(), "once");
        drop(first);
        assert!(turn.take().is_some(), "the turn is free again");
    }
}
