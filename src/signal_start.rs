//! [`Host::signal_with_start`]: a signal to a run that may not exist yet, which
//! creates it (an entity whose first message starts it: a cart, an account, a
//! chat session; Temporal's `SignalWithStart`).

use serde::Serialize;

use crate::ctx::encode;
use crate::primitives::approval_signal;
use crate::{Error, Host, Result, RunHandle, Workflow};

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
    /// [`Host::start`] creates it: no queue, no timeout.
    ///
    /// Retrying a call with the same `signal_id` delivers the signal once, with
    /// `signal`'s limits: the ids a run knows are those of its current log segment
    /// (after it continues as new, a signal it consumed is not recognised again),
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
        if name.starts_with(&approval_signal("")) {
            return Err(Error::ReservedName(name.to_owned()));
        }
        let input = encode(&input)?;
        let payload = encode(payload)?;
        self.core()
            .signal_with_start(W::NAME, W::VERSION, run_id, input, name, signal_id, payload)
            .await?;
        Ok(self.handle(run_id))
    }
}
