//! Published values: `ctx.publish`, read from outside with
//! [`AnyRun::published`] and [`AnyRun::wait_published`] (DBOS's
//! `set_event` / `get_event`).
//!
//! `Published { key, value }` is recorded (fsynced) when `publish` is called. It is
//! an opening with no result, matched by key at its position on replay, where it
//! is not recorded again. Readers read the run's durable log: the latest value
//! under a key wins. A caller waiting for a value registers with the host before it
//! reads the log and is woken when a `Published` event of the run lands or the run
//! ends, so it never polls and never misses one.

use std::future::Future;

use reel_storage::Event;
use serde::{Serialize, de::DeserializeOwned};

use crate::ctx::{decode, encode};
use crate::replay::{Kind, Opened};
use crate::{AnyRun, Ctx, Result};

impl Ctx {
    /// Publishes `value` under `key` for readers outside the run (progress, a
    /// status, an intermediate result): [`AnyRun::published`] returns the latest
    /// value published under a key, [`AnyRun::wait_published`] waits for one.
    /// Recorded durably once; replay does not record it again.
    ///
    /// ```no_run
    /// # async fn f(ctx: reel::Ctx) -> reel::Result<()> {
    /// ctx.publish("stage", "paid").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Codec`](crate::Error::Codec) when the value does not serialize
    /// (nothing is recorded, and the run's later calls are unaffected),
    /// [`Error::ReplayDivergence`](crate::Error::ReplayDivergence) when the log has
    /// another primitive (or another key) here, [`Error::Storage`](crate::Error::Storage).
    pub fn publish<T: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &T,
    ) -> impl Future<Output = Result<()>> + Send + use<T> {
        let key = key.to_owned();
        // Encoded before anything is matched: a value that does not serialize takes
        // no position, live and on every replay alike.
        let opened = encode(value).map(|value| {
            let opened = self.lock().replay.open(&key, Kind::Publish);
            if opened == Ok(Opened::New) && self.live() {
                self.record(
                    Event::Published {
                        key: key.clone(),
                        value,
                    },
                    true,
                );
            }
            opened
        });
        let ctx = self.clone();
        async move {
            if opened?? == Opened::New && !ctx.live() {
                return ctx.frontier(format!("publish `{key}`")).await;
            }
            Ok(())
        }
    }
}

impl AnyRun {
    /// The latest value the run published under `key` with
    /// [`Ctx::publish`](crate::Ctx::publish), read from its durable log; `None` if
    /// it has published none (yet). Works for finished runs and across restarts.
    ///
    /// # Errors
    /// [`Error::UnknownRun`](crate::Error::UnknownRun),
    /// [`Error::Codec`](crate::Error::Codec) when the value does not decode into
    /// `T`, [`Error::Storage`](crate::Error::Storage).
    pub async fn published<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        match self.core()?.published(&self.run_id, key).await? {
            Some(p) => decode(&p).map(Some),
            None => Ok(None),
        }
    }

    /// The latest value published under `key`, waiting until the run publishes
    /// one if it has not yet (no polling: the host wakes the caller when a value
    /// lands). A parked run may still publish once fixed code resumes it, so its
    /// callers keep waiting.
    ///
    /// # Errors
    /// [`Error::RunFinished`](crate::Error::RunFinished) when the run ends without
    /// publishing under `key`, [`Error::UnknownRun`](crate::Error::UnknownRun),
    /// [`Error::Shutdown`](crate::Error::Shutdown) when the host shuts down,
    /// [`Error::Codec`](crate::Error::Codec), [`Error::Storage`](crate::Error::Storage).
    pub async fn wait_published<T: DeserializeOwned>(&self, key: &str) -> Result<T> {
        decode(&self.core()?.wait_published(&self.run_id, key).await?)
    }
}
