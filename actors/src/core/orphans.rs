//! Children whose parent ended while its parent-close cancel did not reach them.
//! On the embedded store a parent's cancels go to its children after the write of
//! its end, not in it (hosts sharing Postgres post them as mail in that write), so
//! a host that dies in between leaves them running. Recovery finds them: an
//! unfinished run whose cancelling parent is not among the unfinished runs, and
//! has ended, is asked to cancel in the words the parent would have used. Only on
//! a store no other host shares.

use super::*;
use crate::message::{closing_reason, is_detached};

impl Core {
    /// The unfinished runs among `unfinished` whose cancelling parent (the one
    /// that started them to wait on them) is not itself unfinished: `(child,
    /// parent)` pairs, to look at with [`Core::ask_orphans`].
    pub(super) fn orphans(unfinished: &[RunMeta]) -> Vec<(String, String)> {
        let ids: std::collections::HashSet<&str> =
            unfinished.iter().map(|m| m.run_id.as_str()).collect();
        unfinished
            .iter()
            .filter_map(|m| {
                let parent = m.parent.as_ref().filter(|p| !is_detached(&p.wait_id))?;
                (!ids.contains(parent.run_id.as_str()))
                    .then(|| (m.run_id.clone(), parent.run_id.clone()))
            })
            .collect()
    }

    /// Asks each child of `orphans` whose parent has ended to cancel, as the
    /// parent's end did (a child already cancelling keeps its first request, a
    /// finished one refuses). Runs in the background of recovery; a parent that
    /// cannot be read is left alone.
    pub(super) async fn ask_orphans(&self, orphans: Vec<(String, String)>) {
        for (child, parent) in orphans {
            let reason = match self.reason_of_ended(&parent).await {
                Ok(Some(reason)) => reason,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(child, parent, error = %e, "reel: could not read a recovered run's parent");
                    continue;
                }
            };
            tracing::info!(child, parent, %reason, "reel: asking a child of an ended parent to cancel");
            let cancel = Delivery::Cancel {
                reason,
                hard: false,
                from_parent: Some(parent),
            };
            self.spawn_delivery(child, cancel);
        }
    }

    /// The reason an ended run `parent` gives its children (`RunActor::finish`),
    /// `None` while it has not ended (its end asks them), or when it is gone.
    async fn reason_of_ended(&self, parent: &str) -> Result<Option<String>, ActorError> {
        let Some(meta) = self.meta(parent).await? else {
            return Ok(None);
        };
        if !meta.state.is_finished() {
            return Ok(None);
        }
        let store = self.store.clone();
        let id = parent.to_owned();
        let log = blocking(move || store.read_log_from(&id, meta.segment_start)).await?;
        let requested = log.iter().rev().find_map(|e| match e {
            Event::CancelRequested { reason } => Some(reason.as_str()),
            _ => None,
        });
        Ok(closing_reason(&meta.state, requested))
    }
}
