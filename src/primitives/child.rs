//! Child runs: `ctx.child` (waited for) and `ctx.start_child` (detached).
//!
//! `ChildStarted` is recorded when the child is called, and the child run is
//! started (idempotent on its id) once replay has caught up, whether or not the
//! call's future is ever awaited. A waited-for child's end is delivered to this run
//! as `ChildCompleted`, which the driver hands to the call's slot. A detached child
//! (`detached#<n>`) is not waited for: this run only learns that it was created
//! (`ChildDetached`), is not told when it ends and does not cancel it.

use std::future::Future;
use std::sync::{Arc, Weak};

use futures::future::Either;
use reel_actors::ChildCall;
use reel_storage::{Event, ParentLink, Payload};

use crate::RunHandle;
use crate::ctx::{Inner, decode, encode};
use crate::replay::{Kind, Opened};
use crate::slots::{Key, Resolution, WaitInfo};
use crate::{Ctx, Error, Result, Workflow};

/// How a child call goes on after its bookkeeping.
struct Called {
    id: String,
    opened: Result<Opened>,
}

impl Ctx {
    /// Starts a child run of workflow `W` (idempotent on `child_run_id`) and waits for
    /// its output. The child is a run like any other; its completion wakes this run,
    /// also across restarts. It is started even if this future is never awaited, and
    /// asked to cancel when this run is cancelled, continues as new, completes or
    /// fails before it ended (Temporal's default parent-close policy; a child that
    /// must outlive its parent is started with [`Ctx::start_child`]). Called on the
    /// id of a run this run did not start, it only waits for that run's end, and
    /// never asks it to cancel.
    ///
    /// # Errors
    /// The child's own error if it failed ([`Error::Cancelled`] if cancelled, or if
    /// this run is asked to cancel while it waits), [`Error::RunExists`]-like
    /// failures when the id belongs to another workflow, [`Error::Codec`],
    /// [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn child<W: Workflow>(
        &self,
        child_run_id: &str,
        input: W::Input,
    ) -> impl Future<Output = Result<W::Output>> + Send + use<W> {
        let child_run_id = child_run_id.to_owned();
        let called = match self.call_child::<W>(false, &child_run_id, &input) {
            Ok(called) => called,
            Err(e) => return Either::Left(std::future::ready(Err(e))),
        };
        let wait = self.slot(Key::Child(called.id.clone()), None);
        let ctx = self.clone();
        Either::Right(async move {
            let opened = called.opened?;
            if opened == Opened::New && !ctx.live() {
                return ctx.frontier(format!("child `{child_run_id}`")).await;
            }
            match wait.await {
                Resolution::Child(Ok(p)) => decode(&p),
                Resolution::Child(Err(f)) => Err(f.into()),
                Resolution::Cancelled(reason) => Err(Error::Cancelled(reason)),
                other => Err(Error::Codec(format!(
                    "child `{child_run_id}` received {other:?}"
                ))),
            }
        })
    }

    /// Starts a detached child run of workflow `W` (idempotent on `child_run_id`)
    /// and returns its handle once it exists, without waiting for it to end. This
    /// run is not told when it ends and does not cancel it; its parent id is this
    /// run's. To wait for a child durably, use [`Ctx::child`]; the handle's
    /// `result()` is not a durable wait.
    ///
    /// # Errors
    /// [`Error::Failed`] naming why the child could not be created (its id belongs to
    /// another workflow, `W` is not registered), [`Error::Cancelled`] once this run
    /// is asked to cancel, [`Error::Codec`], [`Error::ReplayDivergence`],
    /// [`Error::Storage`].
    pub fn start_child<W: Workflow>(
        &self,
        child_run_id: &str,
        input: W::Input,
    ) -> impl Future<Output = Result<RunHandle<W>>> + Send + use<W> {
        let child_run_id = child_run_id.to_owned();
        let called = match self.call_child::<W>(true, &child_run_id, &input) {
            Ok(called) => called,
            Err(e) => return Either::Left(std::future::ready(Err(e))),
        };
        let wait = self.slot(Key::Child(called.id.clone()), None);
        let ctx = self.clone();
        Either::Right(async move {
            let opened = called.opened?;
            if opened == Opened::New && !ctx.live() {
                return ctx
                    .frontier(format!("detached child `{child_run_id}`"))
                    .await;
            }
            match wait.await {
                Resolution::Detached(None) => Ok(RunHandle::in_run(&ctx, &child_run_id)),
                Resolution::Detached(Some(f)) => Err(f.into()),
                Resolution::Cancelled(reason) => Err(Error::Cancelled(reason)),
                other => Err(Error::Codec(format!(
                    "detached child `{child_run_id}` received {other:?}"
                ))),
            }
        })
    }

    /// The bookkeeping both child calls share: the refusals that come before any
    /// (a run asked to cancel, an input that does not encode), then the id
    /// (`child#n` or `detached#n`), matching against the log, `ChildStarted`, and
    /// queueing the start unless the log says it is done.
    fn call_child<W: Workflow>(
        &self,
        detached: bool,
        child_run_id: &str,
        input: &W::Input,
    ) -> Result<Called> {
        if let Some(e) = self.refused() {
            return Err(e);
        }
        // An input that does not encode is refused before the call is matched
        // against the log: nothing is recorded, so no replay may expect it.
        let input = encode(input)?;
        let (id, opened, done) = {
            let mut st = self.lock();
            let id = st
                .replay
                .positional(if detached { "detached" } else { "child" });
            let opened = st.replay.open(
                &id,
                Kind::Child {
                    workflow: W::NAME.to_owned(),
                    run_id: child_run_id.to_owned(),
                },
            );
            if opened.is_ok() {
                let what = if detached {
                    format!("the start of detached child `{child_run_id}`")
                } else {
                    format!("child run `{child_run_id}`")
                };
                st.slots.register(
                    Key::Child(id.clone()),
                    Some(WaitInfo {
                        what,
                        child: !detached,
                    }),
                );
            }
            let done = st.replay.child_done(&id);
            (id, opened, done)
        };
        if let Ok(opened) = &opened {
            if *opened == Opened::New {
                self.record(
                    Event::ChildStarted {
                        id: id.clone(),
                        workflow: W::NAME.to_owned(),
                        version: W::VERSION,
                        run_id: child_run_id.to_owned(),
                    },
                    true,
                );
            }
            if !done {
                self.queue_start::<W>(&id, child_run_id, input);
            }
        }
        Ok(Called { id, opened })
    }

    /// Queues the child's start (and, for a waited-for child, the subscription to
    /// its end) for when replay has caught up.
    fn queue_start<W: Workflow>(&self, wait_id: &str, run_id: &str, input: Payload) {
        let Some(services) = self.inner.services.clone() else {
            return;
        };
        let parent = self.inner.run_id.clone();
        let journal = self.inner.journal.clone();
        let (wait_id, run_id) = (wait_id.to_owned(), run_id.to_owned());
        let mut st = self.lock();
        // However the start ends (done, refused, or its task dropped), the step
        // bodies called after it may go on.
        let started = StartDone {
            ctx: Arc::downgrade(&self.inner),
            n: st.starts.queue(),
        };
        st.effects.push(Box::pin(async move {
            let _started = started;
            // The child's end may have been appended while this execution replayed:
            // then there is nothing to start or wait for.
            if journal.is_some_and(|j| j.child_ended(&wait_id)) {
                return;
            }
            services
                .start_child(ChildCall {
                    link: ParentLink {
                        run_id: parent.to_string(),
                        wait_id,
                    },
                    workflow: W::NAME.to_owned(),
                    version: W::VERSION,
                    run_id,
                    input,
                })
                .await;
        }));
    }
}

/// Marks a queued child start finished when dropped ([`ChildStarts::finish`]).
/// Holds the execution's state weakly: a start never keeps it alive.
struct StartDone {
    ctx: Weak<Inner>,
    n: u64,
}

impl Drop for StartDone {
    fn drop(&mut self) {
        let Some(inner) = self.ctx.upgrade() else {
            return;
        };
        let wakers = inner.lock().starts.finish(self.n);
        for waker in wakers {
            waker.wake();
        }
    }
}
