//! Arbitrary bytes as a run's log, replayed with `reel::testing::replay` against
//! every handler of `tests/replay_handlers` (sequential steps and waits, `try_join!`,
//! `tokio::select!`, retried steps, recorded values, an approval, a child call,
//! patches and published values):
//! the replay returns `Ok(Completed | Failed | Pending)` or a typed error, never
//! panics and never hangs (each replay bounded to 2 s).
//!
//! The bytes are decoded by hand into events: one tag byte per event or per
//! "chunk" (an opening event and its result, as a real run appends them, so the
//! fuzzer gets past the first events), then ids, names and payloads drawn from the
//! ids the handlers use, or raw strings and raw payload bytes.
#![no_main]

#[path = "../../tests/replay_handlers/mod.rs"]
mod replay_handlers;

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use reel::{Approval, Event, Failure, Payload};
use replay_handlers::{HANDLERS, IDS, SIGNAL_NAMES, handler_name, replay_with};

/// Reads the fuzz input; past its end every read is zero.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn done(&self) -> bool {
        self.0.is_empty()
    }
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    fn small(&mut self) -> u32 {
        let b = self.u8();
        if b < 250 {
            u32::from(b % 5)
        } else {
            self.u32()
        }
    }
    fn raw(&mut self, max: usize) -> Vec<u8> {
        let n = (self.u8() as usize).min(max).min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head.to_vec()
    }
    fn string(&mut self) -> String {
        String::from_utf8_lossy(&self.raw(16)).into_owned()
    }
    fn id(&mut self) -> String {
        let b = self.u8() as usize;
        match IDS.get(b % 32) {
            Some(id) if b < 224 => (*id).to_owned(),
            _ => self.string(),
        }
    }
    fn signal_name(&mut self) -> String {
        let b = self.u8() as usize;
        match SIGNAL_NAMES.get(b % 8) {
            Some(n) => (*n).to_owned(),
            None => self.string(),
        }
    }
    fn workflow(&mut self) -> String {
        let b = self.u8();
        if b < 200 {
            handler_name(b as usize).to_owned()
        } else {
            self.string()
        }
    }
    fn opt_u64(&mut self) -> Option<u64> {
        if self.u8() % 2 == 0 {
            None
        } else {
            Some(self.u64())
        }
    }
    fn payload(&mut self) -> Payload {
        match self.u8() % 12 {
            0 | 1 => enc(&self.small()),
            2 => enc(&self.u32()),
            3 => enc(&self.u64()),
            4 => enc(&self.string()),
            5 => enc(&()),
            6 => enc(&(self.u8() % 2 == 1)),
            7 => {
                let approved = self.u8() % 2 == 1;
                let feedback = (self.u8() % 2 == 1).then(|| self.string());
                enc(&Approval { approved, feedback })
            }
            8 => enc(&std::time::UNIX_EPOCH
                .checked_add(Duration::from_millis(self.u64() >> 20))
                .unwrap_or(std::time::UNIX_EPOCH)),
            9 => enc(&reel::Uuid::from_u64_pair(self.u64(), self.u64())),
            10 => Payload(vec![0x91; usize::from(self.u8()) * 16]),
            _ => Payload(self.raw(64)),
        }
    }
    fn failure(&mut self) -> Failure {
        match self.u8() % 5 {
            0 => Failure::Step {
                step: self.id(),
                message: self.string(),
                attempts: Vec::new(),
            },
            1 => Failure::Cancelled(self.string()),
            2 => Failure::Codec(self.string()),
            3 => Failure::ReplayDivergence {
                index: self.u64(),
                expected: self.string(),
                found: self.string(),
            },
            _ => Failure::Other(self.string()),
        }
    }

    /// One event, any variant.
    fn event(&mut self, tag: u8) -> Event {
        match tag % 18 {
            0 => Event::RunStarted {
                workflow: self.workflow(),
                version: self.small(),
                input: self.payload(),
            },
            1 => Event::StepStarted {
                id: self.id(),
                attempt: self.small(),
            },
            2 => Event::StepCompleted {
                id: self.id(),
                output: self.payload(),
            },
            3 => Event::StepFailed {
                id: self.id(),
                attempt: self.small(),
                error: self.string(),
                retry_at: self.opt_u64(),
            },
            4 => Event::TimerScheduled {
                id: self.id(),
                fire_at: self.u64(),
            },
            5 => Event::TimerFired { id: self.id() },
            6 => Event::TimerCancelled { id: self.id() },
            7 => Event::SignalAwaited {
                id: self.id(),
                name: self.signal_name(),
                deadline: self.opt_u64(),
            },
            8 => Event::SignalReceived {
                name: self.signal_name(),
                signal_id: self.string(),
                payload: self.payload(),
            },
            9 => Event::Recorded {
                id: self.id(),
                kind: ["now", "uuid", "random", "other"][usize::from(self.u8() % 4)].to_owned(),
                value: self.payload(),
            },
            10 => Event::ChildStarted {
                id: self.id(),
                workflow: self.workflow(),
                version: self.small(),
                run_id: if self.u8() % 2 == 0 {
                    "kid".to_owned()
                } else {
                    self.string()
                },
            },
            11 => {
                let id = self.id();
                let result = if self.u8() % 2 == 0 {
                    Ok(self.payload())
                } else {
                    Err(self.failure())
                };
                Event::ChildCompleted { id, result }
            }
            12 => Event::CancelRequested {
                reason: self.string(),
            },
            13 => Event::RunCompleted {
                output: self.payload(),
            },
            14 => Event::RunFailed {
                error: self.failure(),
            },
            15 => Event::RunCancelled {
                reason: self.string(),
            },
            16 => Event::Patched { id: self.id() },
            _ => Event::Published {
                key: self.id(),
                value: self.payload(),
            },
        }
    }

    /// An opening event and its result, as a real run appends them.
    fn chunk(&mut self, tag: u8, log: &mut Vec<Event>) {
        let id = self.id();
        match tag % 6 {
            0 => {
                log.push(Event::StepStarted {
                    id: id.clone(),
                    attempt: 1,
                });
                log.push(Event::StepCompleted {
                    id,
                    output: self.payload(),
                });
            }
            1 => {
                let attempt = self.small();
                let retry = self.u8() % 2 == 0;
                log.push(Event::StepStarted {
                    id: id.clone(),
                    attempt,
                });
                log.push(Event::StepFailed {
                    id: id.clone(),
                    attempt,
                    error: "boom".to_owned(),
                    retry_at: retry.then_some(1),
                });
                if retry {
                    let timer = format!("{id}/retry{attempt}");
                    log.push(Event::TimerScheduled {
                        id: timer.clone(),
                        fire_at: 1,
                    });
                    log.push(Event::TimerFired { id: timer });
                }
            }
            2 => {
                log.push(Event::TimerScheduled {
                    id: id.clone(),
                    fire_at: 5,
                });
                log.push(if self.u8() % 4 == 0 {
                    Event::TimerCancelled { id }
                } else {
                    Event::TimerFired { id }
                });
            }
            3 => {
                let name = self.signal_name();
                let deadline = self.opt_u64();
                log.push(Event::SignalAwaited {
                    id: id.clone(),
                    name: name.clone(),
                    deadline,
                });
                log.push(if self.u8() % 4 == 0 {
                    Event::TimerFired { id }
                } else {
                    Event::SignalReceived {
                        name,
                        signal_id: self.string(),
                        payload: self.payload(),
                    }
                });
            }
            4 => {
                let kind = ["now", "uuid", "random"][usize::from(self.u8() % 3)];
                log.push(Event::Recorded {
                    id: format!("{kind}#1"),
                    kind: kind.to_owned(),
                    value: self.payload(),
                });
            }
            _ => {
                log.push(Event::ChildStarted {
                    id: id.clone(),
                    workflow: "leaf".to_owned(),
                    version: 1,
                    run_id: "kid".to_owned(),
                });
                if self.u8() % 4 != 0 {
                    let result = if self.u8() % 4 == 0 {
                        Err(self.failure())
                    } else {
                        Ok(self.payload())
                    };
                    log.push(Event::ChildCompleted { id, result });
                }
            }
        }
    }
}

fn enc<T: serde::Serialize>(v: &T) -> Payload {
    Payload(rmp_serde::to_vec_named(v).expect("encode"))
}

/// The log the bytes stand for: an optional `RunStarted` for one handler (its input
/// of one of the handlers' input types), then events and chunks.
fn decode(data: &[u8]) -> Vec<Event> {
    let mut b = Bytes(data);
    let mut log = Vec::new();
    let start = b.u8();
    if start < 200 {
        let input = match start % 4 {
            0 => enc(&b.small()),
            1 => enc(&()),
            2 => enc(&b.string()),
            _ => b.payload(),
        };
        log.push(Event::RunStarted {
            workflow: handler_name(usize::from(start / 4)).to_owned(),
            version: 1,
            input,
        });
    }
    while !b.done() && log.len() < 64 {
        let tag = b.u8();
        if tag < 128 {
            b.chunk(tag, &mut log);
        } else {
            let e = b.event(tag);
            log.push(e);
        }
    }
    log
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
}

fuzz_target!(|data: &[u8]| {
    let log = decode(data);
    RUNTIME.with(|rt| {
        for i in 0..HANDLERS {
            let r = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(2), replay_with(i, &log)).await
            });
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!("handler `{}`: {e}\nlog: {log:#?}", handler_name(i)),
                Err(_) => panic!("handler `{}`: replay hung\nlog: {log:#?}", handler_name(i)),
            }
        }
    });
});
