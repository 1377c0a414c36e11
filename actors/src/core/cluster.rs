//! Several hosts over one store (a backend with a [`Cluster`]): this host runs
//! the runs of the partitions it leases. A lease task renews the leases, recovers
//! the runs of partitions gained (as start-up recovery does for a whole store) and
//! stops the runs of partitions lost or given back; an inbox task drains (`inbox`)
//! the mail other hosts post for runs owned here, woken by the backend's notices and by a
//! periodic poll (notices can be lost), and wakes local `result()` waiters (and watchers of
//! logs) when another host changed a run.

use reel_storage::{Cluster, Mail, Notice, partition_of};
use tokio::sync::broadcast::error::RecvError;

use super::*;
use crate::message::HandBack;

/// How often the inbox (and what other hosts changed) is read whatever the notices
/// say: notices can be lost.
const INBOX_POLL: Duration = Duration::from_secs(1);

impl Core {
    pub(super) fn cluster(&self) -> Option<&dyn Cluster> {
        self.store.cluster()
    }

    /// Whether another host owns the run (this host does not lease its partition).
    /// A partition being given back counts as another host's already.
    pub(crate) fn owned_elsewhere(&self, run_id: &str) -> bool {
        let part = partition_of(run_id);
        self.cluster().is_some_and(|c| !c.holds(part)) || self.is_leaving(part)
    }

    fn is_leaving(&self, part: u16) -> bool {
        self.leaving
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&part)
    }

    /// Whether this host is the one to act on `key` (a schedule id, hashed into a
    /// partition like a run id): always on a store of its own; on a shared store,
    /// when it leases the key's partition, so that one host fires each schedule.
    pub fn leads(&self, key: &str) -> bool {
        !self.owned_elsewhere(key)
    }

    /// How often a host sharing its store must look again at what it leads
    /// (partitions come and go with their leases, and what other hosts change is
    /// not told here); `None` on a store of its own.
    pub fn lead_recheck(&self) -> Option<Duration> {
        self.cluster()
            .map(|c| (c.lease_ttl() / 3).max(Duration::from_millis(100)))
    }

    /// Posts `mail` to the owner of the run; `None` (what only an owner does) is
    /// dropped.
    pub(crate) async fn post(&self, run_id: &str, mail: Option<Mail>) -> Result<(), ActorError> {
        let Some(mail) = mail else {
            return Ok(());
        };
        let store = self.store.clone();
        let run = run_id.to_owned();
        blocking(move || match store.cluster() {
            Some(c) => c.post(&run, &mail),
            None => Ok(()),
        })
        .await?;
        Ok(())
    }

    /// Wakes the owner of a run this host can no longer write to. A bare task: one
    /// post (a lost one leaves the run to the owner's scan, as before); refused
    /// once the host is gone.
    pub(crate) fn hand_over(&self, run_id: &str) {
        let Some(core) = self.me.upgrade() else {
            return;
        };
        let run_id = run_id.to_owned();
        tokio::spawn(async move {
            let wake = Some(Mail::Wake { timers: Vec::new() });
            if let Err(e) = core.post(&run_id, wake).await {
                tracing::warn!(run_id, error = %e, "reel: could not wake the run's new owner");
            }
        });
    }

    /// Whether step bodies of `run_id` may start here: always on a store of its
    /// own; on a shared one, while this host surely holds the lease of the run's
    /// partition: its last renewal kept it, and has not run out since by this
    /// host's clock. A host frozen or cut off past its lease finds it may not,
    /// and waits for its next renewal, which either renews the lease or stops the
    /// run here (another host took it over).
    pub(crate) fn lease_holds(&self, run_id: &str) -> bool {
        let Some(cluster) = self.cluster() else {
            return true;
        };
        cluster.holds(partition_of(run_id))
            && self
                .lease_until
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|until| std::time::Instant::now() < until)
    }

    /// Takes this host's first leases, then starts the lease and inbox tasks of a
    /// host that shares its store. The first renewal is awaited: a host returns
    /// from its open holding what it could take (every partition, alone on the
    /// database) with their runs recovered, so that what it is asked right away
    /// goes to its own runs, not through the inbox.
    pub(super) async fn join_cluster(&self) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        let mut notices = cluster.subscribe();
        let renew_every = cluster.lease_ttl() / 3;
        self.renew_leases().await;
        let weak = self.me.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(renew_every).await;
                let Some(core) = weak.upgrade().filter(|c| !c.is_closing()) else {
                    return;
                };
                core.renew_leases().await;
            }
        });
        let weak = self.me.clone();
        tokio::spawn(async move {
            // A real period, whatever the notices do: under a steady stream of them
            // the poll still runs (the select picks among ready branches at random).
            let mut poll =
                tokio::time::interval_at(tokio::time::Instant::now() + INBOX_POLL, INBOX_POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let notice = tokio::select! {
                    notice = notices.recv() => Some(notice),
                    _ = poll.tick() => None,
                };
                let Some(core) = weak.upgrade().filter(|c| !c.is_closing()) else {
                    return;
                };
                match notice {
                    // A run owned here tells its waiters itself.
                    Some(Ok(Notice::Changed(run_id))) => {
                        if core.owned_elsewhere(&run_id) {
                            core.notify_changed(&run_id, None);
                            core.hear_remote_ends(Some(&run_id)).await;
                            core.follow_remote_logs(Some(run_id)).await;
                        }
                    }
                    Some(Ok(Notice::Mail(part))) => {
                        if core.cluster().is_some_and(|c| c.holds(part)) {
                            core.drain_inbox().await;
                        }
                    }
                    Some(Ok(Notice::Queue(queue))) => {
                        if core.queues.waiting().contains(&queue) {
                            core.admit_later(queue, core.busy());
                        }
                    }
                    Some(Err(RecvError::Closed)) => return,
                    // Missed notices, or the poll: read everything again (what
                    // runs owned here do, they tell themselves).
                    Some(Ok(Notice::Missed) | Err(RecvError::Lagged(_))) | None => {
                        for run_id in core.waiters.runs() {
                            if core.owned_elsewhere(&run_id) {
                                core.notify_changed(&run_id, None);
                            }
                        }
                        core.hear_remote_ends(None).await;
                        core.follow_remote_logs(None).await;
                        core.drain_inbox().await;
                        // Slots given back elsewhere are heard of by notice,
                        // which can be lost.
                        if core.store.admission().is_some() {
                            for queue in core.queues.waiting() {
                                core.admit_later(queue, core.busy());
                            }
                        }
                    }
                }
            }
        });
    }

    /// Tells the watchers of logs owned elsewhere (`run`, or every one) how far
    /// those logs are: the owner's commits are not heard here, so a remote log
    /// is read when its run changes state and at every inbox poll.
    async fn follow_remote_logs(&self, run: Option<String>) {
        let watched = self.log_watchers.watched_runs();
        let runs: Vec<String> = match run {
            Some(r) if watched.contains(&r) => vec![r],
            Some(_) => Vec::new(),
            None => watched,
        };
        for run_id in runs {
            if !self.owned_elsewhere(&run_id) {
                continue;
            }
            let store = self.store.clone();
            let id = run_id.clone();
            if let Ok(next) = blocking(move || store.next_seq(&id)).await {
                self.log_watchers.reached(&run_id, next);
            }
        }
    }

    /// One renewal: stops the runs of partitions lost, gives the surplus back
    /// (`hand_back`),
    /// recovers the runs of partitions gained, then reads their inbox.
    async fn renew_leases(&self) {
        // Asked before the database stamps the new expiry (its clock, its time
        // plus a lease), so this host's own reckoning ends no later than the
        // database's, with a tenth of a lease to spare for the clocks' rates.
        let asked = std::time::Instant::now();
        let store = self.store.clone();
        let renewed = blocking(move || match store.cluster() {
            Some(c) => c.renew(),
            None => Ok(Default::default()),
        })
        .await;
        let change = match renewed {
            Ok(change) => change,
            Err(e) => {
                tracing::warn!(error = %e, "reel: lease renewal failed; retrying");
                return;
            }
        };
        if let Some(ttl) = self.cluster().map(Cluster::lease_ttl) {
            *self.lease_until.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(asked + ttl - ttl / 10);
        }
        if !change.lost.is_empty() {
            tracing::warn!(partitions = ?change.lost, "reel: leases lost to another host; stopping their runs here");
            self.abandon(&change.lost).await;
        }
        if !change.surplus.is_empty() {
            tracing::info!(
                count = change.surplus.len(),
                "reel: giving partitions back to balance the hosts"
            );
            self.hand_back(&change.surplus).await;
        }
        let gained: BTreeSet<u16> = change.gained.difference(&change.surplus).copied().collect();
        if !gained.is_empty() {
            tracing::info!(
                count = gained.len(),
                "reel: partitions taken; recovering their runs"
            );
            if let Err(e) = self.adopt(gained.clone()).await {
                // Held but not recovered, their runs would wait for nobody: give
                // them back, to be taken (and recovered) again.
                tracing::warn!(error = %e, "reel: recovering the runs of taken partitions failed; giving them back");
                self.abandon(&gained).await;
                let store = self.store.clone();
                let _ = blocking(move || match store.cluster() {
                    Some(c) => c.release(&gained),
                    None => Ok(()),
                })
                .await;
                return;
            }
            self.drain_inbox().await;
        }
    }

    /// Recovers the runs of partitions this host just took.
    async fn adopt(&self, parts: BTreeSet<u16>) -> Result<(), ActorError> {
        let store = self.store.clone();
        let (unfinished, timers) = blocking(move || match store.cluster() {
            Some(c) => Ok((c.unfinished_in(&parts)?, c.timers_in(&parts)?)),
            None => Ok(Default::default()),
        })
        .await?;
        let queued = unfinished.items.iter().any(|m| m.queue.is_some());
        self.recover_runs(unfinished, timers).await?;
        if queued {
            for queue in self.queues.names() {
                self.admit_later(queue, self.busy());
            }
        }
        Ok(())
    }

    /// Gives partitions back to balance the hosts: their runs stop here first, and
    /// only then is the lease released, so no other host runs them while they still
    /// run here. Meanwhile what would wake them goes to the inbox for the next
    /// owner, and each execution winds down as for a pause: the step bodies under
    /// way finish and are recorded (so the next owner does not run them again),
    /// within a quarter of the lease time (the renewal waits for this); past it,
    /// the rest are stopped where they are.
    async fn hand_back(&self, parts: &BTreeSet<u16>) {
        self.leaving
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(parts.iter().copied());
        let actors: Vec<ActorRef<RunActor>> = {
            let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            live.iter()
                .filter(|(r, _)| parts.contains(&partition_of(r)))
                .filter_map(|(_, cell)| cell.get().cloned())
                .collect()
        };
        let grace = self.cluster().map_or(Duration::ZERO, |c| c.lease_ttl() / 4);
        let wound_down = futures::future::join_all(actors.iter().map(|actor| async move {
            if actor.tell(HandBack).await.is_ok() {
                actor.wait_for_shutdown().await;
            }
        }));
        if tokio::time::timeout(grace, wound_down).await.is_err() {
            tracing::warn!(
                "reel: runs still busy when giving their partitions back; stopping them"
            );
        }
        self.abandon(parts).await;
        let store = self.store.clone();
        let given = parts.clone();
        let released = blocking(move || match store.cluster() {
            Some(c) => c.release(&given),
            None => Ok(()),
        })
        .await;
        if let Err(e) = released {
            tracing::warn!(error = %e, "reel: giving leases back failed; they expire");
        }
        self.leaving
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| !parts.contains(p));
    }

    /// Stops this host's actors of the runs of `parts`: another host runs them now.
    async fn abandon(&self, parts: &BTreeSet<u16>) {
        let owned = |run_id: &str| parts.contains(&partition_of(run_id));
        let cells: Vec<LiveCell> = {
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            let runs: Vec<Arc<str>> = live.keys().filter(|r| owned(r)).cloned().collect();
            let cells = runs.iter().filter_map(|r| live.remove(r)).collect();
            metrics::gauge!(reel_storage::metrics::LIVE_RUNS).set(live.len() as f64);
            cells
        };
        for queue in self.queues.forget(owned) {
            self.admit_later(queue, self.busy());
        }
        self.crash_messages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|r, _| !owned(r));
        self.unrecorded_parks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|r, _| !owned(r));
        // An actor busy in a handler (an append whose answer is slow) takes the
        // stop only once that is done: the renewal that called this waits a
        // quarter lease at most, or this host's other leases would lapse behind
        // one slow write. The stops go on in bare tasks, each ending when its
        // actor has stopped (its writes are refused once the lease has moved).
        let stops: Vec<_> = cells
            .iter()
            .filter_map(|cell| cell.get().cloned())
            .map(|actor| {
                tokio::spawn(async move {
                    let _ = ask(&actor, StopRun).await;
                })
            })
            .collect();
        let grace = self.cluster().map_or(Duration::ZERO, |c| c.lease_ttl() / 4);
        if tokio::time::timeout(grace, futures::future::join_all(stops))
            .await
            .is_err()
        {
            tracing::warn!("reel: runs busy writing when stopped here; they stop once done");
        }
    }
}
