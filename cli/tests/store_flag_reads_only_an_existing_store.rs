//! `reel --store DIR` reads a store directory, read-only. Pointed at a directory
//! that holds no store (an empty one, a project directory by a typo), it must say
//! so and fail, not create a store there and report "no runs"; pointed at a file
//! or a missing path it fails the same way.

use std::process::{Command, Output};

fn reel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reel"))
        .args(args)
        .env_remove("REEL_URL")
        .env_remove("REEL_STORE")
        .output()
        .expect("the reel binary runs")
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("readable")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_missing_path_or_a_file_is_no_store() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("nope");
    let file = dir.path().join("file.txt");
    std::fs::write(&file, "not a store")?;
    for path in [&missing, &file] {
        let out = reel(&["--store", path.to_str().expect("utf-8"), "runs"]);
        assert!(!out.status.success(), "{path:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no store"), "{err}");
    }
    assert!(!missing.exists());
    assert_eq!(std::fs::read_to_string(&file)?, "not a store");
    Ok(())
}

#[test]
fn a_directory_without_a_store_is_refused_and_left_as_it_was() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // A directory with something else in it (a project directory).
    std::fs::write(dir.path().join("Cargo.toml"), "[package]\n")?;
    let before = entries(dir.path());
    for args in [
        &["runs"][..],
        &["--json", "runs"][..],
        &["show", "a"][..],
        &["events", "a"][..],
    ] {
        let mut all = vec!["--store", dir.path().to_str().expect("utf-8")];
        all.extend_from_slice(args);
        let out = reel(&all);
        assert!(
            !out.status.success(),
            "{args:?} succeeded on a directory with no store: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(
            entries(dir.path()),
            before,
            "`reel --store` ({args:?}) wrote into a directory that held no store"
        );
    }
    Ok(())
}
