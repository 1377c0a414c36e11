//! Supervision of run actors, on kameo's supervision (restart policy, restart limit).
//!
//! A run actor that panics is restarted by its supervisor with fresh arguments, so it
//! reloads its run from disk and replays. When it keeps crashing past the restart
//! limit, kameo stops restarting it and tells the supervisor, which parks the run with
//! the crash message (visible in `status()`), instead of looping forever.
//!
//! kameo 0.22 keeps a child's spec in its supervisor until the supervisor stops, so a
//! long-lived supervisor would grow with every activation. Supervisors are therefore
//! rotated: each takes a fixed number of children, is then retired, and stops itself
//! once the last of its children has stopped.

use std::ops::ControlFlow;
use std::sync::Weak;

use kameo::actor::{Actor, ActorId, ActorRef, WeakActorRef};
use kameo::error::{ActorStopReason, Infallible};
use kameo::message::{Context, Message};
use kameo::supervision::SupervisionStrategy;

use crate::host::RunHost;

/// Children a supervisor takes before it is retired.
pub(crate) const CHILDREN_PER_SUPERVISOR: usize = 1024;

pub(crate) struct RunSupervisor {
    host: Weak<dyn RunHost>,
    stopped_children: usize,
    retired_after: Option<usize>,
}

/// Retires a supervisor that has been given `children` children in total.
pub(crate) struct Retire(pub(crate) usize);

impl Actor for RunSupervisor {
    type Args = Weak<dyn RunHost>;
    type Error = Infallible;

    fn supervision_strategy() -> SupervisionStrategy {
        SupervisionStrategy::OneForOne
    }

    async fn on_start(host: Weak<dyn RunHost>, _: ActorRef<Self>) -> Result<Self, Infallible> {
        Ok(RunSupervisor {
            host,
            stopped_children: 0,
            retired_after: None,
        })
    }

    async fn on_link_died(
        &mut self,
        _: WeakActorRef<Self>,
        id: ActorId,
        reason: ActorStopReason,
    ) -> Result<ControlFlow<ActorStopReason>, Infallible> {
        // Reached only when kameo does not restart the child: a normal stop, or a
        // crash past the restart limit.
        self.stopped_children += 1;
        if let Some(host) = self.host.upgrade() {
            host.run_actor_stopped(id, reason);
        }
        Ok(self.flow())
    }
}

impl RunSupervisor {
    fn flow(&self) -> ControlFlow<ActorStopReason> {
        match self.retired_after {
            Some(n) if self.stopped_children >= n => ControlFlow::Break(ActorStopReason::Normal),
            _ => ControlFlow::Continue(()),
        }
    }
}

impl Message<Retire> for RunSupervisor {
    type Reply = ();

    async fn handle(&mut self, msg: Retire, ctx: &mut Context<Self, ()>) {
        self.retired_after = Some(msg.0);
        if self.flow().is_break() {
            ctx.stop();
        }
    }
}
