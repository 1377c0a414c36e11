//! Helpers of the multi-process cluster tests: a workflow whose step bodies log
//! which process ran them and when (`Tagged`), the check of that log against
//! what the runs recorded, and a host process started from this test binary
//! whose stdout is read line by line without blocking the test.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reel::{Ctx, Workflow};

pub fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `steps` steps; each takes `busy`, appends
/// `<tag>\t<run>\t<key>\t<token>\t<begin ms>\t<end ms>` to `side` and returns
/// the token `<tag>|<key>|<uuid>`; a durable sleep of `pause` after every
/// `pause_every`-th. Prints `exec <tag> <run>` per execution.
#[derive(Clone)]
pub struct Tagged {
    pub side: PathBuf,
    pub tag: String,
    pub steps: usize,
    pub busy: Duration,
    pub pause_every: usize,
    pub pause: Duration,
}

impl Workflow for Tagged {
    const NAME: &'static str = "tagged";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let mut tokens = Vec::new();
        for i in 0..self.steps {
            let run = ctx.run_id().to_owned();
            let token = ctx
                .step("s", |s| {
                    let (side, tag, run, busy) =
                        (self.side.clone(), self.tag.clone(), run.clone(), self.busy);
                    async move {
                        let begin = epoch_ms();
                        if !busy.is_zero() {
                            tokio::time::sleep(busy).await;
                        }
                        let token =
                            format!("{tag}|{}|{}", s.idempotency_key(), reel::Uuid::new_v4());
                        let line = format!(
                            "{tag}\t{run}\t{}\t{token}\t{begin}\t{}\n",
                            s.idempotency_key(),
                            epoch_ms()
                        );
                        let mut f = std::fs::OpenOptions::new()
                            .append(true)
                            .create(true)
                            .open(&side)?;
                        f.write_all(line.as_bytes())?;
                        println!("exec {tag} {run}");
                        Ok::<_, std::io::Error>(token)
                    }
                })
                .await?;
            tokens.push(token);
            if (i + 1) % self.pause_every.max(1) == 0 {
                ctx.sleep(self.pause).await?;
            }
        }
        Ok(tokens)
    }
}

/// One execution of a step body, as logged.
#[derive(Clone, Debug)]
pub struct Execution {
    pub tag: String,
    pub run: String,
    pub key: String,
    pub token: String,
    pub begin: u64,
    pub end: u64,
}

/// The executions in `side`, in the order written (torn lines skipped).
pub fn executions(side: &Path) -> Vec<Execution> {
    let text = std::fs::read_to_string(side).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let [tag, run, key, token, begin, end] = f[..] else {
                return None;
            };
            Some(Execution {
                tag: tag.to_owned(),
                run: run.to_owned(),
                key: key.to_owned(),
                token: token.to_owned(),
                begin: begin.parse().ok()?,
                end: end.parse().ok()?,
            })
        })
        .collect()
}

/// The key a token names.
pub fn key_of(token: &str) -> &str {
    token.split('|').nth(1).unwrap_or_default()
}

/// The tag (process) a token names.
pub fn tag_of(token: &str) -> &str {
    token.split('|').next().unwrap_or_default()
}

/// Problems: a recorded token that is not the last execution of its step (a body
/// that ended after the record was made), by run.
pub fn not_last(side: &Path, recorded: &HashMap<String, Vec<String>>) -> Vec<String> {
    let mut last: HashMap<String, Execution> = HashMap::new();
    for e in executions(side) {
        last.insert(e.key.clone(), e);
    }
    let mut problems = Vec::new();
    for (run, tokens) in recorded {
        for token in tokens {
            match last.get(key_of(token)) {
                Some(e) if &e.token == token => {}
                Some(e) => problems.push(format!(
                    "{run}: step {} recorded {token}, but {} ran it again afterwards \
                     (began {} ms, ended {} ms)",
                    key_of(token),
                    e.tag,
                    e.begin,
                    e.end
                )),
                None => problems.push(format!("{run}: {token} never logged")),
            }
        }
    }
    problems.sort();
    problems
}

/// A host process: this test binary run again as `test`, with `env` naming `dir`.
pub struct Proc {
    pub child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    pub fn spawn(test: &str, env: &str, dir: &Path, extra: &[(&str, &str)]) -> Proc {
        let mut cmd = Command::new(std::env::current_exe().expect("exe"));
        cmd.args([
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
            "--include-ignored",
        ])
        .env(env, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn a host process");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines }
    }

    /// Reads lines until `done` says so (given each line); panics past `limit`.
    pub fn until(&self, limit: Duration, mut done: impl FnMut(&str) -> bool) {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if done(&line) {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("the host process went quiet"),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the host process ended early")
                }
            }
        }
    }

    /// Drops the lines read so far, then waits for `n` new ones starting with
    /// `prefix` (proof that the process made progress).
    pub fn progress(&self, prefix: &str, n: usize) {
        while self.lines.try_recv().is_ok() {}
        let mut seen = 0;
        self.until(Duration::from_secs(30), |l| {
            seen += usize::from(l.starts_with(prefix));
            seen >= n
        });
    }

    /// SIGKILL, and reaped.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn signal(&self, sig: i32) {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig})");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The runtime of a host process and of a test's checks.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Polls `check` every 20 ms until it holds; panics with `what` past `limit`.
pub async fn until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sessions of the database at `url` other than the asking one in this state.
pub async fn sessions_in(url: &str, states: &[&str]) -> i64 {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let states: Vec<String> = states.iter().map(|s| (*s).to_owned()).collect();
    let n = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid() AND state = ANY($1)",
            &[&states],
        )
        .await
        .expect("sessions")
        .get(0);
    drop(client);
    let _ = task.await;
    n
}

/// One query's rows on the database at `url`.
pub async fn query(url: &str, sql: &str) -> Vec<tokio_postgres::Row> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let rows = client.query(sql, &[]).await.expect(sql);
    drop(client);
    let _ = task.await;
    rows
}

/// `count` ids `<prefix>-<n>` on partitions of host `owner` (`owners`: each
/// partition's owner, by index).
pub fn ids_on(owners: &[usize], owner: usize, prefix: &str, count: usize) -> Vec<String> {
    (0..)
        .map(|n| format!("{prefix}-{n}"))
        .filter(|id| owners[reel_postgres::partition_of(id) as usize] == owner)
        .take(count)
        .collect()
}

/// Polls the database, with no pause (a host is to be killed the moment it
/// happens), until some run whose id starts with `prefix` has `status`; panics
/// with "the `what` never ended" after 30 s.
pub async fn until_one_ended(url: &str, prefix: &str, status: &str, what: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let deadline = Instant::now() + Duration::from_secs(30);
    let like = format!("{prefix}%");
    loop {
        let done: i64 = client
            .query_one(
                "SELECT count(*) FROM reel_runs WHERE run_id LIKE $1 AND status = $2",
                &[&like, &status],
            )
            .await
            .expect("count")
            .get(0);
        if done > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the {what} never ended");
    }
    drop(client);
    let _ = task.await;
}

/// Gives every child of `pairs` (parent, child) 20 s from now, all at once, to
/// end cancelled; the ones that did not, with their state and their parent's.
pub async fn not_cancelled(host: &reel::Host, pairs: &[(String, String)]) -> Vec<String> {
    let waits = pairs.iter().map(|(p, c)| async move {
        let run = host.run(c);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match run.status().await {
                Ok(reel::RunStatus::Cancelled) => return None,
                Ok(reel::RunStatus::Suspended { .. } | reel::RunStatus::Running) => {}
                other => return Some(format!("{c}: {other:?}")),
            }
            if Instant::now() > deadline {
                return Some(format!(
                    "{c}: still {:?}, its parent {p} {:?}",
                    run.status().await,
                    host.run(p).status().await
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    futures::future::join_all(waits)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// The body of a host process that only has to be there: joins with `open`,
/// says `joined`, and idles until it is killed.
pub fn idle_host<F: std::future::Future<Output = anyhow::Result<reel::Host>>>(open: F) {
    runtime().block_on(async {
        let _host = open.await.expect("open");
        println!("joined");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// A fresh database `db` (its URL also in `dir`'s `url` file, for host
/// processes) and a host process, this test binary run again as `test` with
/// `env` set to `dir`, once it has joined.
pub fn joined_process(
    test: &str,
    env: &str,
    db: &str,
) -> (tokio::runtime::Runtime, tempfile::TempDir, String, Proc) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = rt.block_on(crate::support::database(db));
    std::fs::write(dir.path().join("url"), &url).expect("url file");
    let process = Proc::spawn(test, env, dir.path(), &[]);
    process.until(Duration::from_secs(60), |l| l.ends_with("joined"));
    (rt, dir, url, process)
}
