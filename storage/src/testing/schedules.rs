//! [`ScheduleStore`] for [`FaultStore`]: passed through to the wrapped store (no
//! faults are injected into schedule writes).

use super::FaultStore;
use crate::store::Result;
use crate::{ScheduleRecord, ScheduleStore};

impl ScheduleStore for FaultStore {
    fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<()> {
        self.inner.put_schedule(schedule)
    }

    fn swap_schedule(
        &self,
        expected: Option<&ScheduleRecord>,
        new: &ScheduleRecord,
    ) -> Result<bool> {
        self.inner.swap_schedule(expected, new)
    }

    fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>> {
        self.inner.get_schedule(id)
    }

    fn delete_schedule(&self, id: &str) -> Result<()> {
        self.inner.delete_schedule(id)
    }

    fn list_schedules(&self) -> Result<Vec<ScheduleRecord>> {
        self.inner.list_schedules()
    }
}
