//! The schedule tests' time line: a `TestClock` starting at T0, on the hour, and
//! runs named `<schedule id>/<fire time in ms>`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reel::{Host, ScheduleInfo};

/// An hour.
pub const HOUR: Duration = Duration::from_secs(3600);
/// An hour in milliseconds.
pub const HOUR_MS: u64 = 3_600_000;
/// 2027-01-10T00:00:00Z, on the hour.
pub const T0_MS: u64 = 1_799_539_200_000;

/// T0 as a time.
pub fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(T0_MS)
}

/// The run of schedule `schedule`'s firing `hours` after T0.
pub fn run_id(schedule: &str, hours: u64) -> String {
    format!("{schedule}/{}", T0_MS + hours * HOUR_MS)
}

/// Schedule `id` as `host` lists it.
pub async fn info(host: &Host, id: &str) -> anyhow::Result<ScheduleInfo> {
    host.schedules()
        .await?
        .into_iter()
        .find(|s| s.id == id)
        .ok_or_else(|| anyhow::anyhow!("no schedule `{id}`"))
}

/// Waits (20 s at most) until schedule `id` has handled its firings up to `hours`
/// after T0: its next fire time is past them.
pub async fn until_handled(host: &Host, id: &str, hours: u64) -> anyhow::Result<()> {
    let next = Some(UNIX_EPOCH + Duration::from_millis(T0_MS + (hours + 1) * HOUR_MS));
    super::within(
        Duration::from_secs(20),
        &format!("schedule `{id}` past hour {hours}"),
        async {
            while info(host, id).await?.next_fire < next {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            anyhow::Ok(())
        },
    )
    .await?
}
