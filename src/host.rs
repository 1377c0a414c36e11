//! [`Host`] and its builder, and the engine each registered workflow runs on.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use foldhash::HashMap;
use futures::stream::BoxStream;
use reel_actors::{Core, CoreOptions, Engine, Execution, Outcome, QueuePlace, Registry};
use reel_storage::{Clock, Failure, FjallStore, MemStore, Store};

use crate::ctx::{RunIdentity, encode, millis};
use crate::driver::execute;
use crate::schedule::Scheduler;
use crate::{AnyRun, Error, Result, RunHandle, RunInfo, StartOptions, Workflow, closing};

struct WorkflowEngine<W: Workflow>(Arc<W>);

impl<W: Workflow> Engine for WorkflowEngine<W> {
    fn execute(&self, e: Execution) -> BoxStream<'static, Outcome> {
        let base = e.journal.base();
        let run = RunIdentity {
            run_id: e.run_id,
            workflow: W::NAME,
            segment: e.segment,
            parent: e.parent,
        };
        execute(
            self.0.clone(),
            run,
            e.history,
            base,
            Some(e.journal),
            Some(e.services),
        )
        .0
    }
}

#[derive(Default)]
struct Definitions {
    /// By workflow name, then version: a lookup allocates nothing.
    engines: HashMap<String, HashMap<u32, Arc<dyn Engine>>>,
}

impl Registry for Definitions {
    fn lookup(&self, workflow: &str, version: u32) -> Result<Arc<dyn Engine>, Failure> {
        let Some(versions) = self.engines.get(workflow) else {
            return Err(Failure::UnknownWorkflow(workflow.to_owned()));
        };
        versions
            .get(&version)
            .cloned()
            .ok_or_else(|| Failure::VersionMismatch {
                workflow: workflow.to_owned(),
                version,
            })
    }

    fn newest(&self, workflow: &str) -> Option<u32> {
        self.engines.get(workflow)?.keys().max().copied()
    }
}

/// Configures and opens a [`Host`].
pub struct HostBuilder {
    path: PathBuf,
    in_memory: bool,
    store: Option<Arc<dyn Store>>,
    #[cfg(feature = "postgres")]
    postgres: Option<String>,
    definitions: Definitions,
    pub(crate) options: CoreOptions,
    /// The first invalid setting, reported by `build`.
    pub(crate) invalid: Option<Error>,
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

    /// Keeps the runs in the PostgreSQL database at `url` instead of a fjall
    /// directory, as one of the hosts sharing it: [`build`](HostBuilder::build)
    /// joins the database with [`PgStore::join`](crate::postgres::PgStore::join)
    /// under a host id new for this host (`<hostname>-<pid>-<random>`), creating or
    /// upgrading reel's tables. Several hosts built this way on one database share
    /// its runs: each leases a share of the 256 partitions and runs their runs, and
    /// any host starts, signals and operates any run; a host alone leases them all.
    /// A host that shuts down gives its leases back at once; those of a crashed host
    /// run out after the lease time (10 s), and only then does another host (or the
    /// restarted one, a new host) run its runs.
    ///
    /// For one host alone, with no leases and so no wait after a crash (but no
    /// second host either), use `.store(PgStore::connect(url).await?)`; for a host
    /// id or lease time of your own, `.store(PgStore::join(url, config).await?)`.
    /// [`HostBuilder::store`] takes precedence, and [`HostBuilder::path`] and
    /// [`HostBuilder::in_memory`] are ignored. Needs the `postgres` feature (on by
    /// default).
    ///
    /// # Examples
    /// ```no_run
    /// # use reel::Host;
    /// # #[tokio::main] async fn main() -> reel::Result<()> {
    /// let host = Host::builder().postgres("postgres://reel@db/reel").build().await?;
    /// # host.shutdown().await }
    /// ```
    #[cfg(feature = "postgres")]
    pub fn postgres(mut self, url: impl Into<String>) -> Self {
        self.postgres = Some(url.into());
        self
    }

    /// Registers a workflow definition. Several `VERSION`s of one `NAME` may be
    /// registered; each run resumes on the version it started with.
    pub fn register<W: Workflow>(mut self, w: W) -> Self {
        self.definitions
            .engines
            .entry(W::NAME.to_owned())
            .or_default()
            .insert(W::VERSION, Arc::new(WorkflowEngine(Arc::new(w))));
        self
    }

    /// The clock the host reads and waits on: timers, `ctx.now()`, retry
    /// backoffs, run deadlines and the times on records ([`SystemClock`] by
    /// default; [`TestClock`](crate::testing::TestClock) in tests).
    ///
    /// [`SystemClock`]: crate::SystemClock
    pub fn clock(mut self, c: impl Clock) -> Self {
        self.options.clock = Arc::new(c);
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

    /// How long a cancelled run's handler may go on cleaning up before the run is
    /// cancelled hard (default 30 s; zero cancels at once, as
    /// [`AnyRun::terminate`] does).
    pub fn cancel_grace(mut self, d: Duration) -> Self {
        self.options.cancel_grace = d;
        self
    }

    /// A run whose current log segment grows past `events` events gets a
    /// `tracing` warning, once per activation (default 10,000): every wake-up
    /// replays the whole segment, so a run that loops for ever should
    /// [continue as new](crate::Ctx::continue_as_new).
    pub fn long_log_warning(mut self, events: u64) -> Self {
        self.options.long_log_events = events;
        self
    }

    /// How long finished runs are kept: by default for ever. With a
    /// [`Retention`](crate::Retention) that deletes, the host deletes the runs that
    /// ended longer ago than it keeps them, in the background every
    /// [`Retention::every`](crate::Retention), examining a bounded number of runs
    /// per pass, and compacts the store at most once an hour after deleting so the
    /// space comes back. [`Host::enforce_retention`] runs a pass now.
    pub fn retention(mut self, retention: crate::Retention) -> Self {
        self.options.retention = retention;
        self
    }

    /// Opens the store and starts recovering unfinished runs in the background:
    /// returns as soon as new work can be accepted.
    ///
    /// If a [`Host`] of this process on the same directory was dropped without
    /// [`Host::shutdown`] and is still shutting down in the background, this waits
    /// for it first.
    ///
    /// # Errors
    /// [`Error::StoreLocked`] when another live host holds the directory (another
    /// process, or a `Host` of this process that has not shut down),
    /// [`Error::Storage`] when it cannot be opened (written by an incompatible
    /// format, unreadable), or when the database given to `postgres` (feature
    /// `postgres`) cannot be reached or holds another format.
    pub async fn build(self) -> Result<Host> {
        if let Some(invalid) = self.invalid {
            return Err(invalid);
        }
        let mut dir = None;
        #[cfg(feature = "postgres")]
        let store = match (self.store, self.postgres) {
            (None, Some(url)) => Some(
                reel_postgres::PgStore::join(&url, reel_postgres::ClusterConfig::new(new_host_id()))
                    .await? as Arc<dyn Store>,
            ),
            (store, _) => store,
        };
        #[cfg(not(feature = "postgres"))]
        let store = self.store;
        let store: Arc<dyn Store> = if let Some(store) = store {
            store
        } else if self.in_memory {
            Arc::new(MemStore::new())
        } else {
            let key = closing::key(&self.path);
            closing::wait_for(&key).await;
            dir = Some(key);
            let path = self.path.clone();
            tokio::task::spawn_blocking(move || FjallStore::open(path))
                .await
                .map_err(|e| Error::Storage(e.to_string()))??
        };
        let core = Core::open(store, Arc::new(self.definitions), self.options).await?;
        let scheduler = Scheduler::start(&core);
        Ok(Host {
            inner: Arc::new(HostInner {
                core,
                scheduler,
                dir: dir.map(|d| closing::key(&d)),
                shut_down: tokio::sync::OnceCell::new(),
            }),
        })
    }
}

/// An embedded workflow host over one fjall directory.
///
/// Cheap to clone: clones share one host. [`Host::shutdown`] (from any clone, once)
/// stops it; dropping the last clone without it shuts the host down in the
/// background on the current tokio runtime, and a new host for the same directory
/// in this process waits for that to finish. [`RunHandle`]s work until the host is
/// shut down, then return [`Error::Shutdown`].
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
#[derive(Debug, Clone)]
pub struct Host {
    inner: Arc<HostInner>,
}

struct HostInner {
    core: Arc<Core>,
    /// Fires the durable schedules (`Host::schedule`).
    scheduler: Arc<Scheduler>,
    /// The fjall directory (its registry key), for a host opened by path.
    dir: Option<PathBuf>,
    /// Set once a shutdown has finished; concurrent callers wait for the first.
    shut_down: tokio::sync::OnceCell<()>,
}

impl std::fmt::Debug for HostInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("dir", &self.dir)
            .field("shut_down", &self.shut_down.initialized())
            .finish_non_exhaustive()
    }
}

impl Drop for HostInner {
    /// The last clone was dropped without `shutdown()`: shut down in the background
    /// (a bare task: it ends when the shutdown does, or is dropped with the
    /// runtime, which releases the directory's entry in the registry either way).
    fn drop(&mut self) {
        self.scheduler.stop();
        if self.shut_down.initialized() {
            return;
        }
        let guard = self.dir.clone().map(closing::mark);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                tracing::debug!(dir = ?self.dir, "reel: Host dropped; shutting down in the background");
                let core = self.core.clone();
                runtime.spawn(async move {
                    core.shutdown().await;
                    drop(guard);
                });
            }
            Err(_) => {
                tracing::error!(
                    dir = ?self.dir,
                    "reel: a Host was dropped outside a tokio runtime without Host::shutdown(): \
                     it was NOT shut down (its runs stop where they are; nothing recorded is \
                     lost, and a new host resumes them). Call `host.shutdown().await` before \
                     dropping it."
                );
                drop(guard);
            }
        }
    }
}

impl Host {
    /// A builder with the defaults (`reel-data`, no workflows).
    pub fn builder() -> HostBuilder {
        HostBuilder {
            path: PathBuf::from("reel-data"),
            in_memory: false,
            store: None,
            #[cfg(feature = "postgres")]
            postgres: None,
            definitions: Definitions::default(),
            options: CoreOptions::default(),
            invalid: None,
        }
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }

    pub(crate) fn scheduler_ref(&self) -> &Arc<Scheduler> {
        &self.inner.scheduler
    }

    /// Starts a run of `W`, idempotent on `run_id`: starting an existing run of the
    /// same workflow returns its handle and changes nothing. Returns once the run
    /// is recorded durably. A new run's handler first runs here, on the caller's
    /// task, until it waits or is about to do something (a step body, a child):
    /// what it recorded so far goes into the run's first write, and a run that
    /// only waits is written waiting. From there its handler runs in the
    /// background (in a burst of starts, `start` waits while many new runs are
    /// still being activated).
    ///
    /// # Errors
    /// [`Error::UnknownWorkflow`] / [`Error::VersionMismatch`] when `W` is not
    /// registered, [`Error::RunExists`] when another workflow has the id,
    /// [`Error::InvalidArgument`] for an id that cannot be a run's (see there),
    /// [`Error::Codec`], [`Error::Storage`], [`Error::Shutdown`].
    pub async fn start<W: Workflow>(&self, run_id: &str, input: W::Input) -> Result<RunHandle<W>> {
        self.start_with::<W>(run_id, input, StartOptions::default())
            .await
    }

    /// [`Host::start`] with options: a `timeout` after which the run is asked to
    /// cancel (durably: the deadline survives restarts, and one that passed while
    /// no host ran fires at once). Starting an existing run changes nothing, its
    /// options included.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use reel::{Ctx, Error, Host, StartOptions, Workflow};
    ///
    /// struct Wait;
    /// impl Workflow for Wait {
    ///     const NAME: &'static str = "wait";
    ///     type Input = ();
    ///     type Output = ();
    ///     async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<()> {
    ///         ctx.wait_for_signal::<()>("never").await
    ///     }
    /// }
    ///
    /// # #[tokio::main] async fn main() -> reel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let host = Host::builder().path(dir.path()).register(Wait).build().await?;
    /// let options = StartOptions::default().timeout(Duration::from_millis(50));
    /// let run = host.start_with::<Wait>("w-1", (), options).await?;
    /// assert!(matches!(run.result().await, Err(Error::Cancelled(_))));
    /// host.shutdown().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Host::start`].
    pub async fn start_with<W: Workflow>(
        &self,
        run_id: &str,
        input: W::Input,
        options: StartOptions,
    ) -> Result<RunHandle<W>> {
        let input = encode(&input)?;
        let (deadline, place) = self.placement(options);
        match place {
            Some(place) => {
                // Boxed: a queued start's future would make every start's larger.
                Box::pin(self.core().enqueue(
                    W::NAME,
                    W::VERSION,
                    run_id,
                    input,
                    deadline,
                    place,
                    Vec::new(),
                ))
                .await?;
            }
            None => {
                // Boxed: the core's start is kilobytes of state, held only while the
                // start is under way; unboxed, it would be part of every caller's
                // future (and task) for as long as the caller lives.
                Box::pin(
                    self.core()
                        .start(W::NAME, W::VERSION, run_id, input, None, deadline),
                )
                .await?;
            }
        }
        Ok(self.handle(run_id))
    }

    /// What `options` ask of a new run: its deadline (ms since the epoch) and its
    /// place on a queue.
    pub(crate) fn placement(&self, options: StartOptions) -> (Option<u64>, Option<QueuePlace>) {
        let now = self.core().clock().now_ms();
        let deadline = options.timeout.map(|t| now.saturating_add(millis(t)));
        let place = options.queue.map(|queue| QueuePlace {
            queue,
            priority: options.priority,
            dedup_key: options.dedup_key,
        });
        (deadline, place)
    }

    /// A handle on a run, without checking that it exists (its methods do).
    pub fn handle<W: Workflow>(&self, run_id: &str) -> RunHandle<W> {
        RunHandle::new(self.run(run_id))
    }

    /// An untyped handle on a run of any workflow, without checking that it exists
    /// (its methods do): what a tool acting on runs it has no Rust type for holds.
    pub fn run(&self, run_id: &str) -> AnyRun {
        AnyRun::new(Some(self.core().clone()), run_id)
    }

    /// Every run with its status.
    ///
    /// # Errors
    /// [`Error::Storage`].
    pub async fn runs(&self) -> Result<Vec<RunInfo>> {
        Ok(self
            .core()
            .list()
            .await?
            .into_iter()
            .map(RunInfo::from)
            .collect())
    }

    /// How many runs are held in memory right now (running, or suspended and not yet
    /// passivated). Passivated runs cost only their index entries on disk.
    pub async fn live_runs(&self) -> usize {
        self.core().live_runs().await
    }

    /// Stops every run actor and timer, flushes and closes the store. Unfinished runs
    /// (including steps interrupted mid-body, which run again) resume when a new host
    /// opens the same path. Shuts down every clone of this host; a second call (from
    /// any clone) waits for the first one to finish and does nothing else.
    ///
    /// # Errors
    /// None today; the signature leaves room for reporting a failed final flush.
    pub async fn shutdown(&self) -> Result<()> {
        let core = self.core();
        self.inner.scheduler.stop();
        self.inner.shut_down.get_or_init(|| core.shutdown()).await;
        Ok(())
    }
}

/// A host id for [`HostBuilder::postgres`]: the machine's name, the process id
/// and a random part, so that every host (several in one process too) is a new
/// one, as a cluster member must be.
#[cfg(feature = "postgres")]
fn new_host_id() -> String {
    let machine = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{machine}-{}-{}", std::process::id(), &random[..8])
}
