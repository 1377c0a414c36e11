//! Queues: named limits on how many runs of a kind execute at once and how fast
//! they start ([`QueueOptions`], [`HostBuilder::queue`]), and starting runs on them
//! ([`Host::start_on`], [`StartOptions::queue`](crate::StartOptions)).
//!
//! A run started on a queue is recorded durably as
//! [`RunStatus::Enqueued`](crate::RunStatus::Enqueued) and executes nothing until
//! the queue admits it: by priority, then in start order, while fewer than
//! `concurrency` of the queue's runs are admitted and unfinished, and at most
//! `rate_limit.limit` admissions fall in any window of `rate_limit.period` (read
//! on the host's clock). The limits hold across restarts and crashes: admission is
//! recorded before the run's handler starts, and a host opening the store counts
//! the admitted, unfinished runs first. A run whose admission fails for a
//! passing reason (a storage error) gives its slot to the runs behind it and is
//! admitted again, in its place, after a backoff on the host's clock. A queued
//! run can be signalled (the signal waits in its log), cancelled (it ends without
//! running) and listed.

use std::time::Duration;

use reel_actors::QueueLimits;

use crate::{Error, Host, HostBuilder, Result, RunHandle, StartOptions, Workflow};

/// A queue's limits ([`HostBuilder::queue`]). The default limits nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueOptions {
    /// At most this many of the queue's runs admitted and unfinished at once (a
    /// suspended or parked run holds its slot until it ends); `None`: no limit.
    pub concurrency: Option<usize>,
    /// At most this many admissions per period; `None`: no limit. The window is
    /// counted in memory: a host opening the store begins a new one.
    pub rate_limit: Option<RateLimit>,
}

impl QueueOptions {
    /// Sets [`QueueOptions::concurrency`].
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// Sets [`QueueOptions::rate_limit`]: at most `limit` starts per `period`.
    pub fn rate_limit(mut self, limit: u32, period: Duration) -> Self {
        self.rate_limit = Some(RateLimit { limit, period });
        self
    }
}

/// At most `limit` admissions within any window of `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Admissions allowed per window.
    pub limit: u32,
    /// The window.
    pub period: Duration,
}

impl HostBuilder {
    /// Configures a queue runs can be started on ([`Host::start_on`]). Each host
    /// opening the store admits the queue's runs under these limits (configure the
    /// same queues on every host of a store).
    ///
    /// A zero concurrency, a rate limit of zero starts or over a zero period, or an
    /// empty name makes [`HostBuilder::build`] fail with [`Error::InvalidArgument`].
    pub fn queue(mut self, name: &str, options: QueueOptions) -> Self {
        let invalid = if name.is_empty() {
            Some("a queue name is empty".to_owned())
        } else if options.concurrency == Some(0) {
            Some(format!(
                "queue `{name}`: a concurrency of 0 would never admit a run"
            ))
        } else {
            options
                .rate_limit
                .filter(|r| r.limit == 0 || r.period.is_zero())
                .map(|r| {
                    format!(
                        "queue `{name}`: a rate limit of {} per {:?} would never admit a run",
                        r.limit, r.period
                    )
                })
        };
        if let Some(why) = invalid {
            self.invalid.get_or_insert(Error::InvalidArgument(why));
            return self;
        }
        let limits = QueueLimits {
            concurrency: options.concurrency,
            rate_limit: options.rate_limit.map(|r| (r.limit, r.period)),
        };
        self.options.queues.insert(name.to_owned(), limits);
        self
    }
}

impl Host {
    /// Starts a run of `W` on `queue`: it is recorded enqueued, durably, and runs
    /// when the queue admits it. Idempotent on `run_id` like [`Host::start`].
    /// Shorthand for [`Host::start_with`] with [`StartOptions::queue`].
    ///
    /// # Examples
    /// ```
    /// use reel::{Ctx, Host, QueueOptions, Workflow};
    ///
    /// struct Export;
    /// impl Workflow for Export {
    ///     const NAME: &'static str = "export";
    ///     type Input = u32;
    ///     type Output = u32;
    ///     async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
    ///         ctx.step("export", |_| async move { Ok::<_, String>(n) }).await
    ///     }
    /// }
    ///
    /// # #[tokio::main] async fn main() -> reel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let host = Host::builder()
    ///     .path(dir.path())
    ///     .register(Export)
    ///     .queue("exports", QueueOptions::default().concurrency(2))
    ///     .build()
    ///     .await?;
    /// let runs = [
    ///     host.start_on::<Export>("exports", "e-1", 1).await?,
    ///     host.start_on::<Export>("exports", "e-2", 2).await?,
    ///     host.start_on::<Export>("exports", "e-3", 3).await?,
    /// ];
    /// for run in runs {
    ///     run.result().await?;
    /// }
    /// host.shutdown().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::UnknownQueue`] for a queue the host does not configure, and those of
    /// [`Host::start`]. Nothing is written on an error.
    pub async fn start_on<W: Workflow>(
        &self,
        queue: &str,
        run_id: &str,
        input: W::Input,
    ) -> Result<RunHandle<W>> {
        self.start_with::<W>(run_id, input, StartOptions::default().queue(queue))
            .await
    }
}
