//! Replaying canned histories (`reel::testing`) step by step.

use reel::testing::{Replayed, replay};
use reel::{Event, Workflow};

/// Replays every prefix of `log` (none may diverge, only the whole log may
/// complete), then the whole log; returns the whole log's outcome.
pub async fn replay_incrementally<W: Workflow + Clone>(w: &W, log: &[Event]) -> Replayed<W::Output>
where
    W::Output: std::fmt::Debug,
{
    for k in 1..log.len() {
        match replay(w.clone(), &log[..k]).await {
            Ok(Replayed::Pending(_)) | Ok(Replayed::Completed(_)) => {}
            other => panic!("prefix of {k} events: {other:?}"),
        }
    }
    replay(w.clone(), log).await.expect("full replay")
}
