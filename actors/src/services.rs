//! [`Services`]: what a handler may ask of its host (child runs, signals to other
//! runs), handed to the replay engine with each execution. It holds the host through
//! [`RunHost`]; `Services::core` is implemented next to the core.

use std::sync::Weak;

use reel_storage::Payload;

use crate::error::ActorError;
use crate::host::RunHost;

/// Host services handed to the replay engine.
#[derive(Clone)]
pub struct Services(pub(crate) Weak<dyn RunHost>);

impl Services {
    /// Starts the child run (idempotent on its id) and arranges for its result to be
    /// delivered to `parent`'s wait `wait_id`, also when it has already finished.
    /// A child that cannot be started for good (workflow not registered, id taken by
    /// another workflow, invalid id) is delivered as a failed child; a passing failure
    /// (I/O, an actor restarting) is retried in the background while the parent waits.
    pub async fn ensure_child(
        &self,
        parent: &str,
        wait_id: &str,
        workflow: &str,
        version: u32,
        child_run_id: &str,
        input: Payload,
    ) {
        let Some(host) = self.0.upgrade() else { return };
        host.ensure_child(parent, wait_id, workflow, version, child_run_id, input)
            .await;
    }

    /// Starts a detached child (idempotent on its id): the parent does not wait for
    /// it and is not told when it ends, only whether it could be started, which is
    /// delivered to the parent's wait `wait_id` (`detached#<n>`). A passing failure is
    /// retried in the background, as for a waited-for child.
    pub async fn start_detached(
        &self,
        parent: &str,
        wait_id: &str,
        workflow: &str,
        version: u32,
        child_run_id: &str,
        input: Payload,
    ) {
        let Some(host) = self.0.upgrade() else { return };
        host.start_detached(parent, wait_id, workflow, version, child_run_id, input)
            .await;
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
        let host = self.0.upgrade().ok_or(ActorError::Shutdown)?;
        host.signal(run_id, name, signal_id, payload).await
    }
}
