//! [`Host::signal_with_start`]: a signal to a run that may not exist yet, which
//! creates it (an entity whose first message starts it: a cart, an account, a
//! chat session; Temporal's `SignalWithStart`).

use serde::Serialize;

#[cfg(doc)]
use crate::Error;
use crate::ctx::encode;
use crate::primitives::check_signal_name;
use crate::{Host, Result, RunHandle, StartOptions, Workflow};

impl Host {
    /// Sends the signal `name` with `payload` (id `signal_id`, as for
    /// [`AnyRun::signal`](crate::AnyRun::signal)) to the run `run_id` of `W`,
    /// creating the run with `input` first if it does not exist.
    ///
    /// A new run is written with the signal already in its log, in the same
    /// durable write that creates it: none of its executions runs without it, and a
    /// crash cannot leave the run created but not signalled. A run of `W` that
    /// exists and has not ended gets the signal as `signal` delivers it (an
    /// enqueued run sees it once its queue admits it). Calls that race on one new
    /// id create one run and deliver every signal. The run is created as
    /// [`Host::start`] creates it; [`Host::signal_with_start_with`] creates it on a
    /// queue or with a timeout.
    ///
    /// Retrying a call with the same `signal_id` delivers the signal once, with
    /// `signal`'s limits: the ids a run knows are those of its current log segment
    /// and those the segment before it consumed (a signal consumed two segments
    /// back is not recognised again),
    /// a retry after the run ended is [`Error::RunFinished`] although the first
    /// call delivered it, and after the run is deleted (or removed by retention)
    /// the id is free: the call creates a new run.
    ///
    /// # Examples
    /// ```
    /// # use reel::{Ctx, Host, Workflow};
    /// struct Cart;
    /// impl Workflow for Cart {
    ///     const NAME: &'static str = "cart";
    ///     type Input = ();
    ///     type Output = Vec<String>;
    ///     async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
    ///         let mut items = Vec::new();
    ///         loop {
    ///             let item: String = ctx.wait_for_signal("add").await?;
    ///             if item == "checkout" {
    ///                 return Ok(items);
    ///             }
    ///             items.push(item);
    ///         }
    ///     }
    /// }
    /// # #[tokio::main] async fn main() -> reel::Result<()> {
    /// let host = Host::builder().in_memory().register(Cart).build().await?;
    /// // The first message creates the cart, the others reach it.
    /// host.signal_with_start::<Cart, _>("cart-7", (), "add", "apple", "m-1").await?;
    /// host.signal_with_start::<Cart, _>("cart-7", (), "add", "pear", "m-2").await?;
    /// let cart = host.signal_with_start::<Cart, _>("cart-7", (), "add", "checkout", "m-3").await?;
    /// assert_eq!(cart.result().await?, ["apple", "pear"]);
    /// # host.shutdown().await }
    /// ```
    ///
    /// # Errors
    /// [`Error::UnknownWorkflow`] when `W` is not registered,
    /// [`Error::VersionMismatch`] when it is registered at another version only,
    /// [`Error::RunExists`] when another workflow has the id,
    /// [`Error::RunFinished`] when the run has ended, [`Error::UnknownRun`] when it
    /// is deleted during the call, [`Error::ReservedName`] for a name reserved for
    /// approvals, [`Error::Codec`] when the input or payload does not serialize,
    /// [`Error::Storage`], [`Error::Shutdown`].
    pub async fn signal_with_start<W: Workflow, T: Serialize + ?Sized>(
        &self,
        run_id: &str,
        input: W::Input,
        name: &str,
        payload: &T,
        signal_id: &str,
    ) -> Result<RunHandle<W>> {
        self.signal_with_start_with::<W, T>(
            run_id,
            input,
            StartOptions::default(),
            name,
            payload,
            signal_id,
        )
        .await
    }

    /// [`Host::signal_with_start`], creating a new run as
    /// [`Host::start_with`] does with `options`: with a timeout, or on a queue
    /// (recorded enqueued, with the signal already in its first write, and run
    /// once the queue admits it). The options apply only when the call creates
    /// the run; an existing run just gets the signal.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use reel::{Ctx, Host, QueueOptions, StartOptions, Workflow};
    /// # struct Session;
    /// # impl Workflow for Session {
    /// #     const NAME: &'static str = "session";
    /// #     type Input = ();
    /// #     type Output = String;
    /// #     async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<String> {
    /// #         ctx.wait_for_signal("msg").await
    /// #     }
    /// # }
    /// # #[tokio::main] async fn main() -> reel::Result<()> {
    /// let host = Host::builder()
    ///     .in_memory()
    ///     .queue("sessions", QueueOptions::default().concurrency(100))
    ///     .register(Session)
    ///     .build()
    ///     .await?;
    /// let options = StartOptions::default()
    ///     .queue("sessions")
    ///     .timeout(Duration::from_secs(3600));
    /// let run = host
    ///     .signal_with_start_with::<Session, _>("s-1", (), options, "msg", "hello", "m-1")
    ///     .await?;
    /// assert_eq!(run.result().await?, "hello");
    /// # host.shutdown().await }
    /// ```
    ///
    /// # Errors
    /// As [`Host::signal_with_start`]; for a new run on a queue, as
    /// [`Host::start_on`] too ([`Error::UnknownQueue`], [`Error::Deduplicated`]).
    pub async fn signal_with_start_with<W: Workflow, T: Serialize + ?Sized>(
        &self,
        run_id: &str,
        input: W::Input,
        options: StartOptions,
        name: &str,
        payload: &T,
        signal_id: &str,
    ) -> Result<RunHandle<W>> {
        check_signal_name(name)?;
        let input = encode(&input)?;
        let payload = encode(payload)?;
        let (deadline, place) = self.placement(options);
        self.core()
            .signal_with_start(
                W::NAME,
                W::VERSION,
                run_id,
                input,
                deadline,
                place,
                (name, signal_id, payload),
            )
            .await?;
        Ok(self.handle(run_id))
    }
}
