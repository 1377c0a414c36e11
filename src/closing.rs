//! Store directories whose host is shutting down in the background, process-wide.
//!
//! A [`Host`](crate::Host) whose last clone is dropped without `shutdown()` shuts
//! down in a task of its own, and holds its directory's lock until that ends. A
//! [`HostBuilder::build`](crate::HostBuilder::build) for the same directory in this
//! process waits for it here first, so `drop(host)` followed by a new host on the
//! same path opens instead of finding the store locked.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

/// The directories being closed: (key, entry id, a receiver that errors once the
/// closing ends).
static CLOSING: Mutex<Vec<(PathBuf, u64, watch::Receiver<()>)>> = Mutex::new(Vec::new());

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn closing() -> std::sync::MutexGuard<'static, Vec<(PathBuf, u64, watch::Receiver<()>)>> {
    CLOSING.lock().unwrap_or_else(|p| p.into_inner())
}

/// The registry's name for a directory: canonical when it exists, so two spellings
/// of one directory meet.
pub(crate) fn key(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Marks `key` as closing until the returned guard is dropped (the background
/// shutdown ended, or its task was dropped with the runtime).
pub(crate) fn mark(key: PathBuf) -> Closing {
    let (tx, rx) = watch::channel(());
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    closing().push((key, id, rx));
    Closing { id, _tx: tx }
}

/// Waits until no host of this process is closing `key`.
pub(crate) async fn wait_for(key: &Path) {
    loop {
        let rx = closing()
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, _, rx)| rx.clone());
        let Some(mut rx) = rx else { return };
        // Nothing is ever sent: this returns when the guard drops its sender.
        let _ = rx.changed().await;
    }
}

/// A directory being closed; dropping it ends that.
pub(crate) struct Closing {
    id: u64,
    _tx: watch::Sender<()>,
}

impl Drop for Closing {
    fn drop(&mut self) {
        closing().retain(|(_, id, _)| *id != self.id);
        // `_tx` drops after this: waiters that wake find the entry gone.
    }
}
