//! The core as the [`RunHost`] of its parts: each method hands the call to the core's
//! own method of the same name. And [`Services::core`], which needs the core's type.

use std::any::Any;

use futures::future::BoxFuture;

use super::*;
use crate::host::RunHost;
use crate::message::{ChildCall, is_detached};
use crate::services::Services;

impl Services {
    /// The host core, while it is open.
    pub fn core(&self) -> Option<Arc<Core>> {
        let host = self.0.upgrade()?.into_any();
        host.downcast::<Core>().ok().filter(|c| !c.is_closing())
    }
}

impl RunHost for Core {
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn schedule_timers(&self, timers: Vec<TimerEntry>) {
        Core::schedule_timers(self, timers);
    }

    fn unschedule_timers(&self, timers: Vec<TimerEntry>) {
        Core::unschedule_timers(self, timers);
    }

    fn notify_published(&self, run_id: &str) {
        Core::notify_published(self, run_id);
    }

    fn busy(&self) -> reel_storage::Busy {
        self.activity.enter()
    }

    fn lease_holds(&self, run_id: &str) -> bool {
        Core::lease_holds(self, run_id)
    }

    fn fire_timer(&self, timer: TimerEntry) {
        Core::fire_timer(self, timer);
    }

    fn run_actor_stopped(&self, id: ActorId, reason: ActorStopReason) {
        Core::run_actor_stopped(self, id, reason);
    }

    fn spawn_delivery(&self, run_id: String, delivery: Delivery) {
        let _ = Core::spawn_delivery(self, run_id, delivery);
    }

    fn notify_changed(&self, run_id: &str, meta: Option<&RunMeta>) {
        Core::notify_changed(self, run_id, meta);
    }

    fn run_finished(&self, meta: &RunMeta, output: Option<&Payload>) {
        Core::run_finished(self, meta, output);
    }

    fn record_unwritten_park(&self, run_id: &str, error: Failure) {
        Core::record_unwritten_park(self, run_id, error);
    }

    fn record_crash(&self, run_id: &Arc<str>, message: String) {
        Core::record_crash(self, run_id, message);
    }

    fn record_store_failure(&self, run_id: &Arc<str>, message: String) {
        Core::record_crash(self, run_id, message);
        self.store_crashes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.clone());
    }

    fn park_unreadable_log<'a>(
        &'a self,
        run_id: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<(), ActorError>> {
        Box::pin(Core::park_unreadable_log(self, run_id, reason))
    }

    fn retire<'a>(&'a self, run_id: &'a str, actor: ActorId) -> BoxFuture<'a, ()> {
        Box::pin(Core::retire(self, run_id, actor))
    }

    fn owned_elsewhere(&self, run_id: &str) -> bool {
        Core::owned_elsewhere(self, run_id)
    }

    fn hand_over(&self, run_id: &str) {
        Core::hand_over(self, run_id);
    }

    fn inbox_signals<'a>(
        &'a self,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<(i64, String)>, ActorError>> {
        Box::pin(Core::inbox_signals(self, run_id))
    }

    fn ack_letters<'a>(
        &'a self,
        run_id: &'a str,
        ids: Vec<i64>,
    ) -> BoxFuture<'a, Result<(), ActorError>> {
        Box::pin(Core::ack_letters(self, run_id, ids))
    }

    fn letter_gone(&self, id: i64) -> bool {
        Core::letter_gone(self, id)
    }

    fn start_child(&self, call: ChildCall) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if is_detached(&call.link.wait_id) {
                Core::start_detached(self, call).await;
            } else {
                Core::ensure_child(self, call).await;
            }
        })
    }

    fn signal<'a>(
        &'a self,
        run_id: &'a str,
        name: &'a str,
        signal_id: &'a str,
        payload: Payload,
    ) -> BoxFuture<'a, Result<(), ActorError>> {
        Box::pin(Core::signal(self, run_id, name, signal_id, payload))
    }
}
