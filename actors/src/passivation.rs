//! The passivation queue: one task that tells idle run actors, once their idle
//! period has passed, to passivate. A leaf.
//!
//! Every run actor that settles (suspended, or woken for nothing) asks to be
//! passivated after the host's `passivate_after`. The period is the same for every
//! run, so requests come due in the order they were made: a FIFO queue and one
//! timer serve them all, instead of a sleeping task per suspension (100,000 waiting
//! runs would otherwise hold 100,000 tasks and timers). A request is a closure that
//! sends the actor its `Passivate` message; an actor that became busy again, or
//! stopped, ignores it.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

/// What to do when a request comes due.
type Action = Box<dyn FnOnce() + Send>;

/// The sending side of the queue; cheap to clone. The task ends when every
/// sender is gone.
#[derive(Clone)]
pub(crate) struct Passivator {
    after: Duration,
    tx: mpsc::UnboundedSender<(Instant, Action)>,
}

impl Passivator {
    /// Starts the queue's task: requests come due `after` they are made.
    pub(crate) fn start(after: Duration) -> Passivator {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(serve(rx));
        Passivator { after, tx }
    }

    /// Runs `action` once the idle period has passed.
    /// An idle period too long to represent (`Duration::MAX`: never passivate)
    /// queues nothing.
    pub(crate) fn later(&self, action: impl FnOnce() + Send + 'static) {
        if let Some(due) = Instant::now().checked_add(self.after) {
            let _ = self.tx.send((due, Box::new(action)));
        }
    }
}

async fn serve(mut rx: mpsc::UnboundedReceiver<(Instant, Action)>) {
    let mut queue: VecDeque<(Instant, Action)> = VecDeque::new();
    loop {
        let Some(&(due, _)) = queue.front() else {
            match rx.recv().await {
                Some(request) => queue.push_back(request),
                None => return,
            }
            continue;
        };
        tokio::select! {
            request = rx.recv() => match request {
                Some(request) => {
                    queue.push_back(request);
                    // Take what else has arrived before the timer is set again.
                    while let Ok(request) = rx.try_recv() {
                        queue.push_back(request);
                    }
                }
                None => return,
            },
            () = tokio::time::sleep_until(due) => {
                let now = Instant::now();
                while queue.front().is_some_and(|(due, _)| *due <= now) {
                    if let Some((_, action)) = queue.pop_front() {
                        action();
                    }
                }
            }
        }
    }
}
