//! Reading `Host::count`.

use std::collections::BTreeMap;

use reel::StatusKind;

/// How many of the counted runs have not ended (neither completed, failed nor
/// cancelled).
pub fn unfinished(counts: &BTreeMap<StatusKind, u64>) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k,
                StatusKind::Completed | StatusKind::Failed | StatusKind::Cancelled
            )
        })
        .map(|(_, n)| n)
        .sum()
}
