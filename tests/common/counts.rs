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

/// What `Host::count` answers for runs of these statuses: how many have each
/// kind, every kind listed (0 where no run has it).
pub fn tally(kinds: impl IntoIterator<Item = StatusKind>) -> BTreeMap<StatusKind, u64> {
    let mut tally: BTreeMap<StatusKind, u64> = StatusKind::ALL.iter().map(|k| (*k, 0)).collect();
    for kind in kinds {
        *tally.entry(kind).or_default() += 1;
    }
    tally
}
