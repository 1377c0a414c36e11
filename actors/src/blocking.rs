//! Storage calls off the async workers. A leaf.

use reel_storage::StorageError;

/// Runs `f` on the blocking pool: fjall calls stay off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StorageError::Io(format!("blocking task failed: {e}")))?
}
