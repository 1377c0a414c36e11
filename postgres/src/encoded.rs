//! An append encoded for the writer: its records and metadata encoded on the
//! caller's thread, the mail it posts, and what it tells about itself (whether it
//! creates its run, what it grows its log to).

use reel_storage::{Append, Record, Result, encode_timer_key};

use crate::listing::MetaRow;
use crate::partition_of;

/// An append with its records and metadata encoded (on the caller's thread).
pub(crate) struct Encoded {
    pub(crate) run_id: String,
    pub(crate) expected_seq: Option<u64>,
    /// [`Append::writer`].
    pub(crate) writer: Option<u64>,
    pub(crate) records: Vec<Vec<u8>>,
    /// Encoded metadata, whether the run has finished, and its listing columns.
    pub(crate) meta: Option<(Vec<u8>, bool, MetaRow)>,
    pub(crate) add_timers: Vec<(Vec<u8>, String, u64)>,
    pub(crate) remove_timers: Vec<Vec<u8>>,
    pub(crate) durable: bool,
    /// Encoded mail for the run's owner (`reel_inbox`).
    pub(crate) mail: Option<Vec<u8>>,
    /// Encoded mail for other runs' owners, with their partitions.
    pub(crate) letters: Vec<(i16, String, Vec<u8>)>,
    /// For a creation without mail: the wake-up (with the run's timers) posted
    /// instead when the writer turns out not to lease the run's partition.
    pub(crate) wake: Option<Vec<u8>>,
}

impl Encoded {
    /// The run and the sequence number its log ends before once this lands, for
    /// an append with records.
    pub(crate) fn grows(&self) -> Option<(String, u64)> {
        let first = self.expected_seq?;
        (!self.records.is_empty()).then(|| (self.run_id.clone(), first + self.records.len() as u64))
    }

    pub(crate) fn new(append: Append) -> Result<Encoded> {
        append.validate()?;
        let at = append.at.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        });
        let records = append
            .events
            .iter()
            .map(|e| Record::encode(e, at))
            .collect::<Result<Vec<_>>>()?;
        let meta = match &append.meta {
            Some(m) => Some((m.encode()?, m.state.is_finished(), MetaRow::of(m))),
            None => None,
        };
        let creates = append.expected_seq == Some(0) && !append.events.is_empty();
        let wake = if creates && append.mail.is_none() {
            let timers = append
                .add_timers
                .iter()
                .filter(|t| t.run_id == append.run_id)
                .map(|t| (t.fire_at, t.timer_id.clone()))
                .collect();
            Some(reel_storage::Mail::Wake { timers }.encode()?)
        } else {
            None
        };
        Ok(Encoded {
            records,
            wake,
            meta,
            add_timers: append
                .add_timers
                .iter()
                .map(|t| (encode_timer_key(t), t.run_id.clone(), t.fire_at))
                .collect(),
            remove_timers: append.remove_timers.iter().map(encode_timer_key).collect(),
            expected_seq: append.expected_seq,
            writer: append.writer,
            durable: append.durable,
            mail: append
                .mail
                .as_ref()
                .map(reel_storage::Mail::encode)
                .transpose()?,
            letters: append
                .letters
                .iter()
                .map(|(run, mail)| Ok((partition_of(run), run.clone(), mail.encode()?)))
                .collect::<Result<Vec<_>>>()?,
            run_id: append.run_id,
        })
    }
}

impl Encoded {
    /// Whether this append creates its run (its first events): any host may.
    pub(crate) fn creates(&self) -> bool {
        self.expected_seq == Some(0) && !self.records.is_empty()
    }

    /// The mail this append posts: its own, or, for a creation in a partition the
    /// writer does not lease, a wake-up for the owner. A host that still believes
    /// it owns a partition taken over creates the run without mail; the new owner
    /// may have scanned the partition already, so without this nobody would run it.
    pub(crate) fn mail_to_post(&self, leased: bool) -> Option<&[u8]> {
        match (&self.mail, &self.wake) {
            (Some(mail), _) => Some(mail),
            (None, Some(wake)) if !leased => Some(wake),
            _ => None,
        }
    }
}
