//! Crash torture on the embedded fjall store: the harness is `torture/mod.rs`
//! (what it runs and checks is described there).

#[allow(unreachable_pub)]
mod torture;

#[test]
fn crash_torture() {
    torture::run(torture::Backend {
        test: "crash_torture",
        prepare: None,
        store: None,
        kill_ms: torture::KILL_MS,
    });
}
