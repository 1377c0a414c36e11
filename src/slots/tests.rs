//! Unit tests of the slots: routing of signals, buffered signals, timed waits.
use super::*;

fn p(v: u32) -> Payload {
    Payload(rmp_serde::to_vec(&v).unwrap_or_default())
}

fn info() -> WaitInfo {
    WaitInfo {
        what: "w".into(),
        child: false,
    }
}

fn signal(v: u32) -> Event {
    Event::SignalReceived {
        name: "x".into(),
        signal_id: format!("s{v}"),
        payload: p(v),
    }
}

fn noop() -> Waker {
    futures::task::noop_waker()
}

fn take(slots: &mut Slots, id: &str) -> Option<Resolution> {
    slots.poll(&Key::Wait(id.into()), &noop())
}

#[test]
fn buffered_signal_goes_to_the_next_wait() {
    let mut s = Slots::default();
    s.deliver(0, &signal(1));
    s.register_wait("signal#1", "x", info());
    assert!(take(&mut s, "signal#1").is_none(), "only through the feed");
    assert!(s.feed_buffered().resolved);
    assert!(matches!(take(&mut s, "signal#1"), Some(Resolution::Signal(v)) if v == p(1)));
}

#[test]
fn buffered_signals_are_fed_one_wait_at_a_time_in_call_order() {
    let mut s = Slots::default();
    s.deliver(
        0,
        &Event::SignalReceived {
            name: "y".into(),
            signal_id: "y1".into(),
            payload: p(2),
        },
    );
    s.deliver(0, &signal(1));
    s.register_wait("signal#1", "x", info());
    s.register_wait("signal#2", "y", info());
    let first = s.feed_buffered();
    assert_eq!(first.satisfied_wait.as_deref(), Some("signal#1"));
    assert!(take(&mut s, "signal#2").is_none());
    assert_eq!(
        s.feed_buffered().satisfied_wait.as_deref(),
        Some("signal#2")
    );
    assert!(!s.feed_buffered().resolved);
}

#[test]
fn timed_out_wait_takes_nothing() {
    let mut s = Slots::default();
    s.register_wait("signal#1", "x", info());
    s.deliver(
        0,
        &Event::TimerFired {
            id: "signal#1".into(),
        },
    );
    assert!(matches!(
        take(&mut s, "signal#1"),
        Some(Resolution::TimedOut)
    ));
    s.register_wait("signal#2", "x", info());
    let d = s.deliver(0, &signal(7));
    assert_eq!(d.satisfied_wait.as_deref(), Some("signal#2"));
    assert!(matches!(take(&mut s, "signal#2"), Some(Resolution::Signal(v)) if v == p(7)));
}

#[test]
fn dropped_wait_gives_its_signal_back() {
    let mut s = Slots::default();
    s.deliver(0, &signal(1));
    s.deliver(0, &signal(2));
    s.register_wait("signal#1", "x", info());
    s.feed_buffered();
    s.remove(&Key::Wait("signal#1".into()));
    s.register_wait("signal#2", "x", info());
    s.feed_buffered();
    assert!(matches!(take(&mut s, "signal#2"), Some(Resolution::Signal(v)) if v == p(1)));
}

#[test]
fn dropped_pending_wait_is_skipped() {
    let mut s = Slots::default();
    s.register_wait("signal#1", "x", info());
    s.register_wait("signal#2", "x", info());
    s.remove(&Key::Wait("signal#1".into()));
    s.deliver(0, &signal(3));
    assert!(matches!(take(&mut s, "signal#2"), Some(Resolution::Signal(v)) if v == p(3)));
}

#[test]
fn a_decided_slot_stays_decided() {
    let mut s = Slots::default();
    s.register(Key::Timer("timer#1".into()), Some(info()));
    s.deliver(
        0,
        &Event::TimerFired {
            id: "timer#1".into(),
        },
    );
    let late = s.deliver(
        0,
        &Event::TimerFired {
            id: "timer#1".into(),
        },
    );
    assert!(!late.resolved);
    assert!(matches!(
        s.poll(&Key::Timer("timer#1".into()), &noop()),
        Some(Resolution::Fired)
    ));
    s.remove(&Key::Timer("timer#1".into()));
    assert!(
        !s.deliver(
            0,
            &Event::TimerFired {
                id: "timer#1".into()
            }
        )
        .resolved
    );
}
