//! Long-lived runs: `ctx.continue_as_new` ends the run's current log segment and
//! starts the same run afresh with a new input.
//!
//! A run that loops for ever (an entity: a cart, an account, an agent session)
//! replays its whole log on every wake-up, so each wake-up costs more than the last.
//! Continuing as new bounds that: the handler asks for it, and once it is quiescent
//! the driver ends the execution with [`Outcome::ContinuedAsNew`]. The run actor
//! then appends, in one atomic batch, `ContinuedAsNew` (ending the old segment), a
//! `RunStarted` with the new input (beginning the new one) and a copy of every
//! signal the old segment received but did not consume, and replays the new
//! segment alone from then on. The old segment stays in the log, readable.
//!
//! The call is never recorded itself: a crash before the batch lands replays the
//! old segment, which reaches the same call again.
//!
//! [`Outcome::ContinuedAsNew`]: reel_actors::Outcome::ContinuedAsNew

use std::future::Future;

use crate::ctx::{ContinueRequest, encode};
use crate::{Ctx, Error, Result, Workflow};
use futures::future::Either;

impl Ctx {
    /// Ends this run's current log segment and starts the run afresh, from the top
    /// of the handler of `W` (this run's workflow, any registered version of it),
    /// with `input`. Signals the run received and did not consume carry over to the
    /// new segment, as does a cancel request. The old segment stays readable in the
    /// log ([`AnyRun::events`](crate::AnyRun::events)); the run id, its
    /// handles and [`RunHandle::result`](crate::RunHandle::result) (which waits for
    /// the last segment) are unchanged. Use it in a run that loops for ever, every
    /// few thousand events, so that a wake-up's replay stays short.
    ///
    /// It never returns `Ok`: once the handler has done all it can with what it has
    /// seen, the execution ends and the new segment begins. Other branches of the
    /// handler are dropped, as when it returns; child runs it called still start.
    ///
    /// ```no_run
    /// # use reel::{Ctx, Result, Workflow};
    /// # struct Counter;
    /// # impl Workflow for Counter {
    /// #     const NAME: &'static str = "counter";
    /// #     type Input = u64;
    /// #     type Output = u64;
    /// async fn run(&self, ctx: Ctx, total: u64) -> Result<u64> {
    ///     let mut total = total;
    ///     for _ in 0..1_000 {
    ///         let add: u64 = ctx.wait_for_signal("add").await?;
    ///         total += add;
    ///     }
    ///     ctx.continue_as_new::<Counter>(total).await
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::WorkflowMismatch`] when `W` is another workflow than this run's,
    /// [`Error::Codec`] when the input does not serialize, [`Error::Cancelled`] once
    /// the run is asked to cancel. A version of `W` that is not registered parks
    /// the run (its log unchanged) until a host registers it.
    pub fn continue_as_new<W: Workflow>(
        &self,
        input: W::Input,
    ) -> impl Future<Output = Result<W::Output>> + Send + use<W> {
        if let Some(e) = self.refused() {
            return Either::Left(std::future::ready(Err(e)));
        }
        if W::NAME != self.inner.workflow {
            return Either::Left(std::future::ready(Err(Error::WorkflowMismatch {
                run_id: self.run_id().to_owned(),
                expected: W::NAME.to_owned(),
                found: self.inner.workflow.to_owned(),
            })));
        }
        let input = match encode(&input) {
            Ok(input) => input,
            Err(e) => return Either::Left(std::future::ready(Err(e))),
        };
        let ctx = self.clone();
        Either::Right(async move {
            {
                let mut st = ctx.lock();
                if st.continued.is_none() {
                    st.continued = Some(ContinueRequest {
                        version: W::VERSION,
                        input,
                    });
                }
            }
            // The driver ends the execution after this poll.
            std::future::pending().await
        })
    }
}
