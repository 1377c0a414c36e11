//! The `reel` binary against a live admin endpoint, where the earlier CLI tests
//! do not go: `watch` follows a run through its continue-as-new segments to its
//! end (each record once, in order); `watch` of a run whose host shuts down
//! fails with the endpoint's message; operations the run's state or the input
//! refuses (fork past the end, fork onto a taken id, delete of a running run,
//! retry of a run that is not parked, a zero or unknown page argument) fail with
//! a non-zero exit and the endpoint's reason, and change nothing.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use reel::{Ctx, Host, RunStatus, Workflow};
use reel_inspector::{InspectorOptions, router};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(20);

/// Waits for `next` and continues as new until `n` reaches 0.
struct Segments;
impl Workflow for Segments {
    const NAME: &'static str = "segments";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("work", |_| async { Ok::<_, String>(()) }).await?;
        if n == 0 {
            return Ok(7);
        }
        let _: Value = ctx.wait_for_signal("next").await?;
        ctx.continue_as_new::<Segments>(n - 1).await
    }
}

/// Waits for `go`.
struct Waiter;
impl Workflow for Waiter {
    const NAME: &'static str = "waiter";
    type Input = ();
    type Output = Value;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Value> {
        ctx.step("prepare", |_| async { Ok::<_, String>(1) })
            .await?;
        ctx.wait_for_signal("go").await
    }
}

async fn serve(dir: &std::path::Path) -> anyhow::Result<(Host, String)> {
    let host = Host::builder()
        .path(dir)
        .register(Segments)
        .register(Waiter)
        .build()
        .await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/admin", listener.local_addr()?);
    let app = axum::Router::new().nest("/admin", router(host.clone(), InspectorOptions::default()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((host, url))
}

fn command(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_reel"));
    c.args(args).env_remove("REEL_URL").env_remove("REEL_STORE");
    c
}

fn reel(args: &[&str]) -> Output {
    tokio::task::block_in_place(|| command(args).output().expect("the reel binary runs"))
}

/// A running `reel watch`: its stdout lines arrive on a channel.
struct Watcher {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Watcher {
    fn spawn(args: &[&str]) -> Watcher {
        let mut child = command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the reel binary runs");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Watcher {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits until a printed line satisfies `pred`.
    async fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + LIMIT;
        loop {
            if self
                .seen
                .iter()
                .any(|l| serde_json::from_str(l).is_ok_and(|v: Value| pred(&v)))
            {
                return Ok(());
            }
            match self.lines.try_recv() {
                Ok(l) => self.seen.push(l),
                Err(_) if Instant::now() > deadline => {
                    anyhow::bail!("watch printed no {what}: {:?}", self.seen)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// Waits for the process to exit; its status and stderr, and every line.
    async fn exit(mut self) -> anyhow::Result<(std::process::ExitStatus, String, Vec<String>)> {
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                anyhow::bail!("reel watch did not exit; printed {:?}", self.seen);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut err)?;
        }
        // The reader thread ends with the pipe.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(l);
        }
        Ok((status, err, self.seen))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_every_segment_to_the_end() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (host, url) = serve(dir.path()).await?;
    let run = host.start::<Segments>("s", 3).await?;
    tokio::time::timeout(LIMIT, run.wait_until_suspended()).await??;
    let mut w = Watcher::spawn(&["--url", &url, "--json", "watch", "s"]);
    w.until("SignalAwaited", |r| r["kind"] == "SignalAwaited")
        .await?;
    for i in 0..3 {
        run.signal("next", &i, &format!("n{i}")).await?;
        // The segment after this one has begun.
        let segment = i + 1;
        let deadline = Instant::now() + LIMIT;
        while run.info().await?.segment < segment {
            assert!(Instant::now() < deadline, "segment {segment} never began");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert_eq!(tokio::time::timeout(LIMIT, run.result()).await??, 7);
    let (status, err, lines) = w.exit().await?;
    assert!(status.success(), "{status}: {err}");
    let records: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l))
        .collect::<Result<_, _>>()?;
    let seqs: Vec<u64> = records.iter().filter_map(|r| r["seq"].as_u64()).collect();
    let logged: Vec<u64> = run.records().await?.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, logged, "the watch printed each record once, in order");
    assert_eq!(
        records
            .iter()
            .filter(|r| r["kind"] == "ContinuedAsNew")
            .count(),
        3
    );
    assert_eq!(
        records.last().map(|r| r["kind"].clone()),
        Some("RunCompleted".into())
    );
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_the_endpoints_error_when_the_host_shuts_down() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (host, url) = serve(dir.path()).await?;
    let run = host.start::<Waiter>("w", ()).await?;
    tokio::time::timeout(LIMIT, run.wait_until_suspended()).await??;
    let mut w = Watcher::spawn(&["--url", &url, "--json", "watch", "w"]);
    w.until("SignalAwaited", |r| r["kind"] == "SignalAwaited")
        .await?;
    host.shutdown().await?;
    let (status, err, _) = w.exit().await?;
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("shut down"),
        "the watch's error should carry the endpoint's message: {err}"
    );
    Ok(())
}

fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_operations_fail_with_the_reason_and_change_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (host, url) = serve(dir.path()).await?;
    let w = host.start::<Waiter>("w", ()).await?;
    tokio::time::timeout(LIMIT, w.wait_until_suspended()).await??;
    let done = host.start::<Segments>("done", 0).await?;
    tokio::time::timeout(LIMIT, done.result()).await??;
    let end = done.records().await?.len() as u64;

    let err = failed(&reel(&[
        "--url",
        &url,
        "fork",
        "done",
        "--at",
        &(end + 5).to_string(),
        "--new-id",
        "f1",
    ]));
    assert!(
        err.contains("HTTP 409") && err.contains("past the end"),
        "{err}"
    );
    let err = failed(&reel(&[
        "--url", &url, "fork", "done", "--at", "1", "--new-id", "w",
    ]));
    assert!(err.contains("HTTP 409") && err.contains("taken"), "{err}");
    let err = failed(&reel(&[
        "--url", &url, "fork", "nope", "--at", "1", "--new-id", "f2",
    ]));
    assert!(err.contains("HTTP 404"), "{err}");
    let err = failed(&reel(&["--url", &url, "delete", "w"]));
    assert!(err.contains("HTTP 409"), "{err}");
    let err = failed(&reel(&["--url", &url, "retry", "done"]));
    assert!(err.contains("HTTP 409"), "{err}");
    let err = failed(&reel(&["--url", &url, "pause", "done"]));
    assert!(err.contains("HTTP 409"), "{err}");
    let err = failed(&reel(&["--url", &url, "runs", "--limit", "0"]));
    assert!(err.contains("HTTP 400"), "{err}");
    let err = failed(&reel(&["--url", &url, "runs", "--status", "bogus"]));
    assert!(
        err.contains("unknown status") && err.contains("HTTP 400"),
        "{err}"
    );
    let err = failed(&reel(&["--url", &url, "runs", "--order", "sideways"]));
    assert!(err.contains("HTTP 400"), "{err}");
    // clap's own refusals: exit code 2.
    for args in [
        &["--url", &url, "explode"][..],
        &["--url", &url, "runs", "--bogus"][..],
    ] {
        let out = reel(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let err = failed(&reel(&["--url", "http://127.0.0.1:1/admin", "runs"]));
    assert!(err.contains("cannot reach"), "{err}");

    // Nothing changed.
    assert!(matches!(w.status().await?, RunStatus::Suspended { .. }));
    assert_eq!(done.status().await?, RunStatus::Completed);
    for id in ["f1", "f2"] {
        assert!(matches!(
            host.run(id).status().await,
            Err(reel::Error::UnknownRun(_))
        ));
    }
    assert_eq!(host.count().await?.values().sum::<u64>(), 2);
    host.shutdown().await?;
    Ok(())
}
