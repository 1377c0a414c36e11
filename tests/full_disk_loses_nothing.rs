//! Invariant 8, full disk: a child process whose file writes start failing (an
//! RLIMIT_FSIZE cap makes write(2) fail with EFBIG, as a full disk fails it with
//! ENOSPC) gets typed storage errors and no panic reaches the host; after it exits,
//! a host without the cap reopens the store and every run that was acknowledged is
//! intact, and every unfinished run resumes and completes.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use reel::{Ctx, Error, RunStatus, Workflow};

const CHILD_ENV: &str = "REEL_FULL_DISK_CHILD_DIR";

struct Fill;
impl Workflow for Fill {
    const NAME: &'static str = "fill";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let mut total = 0;
        for i in 0..4 {
            // ~2 KB per step output, so the cap is reached quickly.
            let blob: String = ctx
                .step(
                    "blob",
                    |_| async move { Ok::<_, String>("x".repeat(2048 + i)) },
                )
                .await?;
            total += blob.len() as u32;
        }
        Ok(total + n)
    }
}

/// Caps the size any file of this process may reach: writes past it fail with
/// EFBIG (SIGXFSZ ignored), as they fail with ENOSPC on a full disk. fjall
/// preallocates its journal, so the cap is set once the store is open; the journal
/// is then written from offset 0 and fails at the cap.
fn cap_file_size(bytes: u64) {
    // SAFETY: plain libc calls with valid arguments.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let cap = libc::rlimit {
            rlim_cur: bytes,
            rlim_max: bytes,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &cap), 0);
    }
}

fn child(dir: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let host = match common::hosts::open(dir, Fill).await {
            Ok(h) => h,
            Err(e) => {
                println!("open-error {e}");
                return;
            }
        };
        cap_file_size(1 << 20);
        for i in 0..2_000u32 {
            let id = format!("f{i}");
            let outcome = match host.start::<Fill>(&id, i).await {
                Ok(h) => h.result().await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(v) => println!("ack {id} {v}"),
                Err(e) => {
                    let typed = matches!(e, Error::Storage(_) | Error::Crashed(_));
                    println!("error typed={typed} {e}");
                    break;
                }
            }
        }
        let _ = host.shutdown().await;
        println!("child-exit");
    });
}

#[test]
fn full_disk_loses_nothing() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "full_disk_loses_nothing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .expect("child");
    assert!(
        out.status.success(),
        "the child exited cleanly: {:?}",
        out.status
    );
    let mut acked = Vec::new();
    let mut error = None;
    for line in BufReader::new(out.stdout.as_slice())
        .lines()
        .map_while(Result::ok)
    {
        if let Some(rest) = line.strip_prefix("ack ") {
            let (id, v) = rest.split_once(' ').expect("ack line");
            acked.push((id.to_owned(), v.parse::<u32>().expect("value")));
        } else if line.starts_with("error ") || line.starts_with("open-error ") {
            error = Some(line);
        }
    }
    let error = error.expect("the writes hit the cap");
    assert!(error.contains("typed=true"), "{error}");
    assert!(
        !acked.is_empty(),
        "some runs completed before the disk filled"
    );
    println!("{} runs acknowledged before: {error}", acked.len());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let host = common::hosts::open(dir.path(), Fill).await.expect("reopen");
        for (id, v) in &acked {
            let h = host.handle::<Fill>(id);
            assert_eq!(
                h.status().await.expect("status"),
                RunStatus::Completed,
                "{id}"
            );
            assert_eq!(h.result().await.expect("result"), *v, "{id}");
        }
        // Whatever was in flight when the writes failed resumes now (parked runs are
        // retried by a new host) and completes.
        for info in host.runs().await.expect("runs") {
            let out = host.handle::<Fill>(&info.run_id).result().await;
            assert!(out.is_ok(), "{}: {out:?}", info.run_id);
        }
        host.shutdown().await.expect("shutdown");
    });
}
