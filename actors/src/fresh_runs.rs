//! A new run's state as its first write left it, handed to the actor that
//! activates the run first (the run's own activation, or a message's that came
//! before it), so that actor neither reads the run back nor runs its handler
//! again: it goes on with the first execution (`eager`).
//!
//! The state is good only for an actor spawned before any other since the write:
//! one spawned in between read the store and may have taken the run further
//! (run its steps, finished it), and an actor given the state after that would
//! run the same steps again from it. So a start expects its run's state before
//! the write ([`FreshRuns::expect`]); a spawn that finds it only expected reads
//! the store and marks it taken, and the stash after the write is then dropped
//! ([`FreshRuns::stash`]). Each expectation has a token of its own: racing
//! starts of one id on one host each expect, the last one's token holds, and
//! only a stash under the token still held is kept.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use foldhash::{HashMap, HashMapExt};

use crate::run_actor::Preload;

/// Where a new run's state is.
enum Slot {
    /// Its write is under way.
    Expected(u64),
    /// An actor spawned before the state was stashed: the stash is stale.
    Taken(u64),
    /// For the next actor spawned.
    Stashed(u64, Preload),
}

impl Slot {
    fn token(&self) -> u64 {
        match self {
            Slot::Expected(t) | Slot::Taken(t) | Slot::Stashed(t, _) => *t,
        }
    }
}

/// New runs' states, by run id, from their start to their first actor.
pub(crate) struct FreshRuns {
    slots: Mutex<HashMap<Arc<str>, Slot>>,
    last_token: AtomicU64,
}

impl FreshRuns {
    pub(crate) fn new() -> FreshRuns {
        FreshRuns {
            slots: Mutex::new(HashMap::new()),
            last_token: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before a new run's write: its state will be stashed under the
    /// expectation's token, if no actor is spawned for the run first. Dropped
    /// before [`Expectation::keep`] (the write failed, or its caller stopped
    /// waiting), it is forgotten.
    pub(crate) fn expect(&self, run_id: &str) -> Expectation<'_> {
        let token = self.last_token.fetch_add(1, Ordering::Relaxed) + 1;
        let run_id: Arc<str> = Arc::from(run_id);
        self.lock().insert(run_id.clone(), Slot::Expected(token));
        Expectation {
            runs: self,
            run_id,
            token: Some(token),
        }
    }

    /// For an actor being spawned: the run's stashed state, if any. An expected
    /// one is marked taken: this actor reads the store, and the stash that
    /// follows is stale.
    pub(crate) fn take(&self, run_id: &str) -> Option<Preload> {
        let mut slots = self.lock();
        let slot = slots.get_mut(run_id)?;
        let token = slot.token();
        match std::mem::replace(slot, Slot::Taken(token)) {
            Slot::Stashed(_, preload) => {
                slots.remove(run_id);
                Some(preload)
            }
            Slot::Expected(_) | Slot::Taken(_) => None,
        }
    }

    /// After the write has landed: keeps `preload` for the next actor spawned,
    /// unless an actor was spawned since [`FreshRuns::expect`] (or another start
    /// of the id expected since), and returns whether it was kept. `live`: the
    /// run has an actor now (checked by the caller under its lock).
    pub(crate) fn stash(&self, run_id: &str, token: u64, preload: Preload, live: bool) -> bool {
        let mut slots = self.lock();
        match slots.get_mut(run_id) {
            Some(slot @ Slot::Expected(_)) if slot.token() == token && !live => {
                *slot = Slot::Stashed(token, preload);
                true
            }
            Some(slot) if slot.token() == token => {
                slots.remove(run_id);
                false
            }
            _ => false,
        }
    }

    /// Drops what is kept under `token`: the write failed, or the run's own
    /// activation is over (its state, if not taken, is stale from now on).
    pub(crate) fn forget(&self, run_id: &str, token: u64) {
        let mut slots = self.lock();
        if slots.get(run_id).is_some_and(|s| s.token() == token) {
            slots.remove(run_id);
        }
    }
}

/// A new run's expected state ([`FreshRuns::expect`]), forgotten when dropped
/// unless kept.
pub(crate) struct Expectation<'a> {
    runs: &'a FreshRuns,
    run_id: Arc<str>,
    token: Option<u64>,
}

impl Expectation<'_> {
    /// The write has landed: the token to stash the state under, and to forget
    /// it with once the run's own activation is over.
    pub(crate) fn keep(mut self) -> u64 {
        self.token.take().unwrap_or_default()
    }
}

impl Drop for Expectation<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token {
            self.runs.forget(&self.run_id, token);
        }
    }
}

#[cfg(test)]
mod tests {
    use reel_storage::{RunMeta, RunState};

    use super::*;
    use crate::run_actor::Fresh;

    fn state(run_id: &str) -> Preload {
        Box::new(Fresh {
            meta: RunMeta {
                run_id: run_id.to_owned(),
                workflow: "w".into(),
                version: 1,
                state: RunState::Running,
                created_at: 1,
                updated_at: 1,
                parent: None,
                segment_start: 0,
                segment: 0,
                queue: None,
            },
            log: Vec::new(),
            handed: None,
        })
    }

    #[test]
    fn a_state_stashed_before_any_spawn_goes_to_the_first_spawn_only() {
        let runs = FreshRuns::new();
        let token = runs.expect("r").keep();
        assert!(runs.stash("r", token, state("r"), false));
        assert!(runs.take("r").is_some());
        assert!(runs.take("r").is_none());
        runs.forget("r", token);
        assert!(runs.lock().is_empty());
    }

    #[test]
    fn a_spawn_between_the_write_and_the_stash_makes_the_stash_stale() {
        let runs = FreshRuns::new();
        let expected = runs.expect("r");
        // A racing start's message activates the run from the store.
        assert!(runs.take("r").is_none());
        let token = expected.keep();
        assert!(!runs.stash("r", token, state("r"), false));
        assert!(runs.take("r").is_none(), "the stale state is gone");
        assert!(runs.lock().is_empty());
    }

    #[test]
    fn a_run_live_at_the_stash_gets_none() {
        let runs = FreshRuns::new();
        let token = runs.expect("r").keep();
        assert!(!runs.stash("r", token, state("r"), true));
        assert!(runs.take("r").is_none());
    }

    #[test]
    fn only_the_latest_expectation_of_an_id_stashes() {
        let runs = FreshRuns::new();
        let first = runs.expect("r");
        let second = runs.expect("r");
        let first = first.keep();
        assert!(!runs.stash("r", first, state("r"), false));
        // The first start's forget leaves the second's expectation alone.
        runs.forget("r", first);
        let second = second.keep();
        assert!(runs.stash("r", second, state("r"), false));
        assert!(runs.take("r").is_some());
    }

    #[test]
    fn an_expectation_dropped_unkept_is_forgotten() {
        let runs = FreshRuns::new();
        drop(runs.expect("r"));
        assert!(runs.lock().is_empty());
        let kept = runs.expect("r");
        let token = kept.keep();
        assert!(runs.lock().contains_key("r"));
        runs.forget("r", token);
        assert!(runs.lock().is_empty());
    }
}
