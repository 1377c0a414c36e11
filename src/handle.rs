//! [`RunHandle`]: a run of a known workflow type. It adds the typed output to
//! [`AnyRun`] and dereferences to it for everything else. Published values are read
//! in `primitives::publish`.

use std::marker::PhantomData;
use std::ops::Deref;

use reel_storage::RunMeta;

use crate::any_run::AnyRun;
use crate::ctx::decode;
use crate::{Ctx, Error, Result, Workflow};

/// A handle on one run of workflow `W`. Cheap to clone; outlives nothing.
///
/// Every untyped operation (signal, status, cancel, records, ...) is [`AnyRun`]'s,
/// reached through `Deref`.
pub struct RunHandle<W: Workflow> {
    pub(crate) run: AnyRun,
    pub(crate) workflow: PhantomData<fn() -> W>,
}

impl<W: Workflow> Clone for RunHandle<W> {
    fn clone(&self) -> Self {
        RunHandle {
            run: self.run.clone(),
            workflow: PhantomData,
        }
    }
}

impl<W: Workflow> std::fmt::Debug for RunHandle<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("workflow", &W::NAME)
            .field("run_id", &self.run.run_id)
            .finish()
    }
}

impl<W: Workflow> Deref for RunHandle<W> {
    type Target = AnyRun;

    fn deref(&self) -> &AnyRun {
        &self.run
    }
}

impl<W: Workflow> RunHandle<W> {
    pub(crate) fn new(run: AnyRun) -> RunHandle<W> {
        RunHandle {
            run,
            workflow: PhantomData,
        }
    }

    /// A handle on `run_id` for a handler of this host (a detached child).
    pub(crate) fn in_run(ctx: &Ctx, run_id: &str) -> RunHandle<W> {
        RunHandle::new(AnyRun::in_run(ctx, run_id))
    }

    /// The untyped handle on the same run.
    pub fn untyped(&self) -> AnyRun {
        self.run.clone()
    }

    /// Waits for the run to end and returns its output.
    ///
    /// # Errors
    /// The recorded error of a failed run, the variant its handler returned, live
    /// and after a restart: [`Error::Step`], [`Error::Failed`], and the errors of
    /// runs the handler reached ([`Error::UnknownRun`], [`Error::RunFinished`],
    /// [`Error::RunExists`], [`Error::WorkflowMismatch`],
    /// [`Error::InvalidArgument`], [`Error::ChildCycle`]; any other variant comes
    /// back as [`Error::Failed`] with its text); [`Error::Cancelled`], the parking error of a parked run
    /// ([`Error::ReplayDivergence`], [`Error::VersionMismatch`], [`Error::Crashed`]),
    /// [`Error::UnknownRun`], [`Error::WorkflowMismatch`] for a run of another
    /// workflow than `W` (at once, without waiting), [`Error::Codec`] if the output
    /// does not decode into `W::Output`.
    pub async fn result(&self) -> Result<W::Output> {
        let output = self.run.settled_output(check_workflow::<W>).await?;
        decode(&output)
    }
}

impl AnyRun {
    /// The typed handle on the same run, once its workflow is checked.
    ///
    /// # Errors
    /// [`Error::WorkflowMismatch`] for a run of another workflow than `W`,
    /// [`Error::UnknownRun`], [`Error::Storage`], [`Error::Shutdown`].
    pub async fn typed<W: Workflow>(&self) -> Result<RunHandle<W>> {
        check_workflow::<W>(&self.meta().await?)?;
        Ok(RunHandle::new(self.clone()))
    }
}

fn check_workflow<W: Workflow>(meta: &RunMeta) -> Result<()> {
    if meta.workflow == W::NAME {
        return Ok(());
    }
    Err(Error::WorkflowMismatch {
        run_id: meta.run_id.clone(),
        expected: W::NAME.to_owned(),
        found: meta.workflow.clone(),
    })
}
