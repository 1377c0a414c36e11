//! Signal-with-start: a signal to a run that may not exist yet (an entity's first
//! message creates it). An existing run of the same workflow gets the signal as
//! [`Core::signal`] delivers it; a new run is written with the signal already in
//! its log, in its first write, so no execution of it ever runs without the
//! signal. Callers racing on a new id: one write creates the run, the others find
//! it (the compare-and-set on sequence 0) and signal it. Both halves are
//! idempotent on the signal id within a log segment.

use super::*;

impl Core {
    /// Sends `name` with `payload` (id `signal_id`) to the run `run_id` of
    /// `workflow`, first creating the run with `input` when it does not exist:
    /// with a `deadline` (ms since the epoch) if given, and on a queue if `place`
    /// says so (enqueued, the signal in its first write).
    ///
    /// # Errors
    /// [`ActorError::UnknownQueue`], [`ActorError::Deduplicated`] for a new run
    /// on a queue, [`ActorError::NotRegistered`] for an unknown workflow or version,
    /// [`ActorError::RunExists`] when another workflow has the id,
    /// [`ActorError::RunFinished`] when the run has ended,
    /// [`ActorError::UnknownRun`] when it is deleted meanwhile,
    /// [`ActorError::Shutdown`], storage errors.
    #[allow(clippy::too_many_arguments)]
    pub async fn signal_with_start(
        &self,
        workflow: &str,
        version: u32,
        run_id: &str,
        input: Payload,
        deadline: Option<u64>,
        place: Option<QueuePlace>,
        (name, signal_id, payload): (&str, &str, Payload),
    ) -> Result<Started, ActorError> {
        self.check_open()?;
        check_new_run_id(run_id)?;
        self.check_registered(workflow, version)?;
        // The common case, a message to a run that exists, reads its record once
        // and writes nothing but the signal.
        if let Some(existing) = self.meta(run_id).await? {
            Core::same_workflow(&existing, workflow)?;
            self.signal_known(&existing, name, signal_id, payload)
                .await?;
            return Ok(Started::Existing(Box::new(existing)));
        }
        let signal = Event::SignalReceived {
            name: name.to_owned(),
            signal_id: signal_id.to_owned(),
            payload: payload.clone(),
        };
        let created = match place {
            Some(place) => {
                let enqueue = self.enqueue(
                    workflow,
                    version,
                    run_id,
                    input,
                    deadline,
                    place,
                    vec![signal],
                );
                Box::pin(enqueue).await?
            }
            None => {
                let (meta, mut events) =
                    self.new_run(workflow, version, run_id, input, None, deadline);
                events.push(signal);
                Box::pin(self.create(meta, events)).await?
            }
        };
        if let Started::Existing(_) = created {
            self.signal(run_id, name, signal_id, payload).await?;
        }
        Ok(created)
    }
}
