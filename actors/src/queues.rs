//! Queues' admission state, in memory: which runs wait (by priority, then order
//! of start), which were admitted and have not ended, which failed to be admitted
//! and wait for a retry, the de-duplication keys held, and the admissions inside
//! the rate window. Synchronous and side-effect free: the core
//! (`core/queueing.rs`) writes the admissions and activates the runs.
//!
//! What is durable is each run's metadata ([`RunMeta::queue`], the
//! [`RunState::Enqueued`] state): recovery rebuilds this state from the unfinished
//! runs, so the limits hold across restarts and crashes.
//!
//! On a store that admits itself ([`reel_storage::Admission`], hosts sharing one
//! database), the limits, keys and order numbers are the store's: this state
//! only orders the runs this host owns and waits for ([`Queues::candidates`]),
//! and [`Queues::granted`] records what the store admitted.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reel_storage::{QueueEntry, RunMeta, RunState};

use crate::error::ActorError;

/// A queue's limits ([`CoreOptions::queues`](crate::CoreOptions)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLimits {
    /// Runs of the queue admitted and not ended at once (on this store); `None`
    /// admits any number.
    pub concurrency: Option<usize>,
    /// At most this many admissions within any window of this length; `None`
    /// admits at any pace.
    pub rate_limit: Option<(u32, Duration)>,
}

/// What [`Queues::take`] admits now, and when to look again if the rate limit
/// holds runs back.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    pub(crate) runs: Vec<Arc<str>>,
    /// Unix ms at which the rate window has room again, with runs still waiting.
    pub(crate) retry_at: Option<u64>,
}

/// Every configured queue's state.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    queues: Mutex<HashMap<String, Queue>>,
    /// One admission at a time per queue when the store admits (so two passes of
    /// this host do not offer the same runs).
    turns: HashMap<String, tokio::sync::Mutex<()>>,
}

#[derive(Debug, Default)]
struct Queue {
    limits: QueueLimits,
    /// Waiting runs: (priority, order, run).
    pending: BTreeSet<(i32, u64, Arc<str>)>,
    /// A waiting run's key in `pending`.
    places: HashMap<Arc<str>, (i32, u64)>,
    /// Admitted and not ended.
    running: HashSet<Arc<str>>,
    /// De-duplication keys held, and their runs.
    keys: HashMap<String, Arc<str>>,
    /// The key a run holds.
    key_of: HashMap<Arc<str>, String>,
    /// Starts of a run reserved and not yet written: its key is let go only
    /// when the last of them found it was not created.
    reserving: HashMap<Arc<str>, u32>,
    /// Runs whose admission failed, set aside until their retry puts them back in
    /// `pending` (they hold neither a place nor a slot meanwhile).
    aside: HashSet<Arc<str>>,
    /// Failed admissions of a run in a row (its retry waits longer each time).
    failures: HashMap<Arc<str>, u32>,
    /// Admission times (Unix ms) inside the rate window, oldest first.
    admitted: VecDeque<u64>,
    next_order: u64,
    /// A look again is scheduled at this time.
    wake_at: Option<u64>,
}

impl Queue {
    /// Forgets a run's failed admissions.
    fn forget_failures(&mut self, run_id: &str) {
        self.aside.remove(run_id);
        self.failures.remove(run_id);
    }

    fn forget_key(&mut self, run_id: &str) {
        if let Some(key) = self.key_of.remove(run_id)
            && self.keys.get(&key).is_some_and(|r| &**r == run_id)
        {
            self.keys.remove(&key);
        }
    }

    fn hold_key(&mut self, run: &Arc<str>, key: Option<&String>) {
        if let Some(key) = key {
            self.keys.insert(key.clone(), run.clone());
            self.key_of.insert(run.clone(), key.clone());
        }
    }

    /// Whether the run has a place here: it waits, runs, or waits for a retry of
    /// its admission.
    fn holds_place(&self, run_id: &str) -> bool {
        self.places.contains_key(run_id)
            || self.running.contains(run_id)
            || self.aside.contains(run_id)
    }

    /// Whether the queue knows the run already: it holds a place, or a key (a
    /// start of it is under way).
    fn knows(&self, run_id: &str) -> bool {
        self.holds_place(run_id) || self.key_of.contains_key(run_id)
    }

    /// One start of the run has been written (or failed): true when it was the
    /// last one under way.
    fn written(&mut self, run_id: &str) -> bool {
        match self.reserving.get_mut(run_id) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => {
                self.reserving.remove(run_id);
                true
            }
        }
    }
}

impl Queues {
    /// The queues configured, with their limits, and nothing waiting yet.
    pub(crate) fn new(limits: &HashMap<String, QueueLimits>) -> Queues {
        let queues = limits
            .iter()
            .map(|(name, limits)| {
                let queue = Queue {
                    limits: *limits,
                    ..Queue::default()
                };
                (name.clone(), queue)
            })
            .collect();
        Queues {
            queues: Mutex::new(queues),
            turns: limits
                .keys()
                .map(|name| (name.clone(), tokio::sync::Mutex::new(())))
                .collect(),
        }
    }

    /// The turn of `queue`'s admissions by the store (`None`: not configured).
    pub(crate) fn turn(&self, queue: &str) -> Option<&tokio::sync::Mutex<()>> {
        self.turns.get(queue)
    }

    /// The first `n` runs waiting on `queue`, by priority then order: what this
    /// host offers the store for admission.
    pub(crate) fn candidates(&self, queue: &str, n: usize) -> Vec<String> {
        self.lock().get(queue).map_or_else(Vec::new, |q| {
            q.pending
                .iter()
                .take(n)
                .map(|(_, _, r)| r.to_string())
                .collect()
        })
    }

    /// The store admitted `runs`: those still waiting here count as running;
    /// returns them.
    pub(crate) fn granted(&self, queue: &str, runs: &[String]) -> Vec<Arc<str>> {
        let mut queues = self.lock();
        let Some(q) = queues.get_mut(queue) else {
            return Vec::new();
        };
        let mut admitted = Vec::with_capacity(runs.len());
        for run in runs {
            if let Some((priority, order)) = q.places.remove(run.as_str()) {
                let run: Arc<str> = Arc::from(run.as_str());
                q.pending.remove(&(priority, order, run.clone()));
                q.running.insert(run.clone());
                admitted.push(run);
            }
        }
        admitted
    }

    /// The queues with runs waiting here.
    pub(crate) fn waiting(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, q)| !q.pending.is_empty())
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Queue>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The names of the configured queues.
    pub(crate) fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Rebuilds the state from the unfinished runs found by recovery: enqueued ones
    /// wait, the others were admitted and count against the limit. Runs of queues
    /// not configured on this host are left as they are, with a warning, and so are
    /// enqueued runs this host cannot execute (`runnable` says no: their workflow
    /// or version is not registered here): admitted, they would take a slot only
    /// to park, holding back the queue; they wait for a host that registers them.
    pub(crate) fn recover(&self, runs: &[RunMeta], runnable: impl Fn(&RunMeta) -> bool) {
        let mut queues = self.lock();
        let mut unknown: HashMap<&str, usize> = HashMap::new();
        let mut unrunnable: HashMap<&str, usize> = HashMap::new();
        for meta in runs {
            let Some(entry) = &meta.queue else { continue };
            let Some(q) = queues.get_mut(&entry.name) else {
                *unknown.entry(&entry.name).or_default() += 1;
                continue;
            };
            let run: Arc<str> = Arc::from(meta.run_id.as_str());
            q.next_order = q.next_order.max(entry.order + 1);
            q.hold_key(&run, entry.dedup_key.as_ref());
            if meta.state == RunState::Enqueued && !runnable(meta) {
                *unrunnable.entry(&entry.name).or_default() += 1;
            } else if meta.state == RunState::Enqueued {
                q.places.insert(run.clone(), (entry.priority, entry.order));
                q.pending.insert((entry.priority, entry.order, run));
            } else {
                q.running.insert(run);
            }
        }
        for (queue, runs) in unrunnable {
            tracing::warn!(
                queue,
                runs,
                "reel: enqueued runs of workflows or versions this host does not register; \
                 they wait until a host that registers them admits them"
            );
        }
        for (queue, runs) in unknown {
            tracing::warn!(
                queue,
                runs,
                "reel: runs of a queue this host does not configure; they wait until a host \
                 that configures it (HostBuilder::queue) admits them"
            );
        }
    }

    /// Reserves a place for `run_id` before its first write: checks the queue and
    /// the de-duplication key, holds the key, and gives the run its order. A run
    /// the queue knows already keeps the key it holds: a repeated start of it
    /// changes nothing, and its write, which finds the run, is answered so
    /// ([`Queues::created`] settles the key of a start that did create it).
    ///
    /// # Errors
    /// [`ActorError::UnknownQueue`]; [`ActorError::Deduplicated`] when another run
    /// enqueued or running on the queue holds the key.
    pub(crate) fn reserve(
        &self,
        queue: &str,
        run_id: &str,
        dedup_key: Option<&String>,
    ) -> Result<u64, ActorError> {
        let mut queues = self.lock();
        let q = queues
            .get_mut(queue)
            .ok_or_else(|| ActorError::UnknownQueue(queue.to_owned()))?;
        if let Some(key) = dedup_key
            && let Some(holder) = q.keys.get(key)
            && &**holder != run_id
        {
            return Err(ActorError::Deduplicated {
                queue: queue.to_owned(),
                key: key.clone(),
                run_id: holder.to_string(),
            });
        }
        let run: Arc<str> = Arc::from(run_id);
        if !q.knows(run_id) {
            q.hold_key(&run, dedup_key);
        }
        *q.reserving.entry(run).or_default() += 1;
        let order = q.next_order;
        q.next_order += 1;
        Ok(order)
    }

    /// Gives back a reservation whose write did not create the run. The key stays
    /// held while another start of the run is still being written: that one may
    /// create it with the key.
    pub(crate) fn unreserve(&self, queue: &str, run_id: &str) {
        if let Some(q) = self.lock().get_mut(queue)
            && q.written(run_id)
            && !q.holds_place(run_id)
        {
            q.forget_key(run_id);
        }
    }

    /// The write of a reservation created the run: the key it holds is the one
    /// its record names (a start of the same id racing it may have reserved
    /// first, with another key or none). Nothing once the run has ended.
    pub(crate) fn created(&self, queue: &str, run_id: &str, dedup_key: Option<&String>) {
        let mut queues = self.lock();
        let Some(q) = queues.get_mut(queue) else {
            return;
        };
        q.written(run_id);
        if q.holds_place(run_id) {
            q.forget_key(run_id);
            q.hold_key(&Arc::from(run_id), dedup_key);
        }
    }

    /// The run's enqueued state is written: it waits for admission.
    pub(crate) fn enqueued(&self, run_id: &str, entry: &QueueEntry) {
        if let Some(q) = self.lock().get_mut(&entry.name) {
            let run: Arc<str> = Arc::from(run_id);
            q.places.insert(run.clone(), (entry.priority, entry.order));
            q.pending.insert((entry.priority, entry.order, run));
        }
    }

    /// Takes the runs the limits admit now, first by priority then by order, and
    /// counts them as running.
    pub(crate) fn take(&self, queue: &str, now_ms: u64) -> Admission {
        let mut queues = self.lock();
        let Some(q) = queues.get_mut(queue) else {
            return Admission::default();
        };
        let mut admission = Admission::default();
        if let Some((_, period)) = q.limits.rate_limit {
            let period = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
            while q
                .admitted
                .front()
                .is_some_and(|t| t.saturating_add(period) <= now_ms)
            {
                q.admitted.pop_front();
            }
        }
        while !q.pending.is_empty() {
            if q.limits.concurrency.is_some_and(|c| q.running.len() >= c) {
                break;
            }
            if let Some((limit, period)) = q.limits.rate_limit
                && q.admitted.len() >= limit as usize
            {
                let period = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
                let at = q
                    .admitted
                    .front()
                    .map_or(now_ms, |t| t.saturating_add(period));
                admission.retry_at = Some(at);
                break;
            }
            let Some((_, _, run)) = q.pending.pop_first() else {
                break;
            };
            q.places.remove(&run);
            q.running.insert(run.clone());
            if q.limits.rate_limit.is_some() {
                q.admitted.push_back(now_ms);
            }
            admission.runs.push(run);
        }
        admission
    }

    /// Marks that a look again at `at` is scheduled, unless one at or before it
    /// already is: returns whether the caller should schedule it.
    pub(crate) fn schedule_wake(&self, queue: &str, at: u64) -> bool {
        let mut queues = self.lock();
        let Some(q) = queues.get_mut(queue) else {
            return false;
        };
        if q.wake_at.is_some_and(|w| w <= at) {
            return false;
        }
        q.wake_at = Some(at);
        true
    }

    /// The scheduled look again at `at` is happening.
    pub(crate) fn woke(&self, queue: &str, at: u64) {
        if let Some(q) = self.lock().get_mut(queue)
            && q.wake_at == Some(at)
        {
            q.wake_at = None;
        }
    }

    /// The admission of a run taken by [`Queues::take`] failed (or the retry of
    /// one could not read the run): frees its slot and sets it aside, keeping its
    /// key, until [`Queues::requeue`]. Returns how many admissions of the run failed
    /// in a row, or `None` if the run is not the queue's any more (it ended, or
    /// another host owns it now).
    pub(crate) fn admission_failed(&self, queue: &str, run_id: &str) -> Option<u32> {
        let mut queues = self.lock();
        let q = queues.get_mut(queue)?;
        let run: Arc<str> = q
            .running
            .take(run_id)
            .or_else(|| q.aside.get(run_id).cloned())?;
        q.aside.insert(run.clone());
        let failures = q.failures.entry(run).or_default();
        *failures = failures.saturating_add(1);
        Some(*failures)
    }

    /// A run set aside by [`Queues::admission_failed`] and still enqueued waits for
    /// admission again, in its place (`entry`). Returns false if it is not aside
    /// any more (it ended meanwhile).
    pub(crate) fn requeue(&self, run_id: &str, entry: &QueueEntry) -> bool {
        let mut queues = self.lock();
        let Some(q) = queues.get_mut(&entry.name) else {
            return false;
        };
        let Some(run) = q.aside.take(run_id) else {
            return false;
        };
        q.places.insert(run.clone(), (entry.priority, entry.order));
        q.pending.insert((entry.priority, entry.order, run));
        true
    }

    /// A run set aside turned out to be admitted after all: it is no longer
    /// retried.
    pub(crate) fn not_aside(&self, queue: &str, run_id: &str) {
        if let Some(q) = self.lock().get_mut(queue) {
            q.forget_failures(run_id);
        }
    }

    /// A run of the queue ended (or left it without being admitted): frees its
    /// place, its slot and its key. Returns whether anything was freed.
    pub(crate) fn ended(&self, queue: &str, run_id: &str) -> bool {
        let mut queues = self.lock();
        let Some(q) = queues.get_mut(queue) else {
            return false;
        };
        let mut freed = q.running.remove(run_id);
        if let Some((priority, order)) = q.places.remove(run_id) {
            q.pending.remove(&(priority, order, Arc::from(run_id)));
            freed = true;
        }
        q.forget_key(run_id);
        q.forget_failures(run_id);
        freed
    }

    /// Forgets every run `gone` names (runs another host owns now), waiting or
    /// admitted; returns the queues that freed places.
    pub(crate) fn forget(&self, gone: impl Fn(&str) -> bool) -> Vec<String> {
        let mut freed = Vec::new();
        for (name, q) in self.lock().iter_mut() {
            let runs: Vec<Arc<str>> = q
                .running
                .iter()
                .chain(q.places.keys())
                .chain(q.aside.iter())
                .filter(|r| gone(r))
                .cloned()
                .collect();
            for run in &runs {
                q.running.remove(run);
                if let Some((priority, order)) = q.places.remove(run) {
                    q.pending.remove(&(priority, order, run.clone()));
                }
                q.forget_key(run);
                q.forget_failures(run);
            }
            if !runs.is_empty() {
                freed.push(name.clone());
            }
        }
        freed
    }

    /// How many runs of `queue` wait, and how many run.
    #[cfg(test)]
    fn sizes(&self, queue: &str) -> (usize, usize) {
        let queues = self.lock();
        queues
            .get(queue)
            .map_or((0, 0), |q| (q.pending.len(), q.running.len()))
    }
}

#[cfg(test)]
mod tests;
