//! Recorded values: `ctx.now`, `ctx.uuid`, `ctx.random_u64`.
//!
//! The value is made once, when first called, and recorded (`Recorded`, fsynced);
//! like every result it reaches the handler when the driver walks that event, so
//! every replay returns the same value at the same point.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reel_storage::Event;
use serde::{Serialize, de::DeserializeOwned};

use crate::ctx::encode;
use crate::replay::{Kind, Opened};
use crate::slots::{Key, Resolution};
use crate::{Ctx, Error, Result, Uuid};

impl Ctx {
    fn recorded<T, M: FnOnce() -> T>(
        &self,
        kind: &'static str,
        make: M,
    ) -> impl Future<Output = Result<T>> + Send + use<T, M>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let (id, opened) = {
            let mut st = self.lock();
            let id = st.replay.positional(kind);
            let opened = st.replay.open(&id, Kind::Recorded { kind });
            if opened.is_ok() {
                st.slots.register(Key::Value(id.clone()), None);
            }
            (id, opened)
        };
        let fresh = match opened {
            Ok(Opened::New) if self.live() => encode(&make()).map(|value| {
                self.record(
                    Event::Recorded {
                        id: id.clone(),
                        kind: kind.to_owned(),
                        value,
                    },
                    true,
                );
            }),
            _ => Ok(()),
        };
        let wait = self.slot(Key::Value(id.clone()), None);
        let ctx = self.clone();
        async move {
            let opened = opened?;
            fresh?;
            if opened == Opened::New && !ctx.live() {
                return ctx.frontier(format!("recorded {kind} `{id}`")).await;
            }
            match wait.await {
                Resolution::Value(p) => ctx.decode_recorded(|| format!("{kind} `{id}`"), &p),
                other => Err(Error::Codec(format!(
                    "recorded {kind} `{id}` received {other:?}"
                ))),
            }
        }
    }

    /// The current time, recorded once and identical on every replay.
    ///
    /// # Errors
    /// [`Error::ReplayDivergence`], [`Error::Storage`].
    pub fn now(&self) -> impl Future<Output = Result<SystemTime>> + Send + use<> {
        let now = self.now_ms();
        let ms = self.recorded("now", move || now);
        async move { Ok(UNIX_EPOCH + Duration::from_millis(ms.await?)) }
    }

    /// A random v4 UUID, recorded once and identical on every replay.
    ///
    /// # Errors
    /// As [`Ctx::now`].
    pub fn uuid(&self) -> impl Future<Output = Result<Uuid>> + Send + use<> {
        self.recorded("uuid", Uuid::new_v4)
    }

    /// A random number, recorded once and identical on every replay.
    ///
    /// # Errors
    /// As [`Ctx::now`].
    pub fn random_u64(&self) -> impl Future<Output = Result<u64>> + Send + use<> {
        self.recorded("random", || Uuid::new_v4().as_u64_pair().0)
    }
}
