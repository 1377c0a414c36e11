//! [`ScheduleStore`] for [`FjallStore`]: the `schedules` keyspace (schedule id →
//! [`ScheduleRecord`]), written directly and fsynced (schedule changes are rare).

use fjall::PersistMode;

use super::FjallStore;
use crate::store::Result;
use crate::{ScheduleRecord, ScheduleStore};

impl ScheduleStore for FjallStore {
    fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<()> {
        let _one_at_a_time = self.schedule_writes();
        self.write_schedule(schedule)
    }

    fn swap_schedule(
        &self,
        expected: Option<&ScheduleRecord>,
        new: &ScheduleRecord,
    ) -> Result<bool> {
        // The directory's lock file keeps other processes out; this lock keeps the
        // check and the write of this process's callers together.
        let _one_at_a_time = self.schedule_writes();
        if self.get_schedule(&new.id)?.as_ref() != expected {
            return Ok(false);
        }
        self.write_schedule(new)?;
        Ok(true)
    }

    fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>> {
        let ks = self.keyspaces()?;
        ks.schedules
            .get(id.as_bytes())?
            .map(|bytes| ScheduleRecord::decode(id, &bytes))
            .transpose()
    }

    fn delete_schedule(&self, id: &str) -> Result<()> {
        let _one_at_a_time = self.schedule_writes();
        let ks = self.keyspaces()?;
        ks.schedules.remove(id.as_bytes())?;
        ks.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn list_schedules(&self) -> Result<Vec<ScheduleRecord>> {
        let ks = self.keyspaces()?;
        let mut raw = Vec::new();
        for kv in ks.schedules.iter() {
            let (key, value) = kv.into_inner()?;
            raw.push((String::from_utf8_lossy(&key).into_owned(), value));
        }
        Ok(ScheduleRecord::decode_listed(
            raw.iter().map(|(id, v)| (id.as_str(), &v[..])),
        ))
    }
}

impl FjallStore {
    /// Stores and fsyncs a schedule; the caller holds [`FjallStore::schedule_writes`].
    fn write_schedule(&self, schedule: &ScheduleRecord) -> Result<()> {
        let ks = self.keyspaces()?;
        ks.schedules
            .insert(schedule.id.as_bytes(), schedule.encode()?)?;
        ks.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    /// Serializes this process's schedule writes (see `swap_schedule`).
    fn schedule_writes(&self) -> std::sync::MutexGuard<'_, ()> {
        self.schedule_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
