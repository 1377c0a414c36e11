//! Signal waits: `ctx.wait_for_signal`, its timed form, and `ctx.approval`.
//!
//! `SignalAwaited` is recorded when the wait is called. Signals are recorded when
//! they arrive (`SignalReceived`) and routed by name when the driver walks them: to
//! the oldest wait on that name still pending, else into a buffer the next wait
//! takes from (see [`crate::slots`]). A timed wait's deadline is a timer with the
//! wait's id: whichever of the signal and the deadline the log shows first decides
//! the wait, once; the other is then ignored (the deadline timer is cancelled).

use std::future::Future;
use std::time::Duration;

use reel_storage::Event;
use serde::de::DeserializeOwned;

use crate::ctx::{decode, millis};
use crate::replay::{Kind, Opened};
use crate::slots::{Key, Resolution, WaitInfo};
use crate::{Approval, Ctx, Error, Result};
use futures::future::Either;

/// How a signal wait reads in `RunStatus::Suspended { waiting_on }`.
fn describe_wait(prefix: &str, name: &str) -> String {
    match name.strip_prefix("approval:") {
        Some(approval) if prefix == "approval" => format!("approval `{approval}`"),
        _ => format!("signal `{name}`"),
    }
}

/// What the signal names approvals travel under begin with.
const APPROVAL_PREFIX: &str = "approval:";

/// The signal name an approval travels under.
pub(crate) fn approval_signal(name: &str) -> String {
    format!("{APPROVAL_PREFIX}{name}")
}

/// Refuses a signal name reserved for approvals (sent only as approvals).
///
/// # Errors
/// [`Error::ReservedName`].
pub(crate) fn check_signal_name(name: &str) -> Result<()> {
    if name.starts_with(APPROVAL_PREFIX) {
        return Err(Error::ReservedName(name.to_owned()));
    }
    Ok(())
}

impl Ctx {
    /// Waits for the next signal of this name. Signals are buffered in the log: one
    /// sent before the wait is kept, and the k-th wait on a name receives the k-th
    /// signal of that name (waits that were dropped or timed out take none).
    ///
    /// # Errors
    /// [`Error::Codec`] when the payload does not decode into `T` (the signal is
    /// consumed), [`Error::Cancelled`] when the run is asked to cancel (see
    /// [`Ctx::cancelled`]), [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn wait_for_signal<T: DeserializeOwned + Send + 'static>(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<T>> + Send + use<T> {
        let wait = self.signal_wait::<T>("signal", name.to_owned(), None);
        async move {
            wait.await?
                .ok_or_else(|| Error::Failed("signal wait without deadline timed out".into()))
        }
    }

    /// [`Ctx::wait_for_signal`] with a durable deadline: `Ok(None)` when it passes
    /// first. A timed-out wait consumes no signal. Which came first is decided by
    /// the order in the log, so replay always agrees.
    ///
    /// # Errors
    /// As [`Ctx::wait_for_signal`].
    pub fn wait_for_signal_timeout<T: DeserializeOwned + Send + 'static>(
        &self,
        name: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<T>>> + Send + use<T> {
        self.signal_wait::<T>("signal", name.to_owned(), Some(timeout))
    }

    /// Waits for a named human decision, sent with
    /// [`AnyRun::approve`](crate::AnyRun::approve).
    ///
    /// # Errors
    /// As [`Ctx::wait_for_signal`].
    pub fn approval(&self, name: &str) -> impl Future<Output = Result<Approval>> + Send + use<> {
        let wait = self.signal_wait::<Approval>("approval", approval_signal(name), None);
        async move {
            wait.await?
                .ok_or_else(|| Error::Failed("approval wait timed out".into()))
        }
    }

    fn signal_wait<T: DeserializeOwned + Send + 'static>(
        &self,
        prefix: &'static str,
        name: String,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Option<T>>> + Send + use<T> {
        if let Some(e) = self.refused() {
            return Either::Left(std::future::ready(Err(e)));
        }
        let now = self.now_ms();
        let (id, opened, deadline) = {
            let mut st = self.lock();
            let id = st.replay.positional(prefix);
            let opened = st.replay.open(&id, Kind::Signal { name: name.clone() });
            let deadline = match opened {
                Ok(Opened::Replayed) => st.replay.due(&id),
                _ => timeout.map(|t| now.saturating_add(millis(t))),
            };
            if opened.is_ok() {
                let until = deadline
                    .map(|d| format!(" (deadline {d} ms)"))
                    .unwrap_or_default();
                let info = WaitInfo {
                    what: format!("{}{until}", describe_wait(prefix, &name)),
                    child: false,
                };
                st.slots.register_wait(&id, &name, info);
                if let (Ok(Opened::New), Some(d)) = (&opened, deadline) {
                    st.replay.note_due(&id, d);
                }
            }
            (id, opened, deadline)
        };
        if opened == Ok(Opened::New) {
            // Only a timed wait is fsynced: its deadline is a timer. An untimed wait
            // decides nothing by itself; it only places the wait in the log. It
            // travels with the run's next append (the actor's write of the run's
            // suspension, when the run then only waits), and the signal that ends
            // it is appended durably after it, which makes it durable too. Lost in
            // a crash before that, it is recorded again when the handler reaches
            // the wait on replay.
            self.record(
                Event::SignalAwaited {
                    id: id.clone(),
                    name: name.clone(),
                    deadline,
                },
                deadline.is_some(),
            );
        }
        let wait = self.slot(Key::Wait(id.clone()), deadline.map(|d| (id.clone(), d)));
        let ctx = self.clone();
        Either::Right(async move {
            let opened = opened?;
            if opened == Opened::New && !ctx.live() {
                return ctx.frontier(describe_wait(prefix, &name)).await;
            }
            match wait.await {
                Resolution::Signal(p) => decode(&p).map(Some),
                Resolution::TimedOut => Ok(None),
                Resolution::Cancelled(reason) => Err(Error::Cancelled(reason)),
                other => Err(Error::Codec(format!(
                    "signal wait `{id}` received {other:?}"
                ))),
            }
        })
    }
}
