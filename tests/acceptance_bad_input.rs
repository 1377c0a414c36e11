//! Acceptance, DESIGN invariant 8 ("Bad input gets a clear error and loses nothing
//! ... None of these panics the host or damages another run") probed through the
//! public API with inputs a user may pick freely: run ids with unicode, `/`, `%`,
//! spaces and control characters; step and signal names far longer than a store key
//! may be; a workflow whose `Output` does not serialize; a result read as the wrong
//! type through the untyped handle; a step body panicking with a non-string payload;
//! a handler whose locals panic when its future is dropped (passivation, cancel,
//! shutdown).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use common::{Counter, within};
use reel::{Ctx, Error, Host, RetryPolicy, RunStatus, Workflow};

const LIMIT: Duration = Duration::from_secs(30);

/// Waits for `go` (a u32) and returns it plus one.
struct Echo;
impl Workflow for Echo {
    const NAME: &'static str = "acc-echo";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let n: u32 = ctx.wait_for_signal("go").await?;
        Ok(n + 1)
    }
}

/// Fails the first attempt of a step whose name is the input, then succeeds.
struct LongStep {
    attempts: Counter,
}
impl Workflow for LongStep {
    const NAME: &'static str = "acc-long-step";
    type Input = String;
    type Output = u32;
    async fn run(&self, ctx: Ctx, name: String) -> reel::Result<u32> {
        let policy = RetryPolicy::default()
            .with_max_attempts(3)
            .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
        ctx.step_with(&name, policy, |s| {
            let n = self.attempts.bump();
            async move {
                if s.attempt() == 1 {
                    Err(format!("first attempt {n} fails"))
                } else {
                    Ok(7u32)
                }
            }
        })
        .await
    }
}

fn not_a_panic_or_hang<T: std::fmt::Debug>(what: &str, r: &reel::Result<T>) {
    if let Err(Error::Shutdown) = r {
        panic!("{what}: the host shut down under it: {r:?}");
    }
}

/// Run ids a user may pick freely (URL-ish, unicode, whitespace, control
/// characters other than NUL) are ordinary run ids: each one starts, takes a signal,
/// completes, is listed under its exact id, survives a host restart and is never
/// confused with a similar id (`a/b` vs `a%2Fb`, `x` vs `x ` ...).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_run_ids_are_ordinary_run_ids() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ids: Vec<String> = [
        "a/b",
        "a%2Fb",
        "a%2fb",
        "a",
        "a ",
        " a",
        "%",
        "%00",
        "/",
        "//",
        "a/../b",
        "ünïcødé-日本語-🦀",
        "tab\there",
        "new\nline",
        "\u{1}",
        "a\u{1}",
        "a\u{1}b",
        "?x=1&y=2#frag",
        "\\",
        "é",        // precomposed
        "e\u{301}", // decomposed: a different id
        "a.",
        "...",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let host = common::hosts::open(dir.path(), Echo).await?;
    for id in &ids {
        let run = host.start::<Echo>(id, ()).await?;
        assert_eq!(run.id(), id);
        within(LIMIT, id, run.wait_until_suspended()).await??;
    }
    // Signal each with a value of its own; each gets exactly its own.
    for (i, id) in ids.iter().enumerate() {
        host.handle::<Echo>(id)
            .signal("go", &(i as u32), &format!("sig-{i}"))
            .await?;
    }
    for (i, id) in ids.iter().enumerate() {
        let got = within(LIMIT, id, host.handle::<Echo>(id).result()).await??;
        assert_eq!(got, i as u32 + 1, "run {id:?}");
    }
    let listed: std::collections::BTreeSet<String> =
        host.runs().await?.into_iter().map(|r| r.run_id).collect();
    let wanted: std::collections::BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(listed, wanted);
    host.shutdown().await?;

    // After a restart every run is still there, finished, with its own log.
    let host = common::hosts::open(dir.path(), Echo).await?;
    for (i, id) in ids.iter().enumerate() {
        let run = host.handle::<Echo>(id);
        assert_eq!(run.status().await?, RunStatus::Completed, "run {id:?}");
        assert_eq!(run.result().await?, i as u32 + 1, "run {id:?}");
        let received = run
            .events()
            .await?
            .into_iter()
            .filter(|e| e.kind() == "SignalReceived")
            .count();
        assert_eq!(received, 1, "run {id:?} holds another run's signal");
    }
    // Deleting one id leaves its look-alikes alone.
    host.run("a").delete().await?;
    assert!(matches!(
        host.run("a").status().await,
        Err(Error::UnknownRun(_))
    ));
    for id in ["a ", " a", "a\u{1}", "a\u{1}b", "a/b", "a."] {
        assert_eq!(
            host.run(id).status().await?,
            RunStatus::Completed,
            "deleting `a` harmed {id:?}"
        );
    }
    host.shutdown().await?;
    Ok(())
}

fn long_step_host(dir: &std::path::Path, attempts: &Counter) -> reel::HostBuilder {
    Host::builder()
        .path(dir)
        .register(LongStep {
            attempts: attempts.clone(),
        })
        .register(Echo)
}

/// A step's name is free text; a very long one (longer than a store key may be:
/// fjall refuses keys over 65,535 bytes) whose first attempt fails gets a durable
/// retry timer. Whatever reel makes of it, the run ends with a value or a typed
/// error within a bound (it neither hangs nor takes the host down), also after a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_step_with_a_huge_name_ends_with_a_typed_answer() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let host = long_step_host(dir.path(), &attempts).build().await?;
    let big = host.start::<LongStep>("big", "s".repeat(70_000)).await?;
    let ended = within(LIMIT, "the big run's end", big.result()).await?;
    not_a_panic_or_hang("the big run", &ended);
    if let Ok(v) = &ended {
        assert_eq!(*v, 7);
    }
    within(LIMIT, "shutdown", host.shutdown()).await??;

    let host = long_step_host(dir.path(), &attempts).build().await?;
    let again = within(
        LIMIT,
        "the big run again",
        host.handle::<LongStep>("big").result(),
    )
    .await?;
    not_a_panic_or_hang("the big run after a restart", &again);
    assert_eq!(again.is_ok(), ended.is_ok(), "{ended:?} then {again:?}");
    within(LIMIT, "shutdown", host.shutdown()).await??;
    Ok(())
}

/// The same huge-named retried step must not harm any other run: once the big
/// run has ended, a run that was waiting before takes its signal and completes, a
/// new run starts and completes, and after a restart both are intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_step_with_a_huge_name_harms_no_other_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let host = long_step_host(dir.path(), &attempts).build().await?;
    let before = host.start::<Echo>("before", ()).await?;
    within(LIMIT, "before waits", before.wait_until_suspended()).await??;

    let big = host.start::<LongStep>("big", "s".repeat(70_000)).await?;
    // Its outcome (a step refused, or failed and retried) is the other test's.
    let ended = within(LIMIT, "the big run's end", big.result()).await?;
    not_a_panic_or_hang("the big run", &ended);

    // The host still works: the waiting run takes its signal, a new run completes.
    within(LIMIT, "signal to before", before.signal("go", &1u32, "b-1"))
        .await?
        .map_err(|e| anyhow::anyhow!("a signal to another run: {e:?}"))?;
    assert_eq!(within(LIMIT, "before", before.result()).await??, 2);
    let after = within(LIMIT, "start after", host.start::<Echo>("after", ())).await??;
    within(LIMIT, "after waits", after.wait_until_suspended()).await??;
    within(LIMIT, "signal to after", after.signal("go", &2u32, "a-1")).await??;
    assert_eq!(within(LIMIT, "after", after.result()).await??, 3);
    within(LIMIT, "shutdown", host.shutdown()).await??;

    // And the store reopens with every run as it was.
    let host = long_step_host(dir.path(), &attempts).build().await?;
    assert_eq!(host.handle::<Echo>("before").result().await?, 2);
    assert_eq!(host.handle::<Echo>("after").result().await?, 3);
    within(LIMIT, "shutdown", host.shutdown()).await??;
    Ok(())
}

/// Names a signal wait with a huge name, and times out the wait.
struct LongSignal;
impl Workflow for LongSignal {
    const NAME: &'static str = "acc-long-signal";
    type Input = String;
    type Output = Option<u32>;
    async fn run(&self, ctx: Ctx, name: String) -> reel::Result<Option<u32>> {
        ctx.wait_for_signal_timeout(&name, Duration::from_secs(3600))
            .await
    }
}

/// A huge signal name (and a huge signal id) delivers like any other, or is refused
/// with a typed error; either way no other run is harmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_signal_name_and_id_harm_no_other_run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(LongSignal)
        .register(Echo)
        .build()
        .await?;
    let other = host.start::<Echo>("other", ()).await?;
    within(LIMIT, "other waits", other.wait_until_suspended()).await??;

    let name = "n".repeat(70_000);
    let run = host.start::<LongSignal>("long", name.clone()).await?;
    within(LIMIT, "long waits", run.wait_until_suspended()).await??;
    let id = "i".repeat(70_000);
    let sent = run.signal(&name, &5u32, &id).await;
    not_a_panic_or_hang("the huge signal", &sent);
    if sent.is_ok() {
        assert_eq!(within(LIMIT, "long", run.result()).await??, Some(5));
    }
    other.signal("go", &1u32, "o-1").await?;
    assert_eq!(within(LIMIT, "other", other.result()).await??, 2);
    host.shutdown().await?;
    Ok(())
}

/// A value whose serialization always fails.
#[derive(Debug, serde::Deserialize)]
struct Unserializable;
impl serde::Serialize for Unserializable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("Unserializable never serializes"))
    }
}

/// Completes with an output that does not serialize.
struct BadEnd {
    bodies: Counter,
}
impl Workflow for BadEnd {
    const NAME: &'static str = "acc-bad-end";
    type Input = ();
    type Output = Unserializable;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Unserializable> {
        ctx.step("work", |_| async {
            self.bodies.bump();
            Ok::<_, String>(1u32)
        })
        .await?;
        Ok(Unserializable)
    }
}

/// A workflow whose `Output` does not serialize: its end cannot be recorded as it is.
/// `result()` answers with a typed error naming the codec problem (not a hang, not a
/// panic), the run does not rerun its finished step, and another run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_that_does_not_serialize_is_a_typed_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let bodies = Counter::default();
    let open = |bodies: Counter| {
        Host::builder()
            .path(dir.path())
            .register(BadEnd { bodies })
            .register(Echo)
            .restart_limit(2, Duration::from_secs(60))
            .build()
    };
    let host = open(bodies.clone()).await?;
    let other = host.start::<Echo>("other", ()).await?;
    let bad = host.start::<BadEnd>("bad", ()).await?;
    let ended = within(LIMIT, "the bad run's end", bad.result()).await?;
    match &ended {
        Err(e) => assert!(
            e.to_string().contains("never serializes"),
            "the error does not name the codec problem: {e:?}"
        ),
        Ok(v) => panic!("an unserializable output was returned: {v:?}"),
    }
    let status = bad.status().await?;
    assert!(
        !matches!(
            status,
            RunStatus::Running | RunStatus::Suspended { .. } | RunStatus::Completed
        ),
        "{status:?}"
    );
    assert_eq!(bodies.get(), 1, "the finished step ran again");
    other.signal("go", &1u32, "o-1").await?;
    assert_eq!(within(LIMIT, "other", other.result()).await??, 2);
    host.shutdown().await?;

    // Reopened, the bad run answers the same way and still reruns nothing.
    let host = open(bodies.clone()).await?;
    let again = within(
        LIMIT,
        "the bad run again",
        host.handle::<BadEnd>("bad").result(),
    )
    .await?;
    assert!(again.is_err(), "{again:?}");
    assert_eq!(
        bodies.get(),
        1,
        "the finished step ran again after a restart"
    );
    host.shutdown().await?;
    Ok(())
}

/// Reading a finished run's result as a type its output does not decode into,
/// through the untyped handle, is `Error::Codec`; the run is unchanged and reads
/// right with the right type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untyped_result_read_as_the_wrong_type_is_a_codec_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Echo).await?;
    let run = host.start::<Echo>("e", ()).await?;
    run.signal("go", &41u32, "s").await?;
    assert_eq!(within(LIMIT, "e", run.result()).await??, 42);
    let any = host.run("e");
    match any.result::<String>().await {
        Err(Error::Codec(m)) => assert!(!m.is_empty()),
        other => panic!("expected Codec, got {other:?}"),
    }
    match any
        .result::<Vec<std::collections::BTreeMap<String, bool>>>()
        .await
    {
        Err(Error::Codec(_)) => {}
        other => panic!("expected Codec, got {other:?}"),
    }
    assert_eq!(any.result::<u32>().await?, 42);
    assert_eq!(any.status().await?, RunStatus::Completed);
    host.shutdown().await?;
    Ok(())
}

/// A step whose body panics with a payload that is not a string, on its first
/// attempt only.
struct OddPanic {
    attempts: Counter,
}
impl Workflow for OddPanic {
    const NAME: &'static str = "acc-odd-panic";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let policy = RetryPolicy::default()
            .with_max_attempts(2)
            .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
        ctx.step_with("odd", policy, |s| {
            self.attempts.bump();
            async move {
                if s.attempt() == 1 {
                    std::panic::panic_any(17u64);
                }
                Ok::<_, String>(5u32)
            }
        })
        .await
    }
}

/// "A panicking body is a failed attempt", whatever the panic's payload: the
/// attempt is recorded failed, the retry succeeds, the host is unharmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_panicking_with_a_non_string_payload_is_a_failed_attempt() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = Counter::default();
    let host = Host::builder()
        .path(dir.path())
        .register(OddPanic {
            attempts: attempts.clone(),
        })
        .register(Echo)
        .build()
        .await?;
    let run = host.start::<OddPanic>("p", ()).await?;
    assert_eq!(within(LIMIT, "p", run.result()).await??, 5);
    assert_eq!(attempts.get(), 2);
    let failed: Vec<String> = run
        .events()
        .await?
        .into_iter()
        .filter(|e| e.kind() == "StepFailed")
        .map(|e| format!("{e:?}"))
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let other = host.start::<Echo>("other", ()).await?;
    other.signal("go", &1u32, "o").await?;
    assert_eq!(within(LIMIT, "other", other.result()).await??, 2);
    host.shutdown().await?;
    Ok(())
}

static ARMED_DROPS: AtomicU32 = AtomicU32::new(0);

/// Panics when dropped while armed.
struct Bomb {
    armed: AtomicBool,
}
impl Drop for Bomb {
    fn drop(&mut self) {
        if self.armed.load(Ordering::SeqCst) && !std::thread::panicking() {
            ARMED_DROPS.fetch_add(1, Ordering::SeqCst);
            panic!("Bomb dropped while the handler waited");
        }
    }
}

/// Holds an armed `Bomb` across a signal wait; disarms it before returning, so
/// only a handler future dropped mid-wait (passivation, cancel, shutdown) panics.
struct Bomber;
impl Workflow for Bomber {
    const NAME: &'static str = "acc-bomber";
    type Input = ();
    type Output = u32;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<u32> {
        let bomb = Bomb {
            armed: AtomicBool::new(true),
        };
        let got = ctx.wait_for_signal::<u32>("go").await;
        bomb.armed.store(false, Ordering::SeqCst);
        drop(bomb);
        got
    }
}

/// A handler whose future panics when dropped mid-wait: passivation, cancel and
/// shutdown drop it; none of them lets the panic reach the host, the run takes its
/// signal afterwards and completes, and another run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_panicking_in_drop_harms_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let open = || {
        Host::builder()
            .path(dir.path())
            .register(Bomber)
            .register(Echo)
            .passivate_after(Duration::from_millis(20))
            .build()
    };
    let host = open().await?;
    let other = host.start::<Echo>("other", ()).await?;
    let run = host.start::<Bomber>("b", ()).await?;
    let cancelled = host.start::<Bomber>("c", ()).await?;
    within(LIMIT, "b waits", run.wait_until_suspended()).await??;
    within(LIMIT, "c waits", cancelled.wait_until_suspended()).await??;
    // Passivation drops the waiting handlers' futures: wait until it has.
    within(LIMIT, "passivation", async {
        while ARMED_DROPS.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await?;
    run.signal("go", &3u32, "g").await?;
    assert_eq!(within(LIMIT, "b", run.result()).await??, 3);

    // Cancel drops one mid-wait too (woken, or already passivated).
    within(LIMIT, "cancel", cancelled.cancel("stop")).await??;
    assert!(matches!(cancelled.result().await, Err(Error::Cancelled(_))));

    // Shutdown with a live one waiting.
    let live = host.start::<Bomber>("live", ()).await?;
    within(LIMIT, "live waits", live.wait_until_suspended()).await??;
    other.signal("go", &1u32, "o").await?;
    assert_eq!(within(LIMIT, "other", other.result()).await??, 2);
    within(LIMIT, "shutdown", host.shutdown()).await??;

    let host = open().await?;
    let live = host.handle::<Bomber>("live");
    live.signal("go", &9u32, "l").await?;
    assert_eq!(within(LIMIT, "live", live.result()).await??, 9);
    assert_eq!(
        host.handle::<Bomber>("b").result().await?,
        3,
        "a finished run changed"
    );
    within(LIMIT, "shutdown", host.shutdown()).await??;
    Ok(())
}

/// Completes at once with its input.
struct Instant;
impl Workflow for Instant {
    const NAME: &'static str = "acc-instant";
    type Input = u32;
    type Output = u32;
    async fn run(&self, _: Ctx, n: u32) -> reel::Result<u32> {
        Ok(n)
    }
}

/// `signal_with_start` with bad input creates nothing and delivers nothing: a
/// reserved name (`ReservedName`), an id another workflow holds (`RunExists`, the
/// holder gets no signal), a payload that does not serialize (`Codec`), an unknown
/// workflow (`UnknownWorkflow`), a finished run (`RunFinished`, its log unchanged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_with_start_with_bad_input_creates_and_delivers_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Host::builder()
        .path(dir.path())
        .register(Echo)
        .register(Instant)
        .build()
        .await?;

    match host
        .signal_with_start::<Echo, _>("r", (), "approval:boss", &true, "s")
        .await
    {
        Err(Error::ReservedName(n)) => assert_eq!(n, "approval:boss"),
        other => panic!("expected ReservedName, got {:?}", other.map(|_| ())),
    }
    assert!(matches!(
        host.run("r").status().await,
        Err(Error::UnknownRun(_))
    ));

    match host
        .signal_with_start::<Echo, _>("u", (), "go", &Unserializable, "s")
        .await
    {
        Err(Error::Codec(_)) => {}
        other => panic!("expected Codec, got {:?}", other.map(|_| ())),
    }
    assert!(matches!(
        host.run("u").status().await,
        Err(Error::UnknownRun(_))
    ));

    match host
        .signal_with_start::<LongSignal, _>("n", "x".into(), "go", &1u32, "s")
        .await
    {
        Err(Error::UnknownWorkflow(w)) => assert_eq!(w, "acc-long-signal"),
        other => panic!("expected UnknownWorkflow, got {:?}", other.map(|_| ())),
    }
    assert!(matches!(
        host.run("n").status().await,
        Err(Error::UnknownRun(_))
    ));

    let holder = host.start::<Echo>("held", ()).await?;
    within(LIMIT, "held waits", holder.wait_until_suspended()).await??;
    match host
        .signal_with_start::<Instant, _>("held", 1, "go", &1u32, "s")
        .await
    {
        Err(Error::RunExists { run_id, workflow }) => {
            assert_eq!((run_id.as_str(), workflow.as_str()), ("held", "acc-echo"))
        }
        other => panic!("expected RunExists, got {:?}", other.map(|_| ())),
    }
    assert!(
        holder
            .events()
            .await?
            .iter()
            .all(|e| e.kind() != "SignalReceived"),
        "the holder got the refused call's signal"
    );

    let done = host.start::<Instant>("done", 4).await?;
    assert_eq!(within(LIMIT, "done", done.result()).await??, 4);
    let before = done.events().await?.len();
    match host
        .signal_with_start::<Instant, _>("done", 9, "go", &1u32, "s")
        .await
    {
        Err(Error::RunFinished(r)) => assert_eq!(r, "done"),
        other => panic!("expected RunFinished, got {:?}", other.map(|_| ())),
    }
    assert_eq!(done.events().await?.len(), before);
    assert_eq!(done.result().await?, 4);

    holder.signal("go", &1u32, "g").await?;
    assert_eq!(within(LIMIT, "held", holder.result()).await??, 2);
    host.shutdown().await?;
    Ok(())
}
