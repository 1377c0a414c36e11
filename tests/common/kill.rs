//! SIGKILL rounds for crash tests: the test binary runs itself again as a child
//! process (one test, with an environment variable naming the data directory) and
//! kills it at a random moment, several times over the same data.
// Also compiled by path into tests that use only part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// When to kill the child: after `min + (random % spread)` lines equal to (or
/// starting with) `marker` on its stdout, unless it prints `done` first.
pub struct Rounds<'a> {
    /// The test to run in the child (`--exact`).
    pub test: &'a str,
    /// The environment variable that tells the test it is the child.
    pub env: &'a str,
    pub rounds: usize,
    pub marker: &'a str,
    pub done: &'a str,
    pub min: usize,
    pub spread: usize,
}

impl Rounds<'_> {
    /// Runs the rounds over `dir`; stops early once the child finishes on its own.
    /// Returns how many times the child was killed (the seed is printed, so a
    /// failure can be told apart from the kill points that led to it).
    pub fn run(&self, dir: &Path) -> usize {
        let mut seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7);
        println!("seed {seed}");
        let mut kills = 0;
        for round in 0..self.rounds {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let kill_after = self.min + (seed >> 33) as usize % self.spread.max(1);
            let mut child = Command::new(std::env::current_exe().expect("exe"))
                .args(["--exact", self.test, "--nocapture", "--test-threads=1"])
                .env(self.env, dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn child");
            let stdout = child.stdout.take().expect("stdout");
            let (mut seen, mut finished) = (0, false);
            // Held until the child is killed: a pipe closed before would make
            // the child's next print fail, and it would exit on its own.
            let mut lines = BufReader::new(stdout).lines();
            for line in &mut lines {
                let Ok(line) = line else { break };
                if line.starts_with(self.marker) {
                    seen += 1;
                    if seen == kill_after {
                        break;
                    }
                }
                if line == self.done {
                    finished = true;
                    break;
                }
            }
            if finished {
                // Read to the end, so its last prints (the test harness's) land.
                for _ in &mut lines {}
            } else {
                child.kill().expect("SIGKILL"); // SIGKILL on Unix
                kills += 1;
            }
            drop(lines);
            let status = child.wait().expect("wait");
            match finished {
                true => println!("round {round}: finished on its own ({status})"),
                false => println!(
                    "round {round}: killed after {seen} `{}` lines ({status})",
                    self.marker
                ),
            }
            if finished {
                break;
            }
        }
        kills
    }
}

/// The runtime a kill test's child and its parent's check run on: two workers,
/// timers and I/O on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The killed child's whole life, on a runtime of its own: opens the host, runs
/// `drive` on it (what it returns is dropped), prints `all-done` (after which the
/// rounds stop) and shuts the host down.
pub fn drive_child<T>(
    open: impl Future<Output = reel::Result<reel::Host>>,
    drive: impl AsyncFnOnce(&reel::Host) -> T,
) {
    runtime().block_on(async {
        let host = open.await.expect("open");
        drive(&host).await;
        println!("all-done");
        std::io::Write::flush(&mut std::io::stdout()).ok();
        host.shutdown().await.expect("shutdown");
    });
}
