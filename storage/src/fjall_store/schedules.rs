//! [`ScheduleStore`] for [`FjallStore`]: the `schedules` keyspace (schedule id →
//! [`ScheduleRecord`]), written directly and fsynced (schedule changes are rare).

use fjall::PersistMode;

use super::FjallStore;
use crate::store::Result;
use crate::{ScheduleRecord, ScheduleStore};

impl ScheduleStore for FjallStore {
    fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<()> {
        let ks = self.keyspaces()?;
        ks.schedules
            .insert(schedule.id.as_bytes(), schedule.encode()?)?;
        ks.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>> {
        let ks = self.keyspaces()?;
        ks.schedules
            .get(id.as_bytes())?
            .map(|bytes| ScheduleRecord::decode(id, &bytes))
            .transpose()
    }

    fn delete_schedule(&self, id: &str) -> Result<()> {
        let ks = self.keyspaces()?;
        ks.schedules.remove(id.as_bytes())?;
        ks.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn list_schedules(&self) -> Result<Vec<ScheduleRecord>> {
        let ks = self.keyspaces()?;
        let mut out = Vec::new();
        for kv in ks.schedules.iter() {
            let (key, value) = kv.into_inner()?;
            out.push(ScheduleRecord::decode(
                &String::from_utf8_lossy(&key),
                &value,
            )?);
        }
        Ok(out)
    }
}
