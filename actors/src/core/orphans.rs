//! Children whose parent ended, or continued as new, while its parent-close
//! cancel did not reach them. On the embedded store a parent's cancels go to its
//! children after the write of its end (or of its new segment), not in it (hosts
//! sharing Postgres post them as mail in that write), so a host that dies in
//! between leaves them running. Recovery finds them and asks them to cancel in the
//! words the parent would have used: an unfinished run whose cancelling parent is
//! not among the unfinished runs and has ended, or is unfinished in a later
//! segment that did not start it. Only on a store no other host shares.

use super::*;
use crate::message::{closing_reason, continued_reason, is_detached};

impl Core {
    /// The unfinished runs among `unfinished` whose cancelling parent (the one
    /// that started them to wait on them) is not itself unfinished, or has
    /// continued as new since: `(child, parent)` pairs, to look at with
    /// [`Core::ask_orphans`].
    pub(super) fn orphans(unfinished: &[RunMeta]) -> Vec<(String, String)> {
        let by_id: std::collections::HashMap<&str, &RunMeta> =
            unfinished.iter().map(|m| (m.run_id.as_str(), m)).collect();
        unfinished
            .iter()
            .filter_map(|m| {
                let parent = m.parent.as_ref().filter(|p| !is_detached(&p.wait_id))?;
                by_id
                    .get(parent.run_id.as_str())
                    .is_none_or(|p| p.segment > 0)
                    .then(|| (m.run_id.clone(), parent.run_id.clone()))
            })
            .collect()
    }

    /// Asks each child of `orphans` that its parent no longer waits on (it has
    /// ended, or a later segment did not start it) to cancel, as the parent's end
    /// or continue-as-new did (a child already cancelling keeps its first request,
    /// a finished one refuses). Runs in the background of recovery; a parent that
    /// cannot be read is left alone.
    pub(super) async fn ask_orphans(&self, orphans: Vec<(String, String)>) {
        for (child, parent) in orphans {
            let reason = match self.reason_to_close(&child, &parent).await {
                Ok(Some(reason)) => reason,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(child, parent, error = %e, "reel: could not read a recovered run's parent");
                    continue;
                }
            };
            tracing::info!(child, parent, %reason, "reel: asking a child its parent left to cancel");
            let cancel = Delivery::Cancel {
                reason,
                hard: false,
                from_parent: Some(parent),
            };
            self.spawn_delivery(child, cancel);
        }
    }

    /// The reason `parent` gives `child` when it no longer waits on it: how it
    /// ended (`RunActor::finish`), or that it continued as new, in the words of
    /// its cancel request if it had one. `None` while its current segment may
    /// still wait on the child (it started it, or it is the first segment and has
    /// not ended: its end asks it), or when the parent is gone.
    async fn reason_to_close(
        &self,
        child: &str,
        parent: &str,
    ) -> Result<Option<String>, ActorError> {
        let Some(meta) = self.meta(parent).await? else {
            return Ok(None);
        };
        let ended = meta.state.is_finished();
        if !ended && meta.segment == 0 {
            return Ok(None);
        }
        let store = self.store.clone();
        let id = parent.to_owned();
        let log = blocking(move || store.read_log_from(&id, meta.segment_start)).await?;
        let started_here = log
            .iter()
            .any(|e| matches!(e, Event::ChildStarted { run_id, .. } if run_id == child));
        let requested = log.iter().rev().find_map(|e| match e {
            Event::CancelRequested { reason } => Some(reason.as_str()),
            _ => None,
        });
        Ok(if ended {
            closing_reason(&meta.state, requested)
        } else if started_here {
            None
        } else {
            // A cancel request of the old segment is carried into this one.
            Some(continued_reason(requested))
        })
    }
}
