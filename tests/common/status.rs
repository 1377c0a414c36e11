//! Waiting for a run's status.

use std::time::Duration;

use reel::{AnyRun, RunStatus};

/// Reads the run's status until `ok` holds of it (10 s at most); returns it.
pub async fn until_status(
    run: &AnyRun,
    what: &str,
    ok: impl Fn(&RunStatus) -> bool,
) -> anyhow::Result<RunStatus> {
    super::within(Duration::from_secs(10), what, async {
        loop {
            let s = run.status().await?;
            if ok(&s) {
                return anyhow::Ok(s);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await?
}
