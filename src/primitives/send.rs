//! Signals to other runs: `ctx.signal`.
//!
//! A send is a step of the sending run (`signal <name> -> <run id>`): it is sent
//! once replay has caught up, its outcome is recorded, and replay returns the
//! recorded outcome instead of sending again. A send retried after a crash carries
//! the same signal id, which the receiving run deduplicates, so it is delivered
//! once.

use std::future::Future;

use futures::future::Either;
use reel_actors::ActorError;
use serde::{Deserialize, Serialize};

use crate::ctx::encode;
use crate::primitives::check_signal_name;
use crate::{Ctx, Error, Result};

/// Why the receiving run refused a signal, as recorded in the sender's log.
#[derive(Debug, Serialize, Deserialize)]
enum Refused {
    UnknownRun,
    RunFinished,
    Invalid(String),
}

impl Ctx {
    /// Sends a signal to the run `run_id` (another run, or this one), durably: the
    /// send is recorded in this run's log and never repeated on replay, and the
    /// receiver drops a second delivery with the same `signal_id`, so a send retried
    /// after a crash arrives once.
    ///
    /// # Examples
    /// ```
    /// use reel::{Ctx, Workflow};
    ///
    /// struct Notify;
    /// impl Workflow for Notify {
    ///     const NAME: &'static str = "notify";
    ///     type Input = String;
    ///     type Output = ();
    ///     async fn run(&self, ctx: Ctx, order: String) -> reel::Result<()> {
    ///         let id = format!("shipped-{}", ctx.run_id());
    ///         ctx.signal(&order, "shipped", &true, &id).await
    ///     }
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::UnknownRun`] or [`Error::RunFinished`] when the receiver does not
    /// exist or has ended (recorded: replay answers the same),
    /// [`Error::ReservedName`] for a name starting with `approval:`,
    /// [`Error::Codec`] for a payload that does not serialize (nothing is recorded),
    /// [`Error::Cancelled`] once this run is asked to cancel (send through
    /// [`Ctx::shielded`] to signal during cleanup), [`Error::Step`] when the send
    /// keeps failing for a passing reason, [`Error::ReplayDivergence`].
    pub fn signal<T: Serialize + ?Sized>(
        &self,
        run_id: &str,
        name: &str,
        payload: &T,
        signal_id: &str,
    ) -> impl Future<Output = Result<()>> + Send + use<T> {
        if let Err(e) = check_signal_name(name) {
            return Either::Left(std::future::ready(Err(e)));
        }
        let payload = match encode(payload) {
            Ok(p) => p,
            Err(e) => return Either::Left(std::future::ready(Err(e))),
        };
        let services = self.inner.services.clone();
        let (target, signal, signal_id) =
            (run_id.to_owned(), name.to_owned(), signal_id.to_owned());
        let step = self.step(&format!("signal {name} -> {run_id}"), move |_| {
            let services = services.clone();
            let (target, signal, signal_id, payload) = (
                target.clone(),
                signal.clone(),
                signal_id.clone(),
                payload.clone(),
            );
            async move {
                let Some(services) = services else {
                    return Err("no host to send through".to_owned());
                };
                match services.signal(&target, &signal, &signal_id, payload).await {
                    Ok(()) => Ok(Ok(())),
                    Err(ActorError::UnknownRun(_)) => Ok(Err(Refused::UnknownRun)),
                    Err(ActorError::RunFinished(_)) => Ok(Err(Refused::RunFinished)),
                    Err(ActorError::Storage(e)) if !e.is_retryable() => {
                        Ok(Err(Refused::Invalid(e.to_string())))
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
        });
        let run_id = run_id.to_owned();
        Either::Right(async move {
            match step.await? {
                Ok(()) => Ok(()),
                Err(Refused::UnknownRun) => Err(Error::UnknownRun(run_id)),
                Err(Refused::RunFinished) => Err(Error::RunFinished(run_id)),
                Err(Refused::Invalid(m)) => Err(Error::Failed(m)),
            }
        })
    }
}
