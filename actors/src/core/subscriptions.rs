//! Which runs wait on which children in this host: the subscriptions a child's
//! end is delivered to, and what a parent executing again need not start again.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use reel_storage::ParentLink;

/// The parents waiting on each unfinished child in this host, by child run id, and
/// whether the child's start was seen to land for each of them. An entry leaves once
/// the child's end has been delivered to its parent, its start failed for good, or
/// the parent itself ended ([`Subscriptions::forget_parent`]).
#[derive(Default)]
pub(crate) struct Subscriptions(Mutex<Table>);

#[derive(Default)]
struct Table {
    by_child: HashMap<String, Vec<Subscription>>,
    /// The children each parent is subscribed to.
    by_parent: HashMap<String, HashSet<String>>,
}

struct Subscription {
    link: ParentLink,
    /// The child exists: its start (or the finding that it already existed) landed
    /// after this subscription was made.
    started: bool,
    /// The child has ended and its end is on its way to the parent: the entry stays
    /// until it is delivered, so that the parent, executing again meanwhile, does not
    /// start the child again.
    ended: bool,
    /// The child is not the parent's own (`ctx.child` of a run something else
    /// started): the creation time of the run under the id that the wait's start
    /// found. Its end is posted only to its recorded parent, so a host that does
    /// not own it looks for the end itself ([`Subscriptions::attached`]); and a
    /// later run under the id (that one deleted) is not the one waited on.
    attached: Option<u64>,
}

impl Subscriptions {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Subscribes `link` to the end of `child`. Returns whether it was subscribed
    /// already and the child's start had landed, or its end is on its way: then
    /// nothing more is needed.
    pub(super) fn subscribe(&self, child: &str, link: &ParentLink) -> bool {
        let mut t = self.lock();
        let list = t.by_child.entry(child.to_owned()).or_default();
        if let Some(s) = list.iter().find(|s| s.link == *link) {
            return s.started || s.ended;
        }
        list.push(Subscription {
            link: link.clone(),
            started: false,
            ended: false,
            attached: None,
        });
        t.by_parent
            .entry(link.run_id.clone())
            .or_default()
            .insert(child.to_owned());
        false
    }

    /// Notes that `child` exists, if `link` is still subscribed to it: its own
    /// child, or (`attached`) the run under that id created at that time, which
    /// `link` waits on without being its recorded parent. One step, so no end
    /// taken meanwhile finds the subscription started but not yet attached.
    pub(super) fn started(&self, child: &str, link: &ParentLink, attached: Option<u64>) {
        self.update(child, link, |s| {
            s.started = true;
            s.attached = attached;
        });
    }

    /// Updates `link`'s subscription to `child`, if it is still subscribed.
    fn update(&self, child: &str, link: &ParentLink, f: impl FnOnce(&mut Subscription)) {
        if let Some(s) = self
            .lock()
            .by_child
            .get_mut(child)
            .and_then(|list| list.iter_mut().find(|s| s.link == *link))
        {
            f(s);
        }
    }

    /// The children (all of them, or `child` if it is one) that a run here waits on
    /// without being their recorded parent, and that have not been seen to end.
    pub(super) fn attached(&self, child: Option<&str>) -> Vec<String> {
        let waits =
            |list: &Vec<Subscription>| list.iter().any(|s| s.attached.is_some() && !s.ended);
        let t = self.lock();
        match child {
            Some(child) => t
                .by_child
                .get(child)
                .filter(|list| waits(list))
                .map(|_| vec![child.to_owned()])
                .unwrap_or_default(),
            None => t
                .by_child
                .iter()
                .filter(|(_, list)| waits(list))
                .map(|(child, _)| child.clone())
                .collect(),
        }
    }

    pub(super) fn unsubscribe(&self, child: &str, link: &ParentLink) {
        let mut t = self.lock();
        if let Some(list) = t.by_child.get_mut(child) {
            list.retain(|s| s.link != *link);
            let still = list.iter().any(|s| s.link.run_id == link.run_id);
            if list.is_empty() {
                t.by_child.remove(child);
            }
            if !still {
                t.forget_child_of(&link.run_id, child);
            }
        }
    }

    /// `parent` has ended (it waits on nothing any more): its subscriptions go. A
    /// subscription left behind (its child ended on another host, which told the
    /// parent) would otherwise answer for a later run under the same id, calling
    /// the same child at the same wait: "already started", and it would never hear
    /// the child's end.
    pub(crate) fn forget_parent(&self, parent: &str) {
        let mut t = self.lock();
        let Some(children) = t.by_parent.remove(parent) else {
            return;
        };
        for child in children {
            if let Some(list) = t.by_child.get_mut(&child) {
                list.retain(|s| s.link.run_id != parent);
                if list.is_empty() {
                    t.by_child.remove(&child);
                }
            }
        }
    }

    /// The runs waiting on `child`.
    pub(super) fn parents_of(&self, child: &str) -> Vec<String> {
        self.lock()
            .by_child
            .get(child)
            .map(|list| {
                list.iter()
                    .filter(|s| !s.ended)
                    .map(|s| s.link.run_id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The run under `child` created at `created_at` (whose recorded parent is
    /// `parent`) has ended: returns everyone subscribed to it and not yet told
    /// (only the attached waits, with `attached_only`), and apart (`gone`) the
    /// attached waits on an earlier run under the id, deleted since. Their entries
    /// stay until the end is delivered ([`Subscriptions::unsubscribe`]).
    ///
    /// A subscription whose start has not yet said which run it found is left
    /// alone, unless it is the run's recorded parent: that start may have found
    /// an earlier run under the id, deleted since, and it looks for the end of
    /// the run it found itself (`Core::start_child`).
    pub(crate) fn take(
        &self,
        child: &str,
        created_at: u64,
        parent: Option<&ParentLink>,
        attached_only: bool,
    ) -> Taken {
        let mut taken = Taken::default();
        if let Some(list) = self.lock().by_child.get_mut(child) {
            for s in list.iter_mut().filter(|s| !s.ended) {
                match s.attached {
                    None if attached_only => continue,
                    None if !s.started && parent != Some(&s.link) => continue,
                    Some(run) if run != created_at => taken.gone.push(s.link.clone()),
                    _ => taken.ended.push(s.link.clone()),
                }
                s.ended = true;
            }
        }
        taken
    }

    /// The attached waits on `child` whose run is no longer under the id (the run
    /// there now was created at `current`, or none is): taken as for
    /// [`Subscriptions::take`].
    pub(super) fn take_gone(&self, child: &str, current: Option<u64>) -> Vec<ParentLink> {
        let mut gone = Vec::new();
        if let Some(list) = self.lock().by_child.get_mut(child) {
            for s in list.iter_mut().filter(|s| !s.ended) {
                if s.attached.is_some_and(|run| Some(run) != current) {
                    gone.push(s.link.clone());
                    s.ended = true;
                }
            }
        }
        gone
    }
}

/// What [`Subscriptions::take`] found.
#[derive(Default)]
pub(crate) struct Taken {
    /// Told the end of the run.
    pub(crate) ended: Vec<ParentLink>,
    /// Waiting on an earlier run under the id, deleted since.
    pub(crate) gone: Vec<ParentLink>,
}

impl Table {
    fn forget_child_of(&mut self, parent: &str, child: &str) {
        if let Some(children) = self.by_parent.get_mut(parent) {
            children.remove(child);
            if children.is_empty() {
                self.by_parent.remove(parent);
            }
        }
    }
}
