//! What a run's end or cancel request owes other runs, as mail posted in the
//! run's own write when hosts share the store ([`reel_storage::Append::letters`]):
//! its parent's child result, its children's cancels. The direct deliveries that
//! follow the write are the fast path; these letters make sure a host that dies
//! right after the write loses none of it (a letter applied after its delivery
//! changes nothing: a parent takes a child's end once, a cancel request once).

use reel_storage::{Mail, Payload, RunState};

use super::RunActor;
use crate::message::{Mailable, child_result, is_detached};

impl RunActor {
    /// Whether hosts share the store: only then are letters posted.
    fn shares_store(&self) -> bool {
        self.store.cluster().is_some()
    }

    /// Letters asking `children` to cancel, from this run as their parent.
    pub(super) fn cancel_letters(
        &self,
        children: &[String],
        reason: &str,
        hard: bool,
    ) -> Vec<(String, Mail)> {
        if !self.shares_store() {
            return Vec::new();
        }
        let Some(mail) = self.children_cancel(reason, hard).mail() else {
            return Vec::new();
        };
        children
            .iter()
            .map(|child| (child.clone(), mail.clone()))
            .collect()
    }

    /// The letter telling this run's parent (not a detached child's) that it
    /// ended in `state`, with `output` when it completed.
    pub(super) fn end_letter(
        &self,
        state: &RunState,
        output: Option<&Payload>,
    ) -> Option<(String, Mail)> {
        if !self.shares_store() {
            return None;
        }
        let parent = self.meta.parent.as_ref()?;
        if is_detached(&parent.wait_id) {
            return None;
        }
        let result = child_result(state, output)?;
        let mail = Mail::ChildDone {
            wait_id: parent.wait_id.clone(),
            child: self.run_id.to_string(),
            result,
        };
        Some((parent.run_id.clone(), mail))
    }
}
