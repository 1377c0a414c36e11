//! The listing indexes and status counts of the fjall store, in the `listing`
//! keyspace, written in the same batch as the metadata they follow.
//!
//! Keys (a tag byte, then big-endian creation ms, then the run id last, so a key
//! range is a creation-time range and the order is the listing order):
//! - `c` created ms, run id: every run.
//! - `s` status byte, created ms, run id: every run, by its current status.
//! - `p` parent run id, NUL, created ms, run id: children, by parent.
//! - `n` status byte → run count (u64 big-endian): the counts `count` returns,
//!   maintained by the writer, never scanned.
//!
//! A store written before the indexes existed gets them built once on open (the
//! `listing` marker in the `reel` keyspace says it is done).

use std::collections::BTreeMap;
use std::ops::Bound;

use fjall::{Keyspace, OwnedWriteBatch, PersistMode, Readable, Snapshot};
use foldhash::{HashMap, HashMapExt};

use super::Keyspaces;
use crate::listing::{ListCursor, MetaPage, RunQuery, SCAN_BUDGET};
use crate::store::Result;
use crate::{RunMeta, StatusKind, StorageError};

const CREATED: u8 = b'c';
const STATUS: u8 = b's';
const PARENT: u8 = b'p';
const COUNT: u8 = b'n';
/// The key in the `reel` keyspace that says the indexes are complete.
pub(super) const MARKER: &str = "listing";

/// What the indexes need of a metadata record.
#[derive(Clone, Debug)]
pub(super) struct Listed {
    pub(super) kind: StatusKind,
    pub(super) created_ms: u64,
    pub(super) parent: Option<String>,
}

impl Listed {
    pub(super) fn of(meta: &RunMeta) -> Listed {
        Listed {
            kind: meta.state.kind(),
            created_ms: meta.created_at,
            parent: meta.parent.as_ref().map(|p| p.run_id.clone()),
        }
    }
}

fn kind_byte(kind: StatusKind) -> u8 {
    StatusKind::ALL
        .iter()
        .position(|k| *k == kind)
        .map_or(u8::MAX, |i| i as u8)
}

fn tail(key: &mut Vec<u8>, created_ms: u64, run_id: &str) {
    key.extend_from_slice(&created_ms.to_be_bytes());
    key.extend_from_slice(run_id.as_bytes());
}

fn created_prefix() -> Vec<u8> {
    vec![CREATED]
}

fn status_prefix(kind: StatusKind) -> Vec<u8> {
    vec![STATUS, kind_byte(kind)]
}

fn parent_prefix(parent: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(parent.len() + 2);
    k.push(PARENT);
    k.extend_from_slice(parent.as_bytes());
    k.push(0);
    k
}

fn key(mut prefix: Vec<u8>, created_ms: u64, run_id: &str) -> Vec<u8> {
    tail(&mut prefix, created_ms, run_id);
    prefix
}

fn count_key(kind: StatusKind) -> [u8; 2] {
    [COUNT, kind_byte(kind)]
}

/// Keeps the indexes of the runs a batch writes, and the counts, in step.
#[derive(Default)]
pub(super) struct ListingWriter {
    counts: [u64; StatusKind::ALL.len()],
    /// What this batch already wrote per run (`None`: deleted): the on-disk record
    /// is stale for them.
    written: HashMap<String, Option<Listed>>,
    /// What committed batches wrote for recently written runs, so that a run's
    /// next state change (a new run suspending, a run finishing) reads neither
    /// its record nor decodes it. Bounded: emptied past `KNOWN_LIMIT`.
    known: HashMap<String, Option<Listed>>,
    before: [u64; StatusKind::ALL.len()],
    /// Counts found damaged on open and counted again: written with the next
    /// batch that commits.
    repaired: [bool; StatusKind::ALL.len()],
}

/// Runs whose committed index entries the writer remembers.
const KNOWN_LIMIT: usize = 16_384;

impl ListingWriter {
    /// Reads the counts left by the last commit.
    /// A damaged count is counted again and written back with the next batch.
    pub(super) fn open(ks: &Keyspaces) -> Result<ListingWriter> {
        let snapshot = ks.db.snapshot();
        let mut counts = [0; StatusKind::ALL.len()];
        let mut repaired = [false; StatusKind::ALL.len()];
        for (i, kind) in StatusKind::ALL.iter().enumerate() {
            let (count, sound) = stored_count(&snapshot, &ks.listing, *kind)?;
            counts[i] = count;
            repaired[i] = !sound;
        }
        Ok(ListingWriter {
            counts,
            written: HashMap::new(),
            known: HashMap::new(),
            before: counts,
            repaired,
        })
    }

    /// Adds to `batch` the index changes for `run_id`'s new metadata.
    pub(super) fn update(
        &mut self,
        ks: &Keyspaces,
        batch: &mut OwnedWriteBatch,
        run_id: &str,
        new: Listed,
    ) -> Result<()> {
        let old = self.current(ks, run_id)?;
        match &old {
            None => {
                batch.insert(
                    &ks.listing,
                    key(created_prefix(), new.created_ms, run_id),
                    [],
                );
                if let Some(parent) = &new.parent {
                    batch.insert(
                        &ks.listing,
                        key(parent_prefix(parent), new.created_ms, run_id),
                        [],
                    );
                }
                batch.insert(
                    &ks.listing,
                    key(status_prefix(new.kind), new.created_ms, run_id),
                    [],
                );
                self.bump(new.kind, 1);
            }
            Some(old) if old.kind != new.kind => {
                batch.remove(
                    &ks.listing,
                    key(status_prefix(old.kind), old.created_ms, run_id),
                );
                batch.insert(
                    &ks.listing,
                    key(status_prefix(new.kind), new.created_ms, run_id),
                    [],
                );
                self.bump(old.kind, -1);
                self.bump(new.kind, 1);
            }
            Some(_) => {}
        }
        self.written.insert(run_id.to_owned(), Some(new));
        Ok(())
    }

    /// What the indexes hold for `run_id` now, this batch included.
    fn current(&self, ks: &Keyspaces, run_id: &str) -> Result<Option<Listed>> {
        if let Some(l) = self.written.get(run_id).or_else(|| self.known.get(run_id)) {
            return Ok(l.clone());
        }
        Ok(match ks.runs.get(run_id)? {
            // A record that no longer decodes leaves its old status entry behind;
            // listings read each run's record and drop entries that disagree.
            Some(bytes) => RunMeta::decode("runs", run_id.as_bytes(), &bytes)
                .ok()
                .map(|m| Listed::of(&m)),
            None => None,
        })
    }

    /// Adds to `batch` the removal of `run_id`'s index entries (a deleted run).
    pub(super) fn remove(
        &mut self,
        ks: &Keyspaces,
        batch: &mut OwnedWriteBatch,
        run_id: &str,
    ) -> Result<()> {
        if let Some(old) = self.current(ks, run_id)? {
            batch.remove(&ks.listing, key(created_prefix(), old.created_ms, run_id));
            batch.remove(
                &ks.listing,
                key(status_prefix(old.kind), old.created_ms, run_id),
            );
            if let Some(parent) = &old.parent {
                batch.remove(
                    &ks.listing,
                    key(parent_prefix(parent), old.created_ms, run_id),
                );
            }
            self.bump(old.kind, -1);
        }
        self.written.insert(run_id.to_owned(), None);
        Ok(())
    }

    fn bump(&mut self, kind: StatusKind, by: i64) {
        if let Some(c) = self.counts.get_mut(usize::from(kind_byte(kind))) {
            *c = c.saturating_add_signed(by);
        }
    }

    /// Adds the changed counts to `batch`; call once per batch, before committing.
    pub(super) fn finish(&mut self, ks: &Keyspaces, batch: &mut OwnedWriteBatch) {
        for (i, kind) in StatusKind::ALL.iter().enumerate() {
            if self.counts[i] != self.before[i] || self.repaired[i] {
                batch.insert(&ks.listing, count_key(*kind), self.counts[i].to_be_bytes());
            }
        }
    }

    /// After the commit: keep the new counts and remember what the batch wrote, or
    /// go back to the committed counts and forget (nothing of the batch is known
    /// to be on disk).
    pub(super) fn committed(&mut self, ok: bool) {
        if ok {
            self.before = self.counts;
            self.repaired = [false; StatusKind::ALL.len()];
            if self.known.len() + self.written.len() > KNOWN_LIMIT {
                self.known.clear();
            }
            self.known.extend(self.written.drain());
        } else {
            self.counts = self.before;
            self.written.clear();
            self.known.clear();
        }
    }
}

/// A status count as stored in `snapshot` (none: 0). A damaged one is not read
/// as a number: it is counted again from the status index, which holds one entry
/// per run of that status (the flag is then false).
fn stored_count(snapshot: &Snapshot, listing: &Keyspace, kind: StatusKind) -> Result<(u64, bool)> {
    let Some(v) = snapshot.get(listing, count_key(kind))? else {
        return Ok((0, true));
    };
    if let Ok(bytes) = <[u8; 8]>::try_from(&*v) {
        return Ok((u64::from_be_bytes(bytes), true));
    }
    let mut runs = 0u64;
    for g in snapshot.prefix(listing, status_prefix(kind)) {
        g.key()?;
        runs += 1;
    }
    tracing::warn!(
        status = ?kind,
        runs,
        "reel: a damaged status count was counted again from the status index"
    );
    Ok((runs, false))
}

/// The counts per status, all as of one moment (the writer changes two of
/// them in one batch when a run moves): they add up to the runs there are.
pub(super) fn counts(ks: &Keyspaces) -> Result<BTreeMap<StatusKind, u64>> {
    let snapshot = ks.db.snapshot();
    let mut counts = BTreeMap::new();
    for kind in StatusKind::ALL {
        counts.insert(kind, stored_count(&snapshot, &ks.listing, kind)?.0);
    }
    Ok(counts)
}

/// Builds the indexes and counts of a store written before they existed, once.
pub(super) fn build_if_missing(ks: &Keyspaces, format: &Keyspace) -> Result<()> {
    if format.get(MARKER)?.is_some() {
        return Ok(());
    }
    let mut counts = [0u64; StatusKind::ALL.len()];
    let mut batch = ks.db.batch();
    let mut built = 0usize;
    for g in ks.runs.iter() {
        let (k, v) = g.into_inner()?;
        let Ok(meta) = RunMeta::decode("runs", &k, &v) else {
            continue;
        };
        let l = Listed::of(&meta);
        batch.insert(
            &ks.listing,
            key(created_prefix(), l.created_ms, &meta.run_id),
            [],
        );
        batch.insert(
            &ks.listing,
            key(status_prefix(l.kind), l.created_ms, &meta.run_id),
            [],
        );
        if let Some(parent) = &l.parent {
            batch.insert(
                &ks.listing,
                key(parent_prefix(parent), l.created_ms, &meta.run_id),
                [],
            );
        }
        counts[usize::from(kind_byte(l.kind))] += 1;
        built += 1;
        if built % 10_000 == 0 {
            std::mem::replace(&mut batch, ks.db.batch()).commit()?;
        }
    }
    for (i, kind) in StatusKind::ALL.iter().enumerate() {
        batch.insert(&ks.listing, count_key(*kind), counts[i].to_be_bytes());
    }
    batch.insert(format, MARKER, "1");
    batch.commit()?;
    ks.db.persist(PersistMode::SyncAll)?;
    if built > 0 {
        tracing::info!(
            runs = built,
            "reel: built the listing indexes of an older store"
        );
    }
    Ok(())
}

type Positions = std::iter::Peekable<Box<dyn Iterator<Item = Result<ListCursor>>>>;

/// Index entries under `prefix` in the query's range and order, as positions.
fn positions(snapshot: &Snapshot, listing: &Keyspace, prefix: Vec<u8>, q: &RunQuery) -> Positions {
    let at = |ms: u64| key(prefix.clone(), ms, "");
    let lo_key = at(q.created_after.unwrap_or(0));
    let hi_key = match q.created_before {
        Some(ms) => at(ms),
        None => prefix_end(&prefix),
    };
    let (mut lo, mut hi) = (Bound::Included(lo_key.clone()), hi_key);
    if let Some(c) = &q.after {
        let cursor = key(prefix.clone(), c.created_ms, &c.run_id);
        if q.newest_first {
            hi = hi.min(cursor);
        } else if cursor >= lo_key {
            lo = Bound::Excluded(cursor);
        }
    }
    let empty = match &lo {
        Bound::Included(l) => *l >= hi,
        Bound::Excluded(l) => *l >= hi,
        Bound::Unbounded => false,
    };
    if empty {
        let none: Box<dyn Iterator<Item = Result<ListCursor>>> = Box::new(std::iter::empty());
        return none.peekable();
    }
    let hi = Bound::Excluded(hi);
    let skip = prefix.len();
    let decode = move |g: fjall::Guard| -> Result<ListCursor> {
        let k = g.key()?;
        let rest = k.get(skip..).unwrap_or_default();
        let (ms, id) = rest.split_at_checked(8).ok_or_else(|| bad_key(&k))?;
        let created_ms = <[u8; 8]>::try_from(ms)
            .map(u64::from_be_bytes)
            .map_err(|_| bad_key(&k))?;
        let run_id = String::from_utf8(id.to_vec()).map_err(|_| bad_key(&k))?;
        Ok(ListCursor { created_ms, run_id })
    };
    let iter = snapshot.range(listing, (lo, hi));
    let boxed: Box<dyn Iterator<Item = Result<ListCursor>>> = if q.newest_first {
        Box::new(iter.rev().map(decode))
    } else {
        Box::new(iter.map(decode))
    };
    boxed.peekable()
}

fn bad_key(k: &[u8]) -> StorageError {
    StorageError::CorruptRecord(crate::CorruptRecord {
        keyspace: "listing".to_owned(),
        run_id: None,
        seq: None,
        key: k.to_vec(),
        reason: "malformed index key".to_owned(),
    })
}

/// The first key past every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    vec![u8::MAX; prefix.len() + 1]
}

/// One page: merges the index ranges that cover the query, reads each candidate's
/// record and keeps those that pass every filter.
pub(super) fn page(ks: &Keyspaces, q: &RunQuery) -> Result<MetaPage> {
    let prefixes = match (&q.parent, &q.status) {
        (Some(parent), _) => vec![parent_prefix(parent)],
        (None, Some(kinds)) => {
            let mut kinds = kinds.clone();
            kinds.sort();
            kinds.dedup();
            kinds.into_iter().map(status_prefix).collect()
        }
        (None, None) => vec![created_prefix()],
    };
    // One view for the whole page: a run moving between two statuses the query
    // names is in exactly one of their ranges, and its record agrees.
    let snapshot = ks.db.snapshot();
    let mut sources: Vec<Positions> = prefixes
        .into_iter()
        .map(|p| positions(&snapshot, &ks.listing, p, q))
        .collect();
    let limit = q.limit.max(1);
    let mut page = MetaPage::default();
    let mut examined = 0usize;
    let mut last: Option<ListCursor> = None;
    loop {
        let position = match next_position(&mut sources, q) {
            Ok(Some(position)) => position,
            Ok(None) => return Ok(page),
            // A damaged index entry names no run it could stand for (the run's
            // own entries and record are read as usual): it is left out.
            Err(StorageError::CorruptRecord(bad)) => {
                tracing::warn!(error = %bad, "reel: damaged listing index entry left out");
                continue;
            }
            Err(e) => return Err(e),
        };
        if page.items.len() == limit {
            // There is more: the next page starts after the last row.
            page.next = page.items.last().map(ListCursor::of);
            return Ok(page);
        }
        if examined == limit + SCAN_BUDGET {
            // Out of budget: the next page starts after the last position
            // examined, so it examines this one.
            page.next = last;
            return Ok(page);
        }
        examined += 1;
        last = Some(position.clone());
        let Some(bytes) = snapshot.get(&ks.runs, &position.run_id)? else {
            continue; // deleted since the index entry was read
        };
        match RunMeta::decode("runs", position.run_id.as_bytes(), &bytes) {
            Ok(meta) if q.matches(&meta) && meta.created_at == position.created_ms => {
                page.items.push(meta)
            }
            Ok(_) => {}
            Err(bad) => page.corrupt.push(bad),
        }
    }
}

/// The smallest next position across `sources` in the query's order.
fn next_position(sources: &mut [Positions], q: &RunQuery) -> Result<Option<ListCursor>> {
    let mut best: Option<(usize, ListCursor)> = None;
    for (i, source) in sources.iter_mut().enumerate() {
        match source.peek() {
            Some(Err(_)) => return source.next().transpose(),
            Some(Ok(head)) if best.as_ref().is_none_or(|(_, b)| q.order(head, b).is_lt()) => {
                best = Some((i, head.clone()));
            }
            _ => {}
        }
    }
    match best {
        Some((i, _)) => sources[i].next().transpose(),
        None => Ok(None),
    }
}
