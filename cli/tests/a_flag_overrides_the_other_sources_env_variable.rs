//! `REEL_URL` and `REEL_STORE` are defaults for `--url` and `--store`. A user who
//! exports one of them must still be able to name the other source on the
//! command line for one command (as with `kubectl --context` over
//! `KUBECONFIG`, or `temporal --address` over `TEMPORAL_ADDRESS`): the explicit
//! flag wins, it is not refused as a conflict with the environment.

use std::process::Command;

#[test]
fn an_explicit_flag_beats_the_other_env_variable() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("missing");
    let missing = missing.to_str().expect("utf-8");

    // REEL_URL exported, --store given: the store is read (here: a clear "no store").
    let out = Command::new(env!("CARGO_BIN_EXE_reel"))
        .args(["--store", missing, "runs"])
        .env("REEL_URL", "http://127.0.0.1:1/admin")
        .env_remove("REEL_STORE")
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no store"),
        "--store should win over REEL_URL: {err}"
    );

    // REEL_STORE exported, --url given: the endpoint is asked (here: unreachable).
    let out = Command::new(env!("CARGO_BIN_EXE_reel"))
        .args(["--url", "http://127.0.0.1:1/admin", "runs"])
        .env("REEL_STORE", missing)
        .env_remove("REEL_URL")
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach"),
        "--url should win over REEL_STORE: {err}"
    );
    Ok(())
}

#[test]
fn both_flags_on_one_command_line_are_refused() -> anyhow::Result<()> {
    let out = Command::new(env!("CARGO_BIN_EXE_reel"))
        .args(["--url", "http://127.0.0.1:1/admin", "--store", "x", "runs"])
        .env_remove("REEL_URL")
        .env_remove("REEL_STORE")
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    Ok(())
}
