//! Patches: `ctx.patched` and `ctx.deprecate_patch`, for changing the code of a
//! workflow while runs started with the old code are still in flight (Temporal's
//! `patched`).
//!
//! A patch is decided by position, like every opening: `ctx.patched(id)` answers
//! true when the log has the marker `Patched { id }` at the call's position (a run
//! that took the new branch before), false when the log has another opening there
//! (a run recorded by the code from before the patch: nothing is consumed), and
//! true past the recorded openings, recording the marker (the run reaches this
//! point for the first time, with the new code). The answer depends only on the
//! recorded openings and the call order, so it is the same live, on every replay,
//! under concurrency and in replay-only mode. The marker has no result: nothing is
//! waited for.
//!
//! Once no run recorded before the patch is left, `ctx.deprecate_patch(id)` replaces
//! the call: it consumes the marker where there is one and records nothing. Once no
//! run with the marker is left either, the call can go; even before, the other
//! primitives look past a marker no call consumes.

use reel_storage::Event;

use crate::replay::Patch;
use crate::{Ctx, Error};

impl Ctx {
    /// Whether this run takes the new branch of patch `id`: true for a run that
    /// reaches this point for the first time (it records `Event::Patched { id }`,
    /// durably) and for a run that took it before, false for a run whose log was
    /// written here by the code from before the patch.
    ///
    /// ```no_run
    /// # async fn f(ctx: reel::Ctx) -> reel::Result<()> {
    /// ctx.step("charge", |_| async { Ok::<_, String>(()) }).await?;
    /// if ctx.patched("receipt-email") {
    ///     ctx.step("email", |_| async { Ok::<_, String>(()) }).await?;
    /// }
    /// let _shipped: bool = ctx.wait_for_signal("shipped").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Calling it again with the same id in one execution returns the first answer
    /// and records nothing more. Patch ids are compared exactly; use one id per
    /// change. An empty id is a programming error: the run is parked with
    /// [`Error::Failed`] naming it (fixed code resumes it) and the call returns false.
    /// Keep the branch until every run recorded before the patch has finished, then
    /// replace the call with [`Ctx::deprecate_patch`].
    pub fn patched(&self, id: &str) -> bool {
        if id.is_empty() {
            self.park_empty_patch_id("ctx.patched");
            return false;
        }
        let found = self.lock().replay.patch(id, false);
        match found {
            Ok(Patch::Answered(answer)) => answer,
            Ok(Patch::Marked) => true,
            Ok(Patch::Unpatched) => false,
            Ok(Patch::New) => {
                if self.live() {
                    self.record(Event::Patched { id: id.to_owned() }, true);
                } else {
                    // Replay-only: the history ends here; live, the marker would be
                    // recorded now.
                    self.lock()
                        .frontier
                        .get_or_insert_with(|| format!("patch `{id}`"));
                }
                true
            }
            // The run is parked already; the answer is never acted on.
            Err(_) => false,
        }
    }

    /// The cleanup phase of patch `id`, once every run recorded before the patch has
    /// finished: the old branch is gone and the call to [`Ctx::patched`] is replaced by
    /// this one. It consumes the marker `Patched { id }` where a run's log has it at
    /// this position and records nothing, so runs that took the new branch replay
    /// and new runs write no marker. Once those runs have finished too, delete the
    /// call; even before that, the other primitives look past a marker no call
    /// consumes.
    ///
    /// An empty id parks the run, as for [`Ctx::patched`].
    pub fn deprecate_patch(&self, id: &str) {
        if id.is_empty() {
            self.park_empty_patch_id("ctx.deprecate_patch");
            return;
        }
        let _ = self.lock().replay.patch(id, true);
    }

    fn park_empty_patch_id(&self, call: &str) {
        let e = Error::Failed(format!(
            "{call} was called with an empty patch id; give each patch a non-empty id"
        ));
        self.lock().parked.get_or_insert(e);
    }
}
