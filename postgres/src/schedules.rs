//! [`ScheduleStore`] for [`PgStore`]: the `reel_schedules` table (schedule id →
//! [`ScheduleRecord`] bytes); a swap is one statement, so the check and the write
//! are one atomic step for every host sharing the database.

use reel_storage::{Result, ScheduleRecord, ScheduleStore};

use crate::PgStore;
use crate::pg_err;

impl ScheduleStore for PgStore {
    fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<()> {
        let id = schedule.id.clone();
        let bytes = schedule.encode()?;
        self.block(move |c| async move {
            c.execute(
                "INSERT INTO reel_schedules (id, record) VALUES ($1, $2) \
                 ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record",
                &[&id, &bytes],
            )
            .await
            .map_err(|e| pg_err(&e))?;
            Ok(())
        })
    }

    fn swap_schedule(
        &self,
        expected: Option<&ScheduleRecord>,
        new: &ScheduleRecord,
    ) -> Result<bool> {
        let id = new.id.clone();
        let bytes = new.encode()?;
        let old = expected.map(ScheduleRecord::encode).transpose()?;
        self.block(move |c| async move {
            // One statement each, so the check and the write are one atomic step.
            let changed = match old {
                None => {
                    c.execute(
                        "INSERT INTO reel_schedules (id, record) VALUES ($1, $2) \
                         ON CONFLICT (id) DO NOTHING",
                        &[&id, &bytes],
                    )
                    .await
                }
                Some(old) => {
                    c.execute(
                        "UPDATE reel_schedules SET record = $2 WHERE id = $1 AND record = $3",
                        &[&id, &bytes, &old],
                    )
                    .await
                }
            }
            .map_err(|e| pg_err(&e))?;
            Ok(changed == 1)
        })
    }

    fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>> {
        let id = id.to_owned();
        self.block(move |c| async move {
            let row = c
                .query_opt("SELECT record FROM reel_schedules WHERE id = $1", &[&id])
                .await
                .map_err(|e| pg_err(&e))?;
            row.map(|r| ScheduleRecord::decode(&id, r.get(0)))
                .transpose()
        })
    }

    fn delete_schedule(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.block(move |c| async move {
            c.execute("DELETE FROM reel_schedules WHERE id = $1", &[&id])
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(())
        })
    }

    fn list_schedules(&self) -> Result<Vec<ScheduleRecord>> {
        self.block(|c| async move {
            let rows = c
                .query("SELECT id, record FROM reel_schedules ORDER BY id", &[])
                .await
                .map_err(|e| pg_err(&e))?;
            Ok(ScheduleRecord::decode_listed(
                rows.iter().map(|r| (r.get(0), r.get(1))),
            ))
        })
    }
}
