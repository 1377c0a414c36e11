//! Checks on a run's recorded log shared by the operation-race tests.

use reel::Event;

/// How many events of the log `f` picks.
pub fn count(events: &[Event], f: impl Fn(&Event) -> bool) -> usize {
    events.iter().filter(|e| f(e)).count()
}

/// The log ends with `RunCancelled`, and nothing is recorded after it.
pub fn ends_cancelled(events: &[Event]) {
    let at = events
        .iter()
        .position(|e| matches!(e, Event::RunCancelled { .. }))
        .unwrap_or_else(|| panic!("no RunCancelled in {events:?}"));
    assert_eq!(
        at,
        events.len() - 1,
        "records after RunCancelled: {events:?}"
    );
}
