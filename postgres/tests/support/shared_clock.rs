//! A [`TestClock`] shared by the processes of a test: the test moves its own clock
//! and writes the time (ms since the epoch) to a file; a host process follows the
//! file, moving its clock to what it reads (a clock never moves back).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reel::testing::TestClock;

fn file(dir: &Path) -> PathBuf {
    dir.join("clock-ms")
}

/// Moves `clock` to `t` and tells the processes following `dir` to (written to a
/// temporary file, then renamed: a reader never sees half a number).
pub fn set(clock: &TestClock, dir: &Path, t: SystemTime) {
    let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    let tmp = dir.join("clock-ms.tmp");
    std::fs::write(&tmp, ms.to_string()).expect("write the clock file");
    std::fs::rename(&tmp, file(dir)).expect("rename the clock file");
    clock.set(t);
}

/// Moves `clock` to the time in `dir`'s clock file whenever it changes (read
/// every 10 ms, for as long as the runtime runs).
pub fn follow(clock: TestClock, dir: &Path) {
    let path = file(dir);
    tokio::spawn(async move {
        loop {
            if let Some(ms) = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                clock.set(UNIX_EPOCH + Duration::from_millis(ms));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}
