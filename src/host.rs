//! [`Host`], its builder, and [`RunHandle`].

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use reel_actors::{Core, CoreOptions, Engine, Execution, Outcome, Registry};
use reel_storage::{Event, Failure, FjallStore, MemStore, RunMeta, RunState, Store};
use serde::Serialize;

use crate::ctx::{Approval, decode, encode};
use crate::driver::execute;
use crate::primitives::approval_signal;
use crate::{Error, Result, Uuid, Workflow};

/// Where a run stands.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    /// Executing, or woken and about to.
    Running,
    /// Waiting for a timer, signal, approval or child run.
    Suspended {
        /// What it waits for.
        waiting_on: String,
    },
    /// Finished with a value.
    Completed,
    /// Finished with an error.
    Failed {
        /// The error's Display text.
        error: String,
    },
    /// Cancelled.
    Cancelled,
    /// Cannot go on with the registered code (replay divergence, version no longer
    /// registered, crash loop, unreadable log). Retried when a host opens the store.
    Parked {
        /// The error's Display text.
        error: String,
    },
}

impl From<&RunState> for RunStatus {
    fn from(s: &RunState) -> RunStatus {
        match s {
            RunState::Running => RunStatus::Running,
            RunState::Suspended { waiting_on, .. } => RunStatus::Suspended {
                waiting_on: waiting_on.clone(),
            },
            RunState::Completed => RunStatus::Completed,
            RunState::Failed { error } => RunStatus::Failed {
                error: Error::from(error.clone()).to_string(),
            },
            RunState::Cancelled { .. } => RunStatus::Cancelled,
            RunState::Parked { error } => RunStatus::Parked {
                error: Error::from(error.clone()).to_string(),
            },
            _ => RunStatus::Running,
        }
    }
}

/// One line of [`Host::runs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The run id.
    pub run_id: String,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version the run is bound to.
    pub version: u32,
    /// Where it stands.
    pub status: RunStatus,
}

impl From<RunMeta> for RunInfo {
    fn from(m: RunMeta) -> RunInfo {
        RunInfo {
            status: RunStatus::from(&m.state),
            run_id: m.run_id,
            workflow: m.workflow,
            version: m.version,
        }
    }
}

struct WorkflowEngine<W: Workflow>(Arc<W>);

impl<W: Workflow> Engine for WorkflowEngine<W> {
    fn execute(&self, e: Execution) -> BoxStream<'static, Outcome> {
        execute(
            self.0.clone(),
            e.run_id,
            e.history,
            Some(e.journal),
            Some(e.services),
        )
        .0
    }
}

#[derive(Default)]
struct Definitions {
    engines: HashMap<(String, u32), Arc<dyn Engine>>,
    names: HashSet<String>,
}

impl Registry for Definitions {
    fn lookup(&self, workflow: &str, version: u32) -> Result<Arc<dyn Engine>, Failure> {
        match self.engines.get(&(workflow.to_owned(), version)) {
            Some(e) => Ok(e.clone()),
            None if self.names.contains(workflow) => Err(Failure::VersionMismatch {
                workflow: workflow.to_owned(),
                version,
            }),
            None => Err(Failure::UnknownWorkflow(workflow.to_owned())),
        }
    }
}

/// Configures and opens a [`Host`].
pub struct HostBuilder {
    path: PathBuf,
    in_memory: bool,
    store: Option<Arc<dyn Store>>,
    definitions: Definitions,
    options: CoreOptions,
}

impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuilder")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl HostBuilder {
    /// The fjall directory (default `reel-data`).
    pub fn path(mut self, p: impl Into<PathBuf>) -> Self {
        self.path = p.into();
        self
    }

    /// Keeps everything in memory instead of a fjall directory: same semantics
    /// (replay, signals, timers, children), no durability. For tests of workflows.
    pub fn in_memory(mut self) -> Self {
        self.in_memory = true;
        self
    }

    /// Runs the host over `store` instead of a fjall directory ([`HostBuilder::path`]
    /// and [`HostBuilder::in_memory`] are then ignored): another backend, or a
    /// wrapper such as `reel_storage::testing::FaultStore`, which injects faults for
    /// tests. The host closes the store when it shuts down.
    ///
    /// # Examples
    /// ```
    /// use std::sync::Arc;
    /// use reel::{Host, MemStore};
    ///
    /// # #[tokio::main] async fn main() -> reel::Result<()> {
    /// let host = Host::builder().store(Arc::new(MemStore::new())).build().await?;
    /// assert!(host.runs().await?.is_empty());
    /// host.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Registers a workflow definition. Several `VERSION`s of one `NAME` may be
    /// registered; each run resumes on the version it started with.
    pub fn register<W: Workflow>(mut self, w: W) -> Self {
        self.definitions.names.insert(W::NAME.to_owned());
        self.definitions.engines.insert(
            (W::NAME.to_owned(), W::VERSION),
            Arc::new(WorkflowEngine(Arc::new(w))),
        );
        self
    }

    /// How long a suspended run keeps its actor and decoded log before it is
    /// passivated (default 10 s). Passivated runs cost only their index entries.
    pub fn passivate_after(mut self, d: Duration) -> Self {
        self.options.passivate_after = d;
        self
    }

    /// Crash restarts of one run allowed within `window` before it is parked
    /// (default 3 within 30 s).
    pub fn restart_limit(mut self, restarts: u32, window: Duration) -> Self {
        self.options.restart_limit = restarts;
        self.options.restart_window = window;
        self
    }

    /// Opens the store and starts recovering unfinished runs in the background:
    /// returns as soon as new work can be accepted.
    ///
    /// # Errors
    /// [`Error::Storage`] when the directory cannot be opened (held by another host,
    /// written by an incompatible format, unreadable).
    pub async fn build(self) -> Result<Host> {
        let store: Arc<dyn Store> = if let Some(store) = self.store {
            store
        } else if self.in_memory {
            Arc::new(MemStore::new())
        } else {
            let path = self.path.clone();
            tokio::task::spawn_blocking(move || FjallStore::open(path))
                .await
                .map_err(|e| Error::Storage(e.to_string()))??
        };
        let core = Core::open(store, Arc::new(self.definitions), self.options).await?;
        Ok(Host { core })
    }
}

/// An embedded workflow host over one fjall directory.
///
/// # Examples
/// ```
/// use reel::{Ctx, Host, Workflow};
///
/// struct Double;
/// impl Workflow for Double {
///     const NAME: &'static str = "double";
///     type Input = u64;
///     type Output = u64;
///     async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<u64> {
///         ctx.step("double", |_| async move { Ok::<_, String>(n * 2) }).await
///     }
/// }
///
/// # #[tokio::main] async fn main() -> reel::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let host = Host::builder().path(dir.path()).register(Double).build().await?;
/// let run = host.start::<Double>("d-1", 21).await?;
/// assert_eq!(run.result().await?, 42);
/// host.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Host {
    core: Arc<Core>,
}

impl Host {
    /// A builder with the defaults (`reel-data`, no workflows).
    pub fn builder() -> HostBuilder {
        HostBuilder {
            path: PathBuf::from("reel-data"),
            in_memory: false,
            store: None,
            definitions: Definitions::default(),
            options: CoreOptions::default(),
        }
    }

    /// Starts a run of `W`, idempotent on `run_id`: starting an existing run of the
    /// same workflow returns its handle and changes nothing.
    ///
    /// # Errors
    /// [`Error::UnknownWorkflow`] / [`Error::VersionMismatch`] when `W` is not
    /// registered, [`Error::RunExists`] when another workflow has the id,
    /// [`Error::Codec`], [`Error::Storage`], [`Error::Shutdown`].
    pub async fn start<W: Workflow>(&self, run_id: &str, input: W::Input) -> Result<RunHandle<W>> {
        let input = encode(&input)?;
        self.core
            .start(W::NAME, W::VERSION, run_id, input, None)
            .await?;
        Ok(self.handle(run_id))
    }

    /// A handle on a run, without checking that it exists (its methods do).
    pub fn handle<W: Workflow>(&self, run_id: &str) -> RunHandle<W> {
        RunHandle {
            core: self.core.clone(),
            run_id: Arc::from(run_id),
            workflow: PhantomData,
        }
    }

    /// Every run with its status.
    ///
    /// # Errors
    /// [`Error::Storage`].
    pub async fn runs(&self) -> Result<Vec<RunInfo>> {
        Ok(self
            .core
            .list()
            .await?
            .into_iter()
            .map(RunInfo::from)
            .collect())
    }

    /// How many runs are held in memory right now (running, or suspended and not yet
    /// passivated). Passivated runs cost only their index entries on disk.
    pub async fn live_runs(&self) -> usize {
        self.core.live_runs().await
    }

    /// Stops every run actor and timer, flushes and closes the store. Unfinished runs
    /// (including steps interrupted mid-body, which run again) resume when a new host
    /// opens the same path.
    ///
    /// # Errors
    /// None today; the signature leaves room for reporting a failed final flush.
    pub async fn shutdown(self) -> Result<()> {
        self.core.shutdown().await;
        Ok(())
    }
}

/// A handle on one run of workflow `W`. Cheap to clone; outlives nothing.
pub struct RunHandle<W: Workflow> {
    pub(crate) core: Arc<Core>,
    pub(crate) run_id: Arc<str>,
    workflow: PhantomData<fn() -> W>,
}

impl<W: Workflow> Clone for RunHandle<W> {
    fn clone(&self) -> Self {
        RunHandle {
            core: self.core.clone(),
            run_id: self.run_id.clone(),
            workflow: PhantomData,
        }
    }
}

impl<W: Workflow> std::fmt::Debug for RunHandle<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("workflow", &W::NAME)
            .field("run_id", &self.run_id)
            .finish()
    }
}

impl<W: Workflow> RunHandle<W> {
    /// The run id.
    pub fn id(&self) -> &str {
        &self.run_id
    }

    /// Sends a signal. Buffered in the run's log (also while the run is passivated)
    /// and delivered to the next wait on `name`; a second send with the same
    /// `signal_id` is dropped, so retrying a send is safe.
    ///
    /// # Errors
    /// [`Error::ReservedName`] for a name starting with `approval:` (send approvals
    /// with [`RunHandle::approve`]), [`Error::UnknownRun`], [`Error::RunFinished`],
    /// [`Error::Codec`], [`Error::Storage`], [`Error::Shutdown`].
    pub async fn signal<T: Serialize + ?Sized>(
        &self,
        name: &str,
        payload: &T,
        signal_id: &str,
    ) -> Result<()> {
        if name.starts_with(&approval_signal("")) {
            return Err(Error::ReservedName(name.to_owned()));
        }
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
            .core
            .signal(&self.run_id, name, signal_id, payload)
            .await?)
    }

    /// Delivers a human decision to [`Ctx::approval`](crate::Ctx::approval)`(name)`.
    /// Each call is one decision.
    ///
    /// # Errors
    /// As [`RunHandle::signal`].
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
        match self.core.meta(&self.run_id).await? {
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
            .core
            .wait_for(&self.run_id, |s| {
                s.is_finished() || matches!(s, RunState::Suspended { .. } | RunState::Parked { .. })
            })
            .await?;
        match &meta.state {
            RunState::Suspended { .. } => Ok(RunStatus::from(&meta.state)),
            _ => Err(Error::RunFinished(self.run_id.to_string())),
        }
    }

    /// Cancels the run (and its unfinished children); its handler stops at once.
    /// Cancelling a cancelled run does nothing.
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::RunFinished`] for a completed or failed run,
    /// [`Error::Storage`].
    pub async fn cancel(&self, reason: &str) -> Result<()> {
        Ok(self.core.cancel(&self.run_id, reason).await?)
    }

    /// Waits for the run to end and returns its output.
    ///
    /// # Errors
    /// The recorded error of a failed run (for example [`Error::Step`]),
    /// [`Error::Cancelled`], the parking error of a parked run
    /// ([`Error::ReplayDivergence`], [`Error::VersionMismatch`], [`Error::Crashed`]),
    /// [`Error::UnknownRun`], [`Error::WorkflowMismatch`] for a run of another
    /// workflow than `W` (at once, without waiting), [`Error::Codec`] if the output
    /// does not decode into `W::Output`.
    pub async fn result(&self) -> Result<W::Output> {
        if let Some(meta) = self.core.meta(&self.run_id).await? {
            self.check_workflow(&meta)?;
        }
        let meta = self.core.wait_settled(&self.run_id).await?;
        self.check_workflow(&meta)?;
        match meta.state {
            RunState::Completed => match self.core.last_event(&self.run_id).await? {
                Some(Event::RunCompleted { output }) => decode(&output),
                other => Err(Error::Storage(format!(
                    "run `{}` is completed but its log ends with {other:?}",
                    self.run_id
                ))),
            },
            RunState::Failed { error } | RunState::Parked { error } => Err(error.into()),
            RunState::Cancelled { reason } => Err(Error::Cancelled(reason)),
            other => Err(Error::Storage(format!("unexpected state {other:?}"))),
        }
    }

    fn check_workflow(&self, meta: &RunMeta) -> Result<()> {
        if meta.workflow == W::NAME {
            return Ok(());
        }
        Err(Error::WorkflowMismatch {
            run_id: self.run_id.to_string(),
            expected: W::NAME.to_owned(),
            found: meta.workflow.clone(),
        })
    }

    /// The run's durable log, in order; readable while the run runs.
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::Storage`] (a corrupt record names its run and
    /// sequence number).
    pub async fn events(&self) -> Result<Vec<Event>> {
        Ok(self.core.events(&self.run_id).await?)
    }
}
