//! [`Services`]: what a handler may ask of its host (child runs, signals to other
//! runs), handed to the replay engine with each execution. It holds the host through
//! [`RunHost`]; `Services::core` is implemented next to the core.

use std::sync::Weak;

use reel_storage::Payload;

use crate::error::ActorError;
use crate::host::RunHost;
use crate::journal::Journal;
use crate::message::ChildCall;

/// Host services handed to the replay engine. A new run's first execution gets
/// them gated on its dry journal: nothing reaches the host before the run's
/// first write has landed ([`Journal::dry`]).
#[derive(Clone)]
pub struct Services(pub(crate) Weak<dyn RunHost>, pub(crate) Option<Journal>);

impl Services {
    /// Waits for the gate, if any; false if the run was never written.
    async fn open(&self) -> bool {
        match &self.1 {
            Some(journal) => journal.until_live().await,
            None => true,
        }
    }
}

impl Services {
    /// Starts a child run (idempotent on its id). A waited-for child's result is
    /// delivered to the parent's wait, also when the child has already finished; a
    /// detached child's parent learns only whether it could be started. A child
    /// that cannot be started for good (workflow not registered, id taken by another
    /// workflow, invalid id, a cycle of waiting runs) is delivered as a failure; a
    /// passing failure (I/O, an actor restarting) is retried in the background.
    pub async fn start_child(&self, call: ChildCall) {
        if !self.open().await {
            return;
        }
        let Some(host) = self.0.upgrade() else { return };
        host.start_child(call).await;
    }

    /// Delivers a signal to another run, as [`Core::signal`](crate::Core::signal)
    /// does.
    ///
    /// # Errors
    /// As [`Core::signal`](crate::Core::signal); [`ActorError::Shutdown`] once the
    /// host has closed.
    pub async fn signal(
        &self,
        run_id: &str,
        name: &str,
        signal_id: &str,
        payload: Payload,
    ) -> Result<(), ActorError> {
        if !self.open().await {
            return Err(ActorError::Shutdown);
        }
        let host = self.0.upgrade().ok_or(ActorError::Shutdown)?;
        host.signal(run_id, name, signal_id, payload).await
    }
}
