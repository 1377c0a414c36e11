//! Child runs: `ctx.child`.
//!
//! `ChildStarted` is recorded when the child is called, and the child run is
//! started (idempotent on its id) once replay has caught up, whether or not the
//! call's future is ever awaited. The child's end is delivered to this run as
//! `ChildCompleted`, which the driver hands to the call's slot.

use std::future::Future;

use reel_storage::Event;

use crate::ctx::{decode, encode};
use crate::replay::{Kind, Opened};
use crate::slots::{Key, Resolution, WaitInfo};
use crate::{Ctx, Error, Result, Workflow};

impl Ctx {
    /// Starts a child run of workflow `W` (idempotent on `child_run_id`) and waits for
    /// its output. The child is a run like any other; its completion wakes this run,
    /// also across restarts.
    ///
    /// # Errors
    /// The child's own error if it failed ([`Error::Cancelled`] if cancelled),
    /// [`Error::RunExists`]-like failures when the id belongs to another workflow,
    /// [`Error::Codec`], [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn child<W: Workflow>(
        &self,
        child_run_id: &str,
        input: W::Input,
    ) -> impl Future<Output = Result<W::Output>> + Send + use<W> {
        let child_run_id = child_run_id.to_owned();
        let input = encode(&input);
        let (id, opened, done) = {
            let mut st = self.lock();
            let id = st.replay.positional("child");
            let opened = st.replay.open(
                &id,
                Kind::Child {
                    workflow: W::NAME.to_owned(),
                    run_id: child_run_id.clone(),
                },
            );
            if opened.is_ok() {
                st.slots.register(
                    Key::Child(id.clone()),
                    Some(WaitInfo {
                        what: format!("child run `{child_run_id}`"),
                        child: true,
                    }),
                );
            }
            let done = st.replay.child_done(&id);
            (id, opened, done)
        };
        if let (Ok(opened), Ok(input)) = (&opened, &input) {
            if *opened == Opened::New {
                self.record(
                    vec![Event::ChildStarted {
                        id: id.clone(),
                        workflow: W::NAME.to_owned(),
                        version: W::VERSION,
                        run_id: child_run_id.clone(),
                    }],
                    true,
                );
            }
            if !done {
                self.start_child::<W>(&id, &child_run_id, input.clone());
            }
        }
        let wait = self.slot(Key::Child(id.clone()), None);
        let ctx = self.clone();
        async move {
            let opened = opened?;
            input?;
            if opened == Opened::New && !ctx.live() {
                return ctx.frontier(format!("child `{child_run_id}`")).await;
            }
            match wait.await {
                Resolution::Child(Ok(p)) => decode(&p),
                Resolution::Child(Err(f)) => Err(f.into()),
                other => Err(Error::Codec(format!(
                    "child `{child_run_id}` received {other:?}"
                ))),
            }
        }
    }

    /// Queues the start of the child (and the subscription to its end) for when
    /// replay has caught up.
    fn start_child<W: Workflow>(
        &self,
        wait_id: &str,
        child_run_id: &str,
        input: reel_storage::Payload,
    ) {
        let Some(services) = self.inner.services.clone() else {
            return;
        };
        let parent = self.inner.run_id.clone();
        let (wait_id, child_run_id) = (wait_id.to_owned(), child_run_id.to_owned());
        self.lock().effects.push(Box::pin(async move {
            services
                .ensure_child(&parent, &wait_id, W::NAME, W::VERSION, &child_run_id, input)
                .await;
        }));
    }
}
