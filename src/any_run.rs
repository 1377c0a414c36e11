//! [`AnyRun`]: what can be done with a run without its Rust workflow type (signal,
//! cancel, inspect, operate). [`RunHandle<W>`](crate::RunHandle) adds the typed
//! output and dereferences to it, so every operation here works on both.

use std::collections::HashSet;
use std::sync::Arc;

use reel_actors::Core;
use reel_storage::{Event, Record, RunMeta, RunState};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ctx::{Approval, decode, encode};
use crate::primitives::{approval_signal, check_signal_name};
use crate::{Ctx, Error, Result, RunInfo, RunStatus, Uuid};

/// A handle on one run of any workflow: what a tool (an admin endpoint, a CLI)
/// holds when it does not know the run's Rust type. Payloads go in and come out
/// through serde, so `serde_json::Value` works as a payload type. Cheap to clone.
///
/// Made by [`Host::run`](crate::Host::run); a [`RunHandle`](crate::RunHandle)
/// dereferences to one.
#[derive(Clone)]
pub struct AnyRun {
    /// `None` for a handle made while replaying without a host (`reel::testing`):
    /// its methods answer [`Error::Shutdown`].
    pub(crate) core: Option<Arc<Core>>,
    pub(crate) run_id: Arc<str>,
}

impl std::fmt::Debug for AnyRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyRun")
            .field("run_id", &self.run_id)
            .finish()
    }
}

impl AnyRun {
    pub(crate) fn new(core: Option<Arc<Core>>, run_id: &str) -> AnyRun {
        AnyRun {
            core,
            run_id: Arc::from(run_id),
        }
    }

    /// A handle on `run_id` for a handler of this host.
    pub(crate) fn in_run(ctx: &Ctx, run_id: &str) -> AnyRun {
        AnyRun::new(
            ctx.inner
                .services
                .as_ref()
                .and_then(reel_actors::Services::core),
            run_id,
        )
    }

    pub(crate) fn core(&self) -> Result<&Arc<Core>> {
        self.core.as_ref().ok_or(Error::Shutdown)
    }

    pub(crate) async fn meta(&self) -> Result<RunMeta> {
        self.core()?
            .meta(&self.run_id)
            .await?
            .ok_or_else(|| Error::UnknownRun(self.run_id.to_string()))
    }

    /// The run id.
    pub fn id(&self) -> &str {
        &self.run_id
    }

    /// Sends a signal. Buffered in the run's log (also while the run is passivated)
    /// and delivered to the next wait on `name`; a second send with the same
    /// `signal_id` is dropped, so retrying a send is safe. (The ids a run knows are
    /// those of its current log segment and those the segment before it consumed:
    /// after it continues as new twice, a signal consumed two segments back is not
    /// recognised again; one not consumed carries over with its id.)
    ///
    /// # Errors
    /// [`Error::ReservedName`] for a name starting with `approval:` (send approvals
    /// with [`AnyRun::approve`]), [`Error::UnknownRun`], [`Error::RunFinished`],
    /// [`Error::Codec`], [`Error::Storage`], [`Error::Shutdown`].
    pub async fn signal<T: Serialize + ?Sized>(
        &self,
        name: &str,
        payload: &T,
        signal_id: &str,
    ) -> Result<()> {
        check_signal_name(name)?;
        self.send_signal(name, payload, signal_id).await
    }

    async fn send_signal<T: Serialize + ?Sized>(
        &self,
        name: &str,
        payload: &T,
        signal_id: &str,
    ) -> Result<()> {
        let payload = encode(payload)?;
        Ok(self
            .core()?
            .signal(&self.run_id, name, signal_id, payload)
            .await?)
    }

    /// Delivers a human decision to [`Ctx::approval`](crate::Ctx::approval)`(name)`.
    /// Each call is one decision.
    ///
    /// # Errors
    /// As [`AnyRun::signal`].
    pub async fn approve(
        &self,
        name: &str,
        approved: bool,
        feedback: Option<String>,
    ) -> Result<()> {
        let decision = Approval { approved, feedback };
        let id = format!("approval:{name}:{}", Uuid::new_v4());
        self.send_signal(&approval_signal(name), &decision, &id)
            .await
    }

    /// Where the run stands.
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::Storage`].
    pub async fn status(&self) -> Result<RunStatus> {
        match self.core()?.meta(&self.run_id).await? {
            Some(m) => Ok(RunStatus::from(&m.state)),
            None => Err(Error::UnknownRun(self.run_id.to_string())),
        }
    }

    /// Waits until the run is suspended (waiting for a timer, signal, approval or
    /// child) and returns that status. Useful to hand a run over to a human or a
    /// test at the moment it waits.
    ///
    /// # Errors
    /// [`Error::RunFinished`] if the run ends (or is parked) instead,
    /// [`Error::UnknownRun`], [`Error::Storage`], [`Error::Shutdown`].
    pub async fn wait_until_suspended(&self) -> Result<RunStatus> {
        let meta = self
            .core()?
            .wait_for(&self.run_id, |s| {
                s.is_finished() || matches!(s, RunState::Suspended { .. } | RunState::Parked { .. })
            })
            .await?;
        match &meta.state {
            RunState::Suspended { .. } => Ok(RunStatus::from(&meta.state)),
            _ => Err(Error::RunFinished(self.run_id.to_string())),
        }
    }

    /// Cancels the run, and the children it waits on with it, and returns once it
    /// has ended. The request is recorded and reaches the handler where it waits
    /// ([`Ctx::cancelled`]): its pending waits end with [`Error::Cancelled`] and it
    /// may clean up through [`Ctx::shielded`] before it ends. A handler still going
    /// after the host's cancel grace ([`HostBuilder::cancel_grace`](crate::HostBuilder::cancel_grace), 30 s by
    /// default) is cancelled hard. A parked run is cancelled at once. Cancelling a
    /// run that is cancelling or cancelled does nothing more. If the host shuts down
    /// first, the recorded request is carried out when the run resumes.
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::RunFinished`] for a completed or failed run,
    /// [`Error::Storage`].
    pub async fn cancel(&self, reason: &str) -> Result<()> {
        self.request_cancel(reason).await?;
        match self.core()?.wait_settled(&self.run_id).await {
            Ok(_) | Err(reel_actors::ActorError::Shutdown) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// [`AnyRun::cancel`] without waiting: returns once the request is recorded.
    ///
    /// # Errors
    /// As [`AnyRun::cancel`].
    pub async fn request_cancel(&self, reason: &str) -> Result<()> {
        Ok(self.core()?.cancel(&self.run_id, reason, false).await?)
    }

    /// Cancels the run at once, without letting its handler clean up (Temporal's
    /// terminate), and its unfinished children with it. Also ends a run whose
    /// graceful cancel is under way.
    ///
    /// # Errors
    /// As [`AnyRun::cancel`].
    pub async fn terminate(&self, reason: &str) -> Result<()> {
        Ok(self.core()?.cancel(&self.run_id, reason, true).await?)
    }

    /// The child runs this run has started (waited for or detached), in the order
    /// it first called them. A call whose id named a run that already existed
    /// (started by someone else) is not one of them.
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::Storage`].
    pub async fn children(&self) -> Result<Vec<RunInfo>> {
        let core = self.core()?;
        let mut seen = HashSet::new();
        let mut children = Vec::new();
        for event in core.events(&self.run_id).await? {
            if let Event::ChildStarted { run_id, .. } = event
                && seen.insert(run_id.clone())
                && let Some(meta) = core.meta(&run_id).await?
                && meta
                    .parent
                    .as_ref()
                    .is_some_and(|p| *p.run_id == *self.run_id)
            {
                children.push(RunInfo::from(meta));
            }
        }
        Ok(children)
    }

    /// What the host knows about the run: its workflow, version, status, parent,
    /// log segment, and the size of the segment its wake-ups replay. Past
    /// [`HostBuilder::long_log_warning`](crate::HostBuilder::long_log_warning)
    /// events, a run that loops for ever should
    /// [continue as new](crate::Ctx::continue_as_new).
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::Storage`], [`Error::Shutdown`].
    pub async fn info(&self) -> Result<RunInfo> {
        let core = self.core()?;
        let meta = core
            .meta(&self.run_id)
            .await?
            .ok_or_else(|| Error::UnknownRun(self.run_id.to_string()))?;
        let log = core.log_size(&self.run_id, meta.segment_start).await?;
        let mut info = RunInfo::from(meta);
        info.log = Some(log);
        Ok(info)
    }

    /// [`AnyRun::events`] with each record's sequence number and the time it was
    /// appended (records written by a host before `reel-log/5` read as appended at
    /// the epoch): how long a step took, a timer waited, a signal came after its
    /// wait.
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::Storage`] (a corrupt record names its run and
    /// sequence number), [`Error::Shutdown`].
    pub async fn records(&self) -> Result<Vec<Record>> {
        Ok(self.core()?.records(&self.run_id).await?)
    }

    /// The run's durable log, in order, every segment of it (a run that continued
    /// as new has a `ContinuedAsNew` event where each segment ends); readable while
    /// the run runs.
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::Storage`] (a corrupt record names its run and
    /// sequence number).
    pub async fn events(&self) -> Result<Vec<Event>> {
        Ok(self.core()?.events(&self.run_id).await?)
    }
    /// Waits for the run to end and returns its output decoded as `T` (for a tool,
    /// `serde_json::Value`). [`RunHandle::result`](crate::RunHandle::result) is the
    /// typed form.
    ///
    /// # Errors
    /// As [`RunHandle::result`](crate::RunHandle::result), without the workflow
    /// check: [`Error::Codec`] if the output does not decode into `T`.
    pub async fn result<T: DeserializeOwned>(&self) -> Result<T> {
        self.settled_output(|_| Ok(()))
            .await
            .and_then(|p| decode(&p))
    }

    /// Waits for the run to settle and returns the output payload of a completed
    /// run, the error of any other end; `check` sees the metadata first (before
    /// waiting, and again once settled).
    pub(crate) async fn settled_output(
        &self,
        check: impl Fn(&RunMeta) -> Result<()>,
    ) -> Result<reel_storage::Payload> {
        // Waiting stops early on metadata the check refuses (a handle of the wrong
        // workflow fails at once, not when the run ends).
        let (meta, output) = self
            .core()?
            .wait_settled_output(&self.run_id, |m| check(m).is_err())
            .await?;
        check(&meta)?;
        match meta.state {
            RunState::Completed => output.ok_or_else(|| {
                Error::Storage(format!(
                    "run `{}` is completed without an output",
                    self.run_id
                ))
            }),
            RunState::Failed { error } | RunState::Parked { error } => Err(error.into()),
            RunState::Cancelled { reason } => Err(Error::Cancelled(reason)),
            other => Err(Error::Storage(format!("unexpected state {other:?}"))),
        }
    }
}
