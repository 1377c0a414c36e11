//! Test support: a private PostgreSQL cluster per test binary ([`PgCluster`]) and a
//! fresh database per test ([`database`]).
//!
//! The cluster is made with `initdb` in a temporary directory and served by
//! `postgres` on 127.0.0.1 and a free port; a watchdog shell stops it and removes the
//! directory once the test process is gone. With `REEL_PG_URL` set (a URL of a
//! role allowed to create databases) that server is used instead. Missing
//! binaries fail the test with the command that installs them.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub mod hosts;
pub mod outage;
pub mod shared_clock;

/// The command that installs the server binaries on Debian and Ubuntu.
pub const INSTALL: &str = "sudo apt-get update && sudo apt-get install -y postgresql";

/// A PostgreSQL server the tests of this binary share.
pub struct PgCluster {
    /// URL of the server without a database name: `postgres://user@host:port`.
    pub base: String,
    /// The watchdog shell serving the cluster started here (`None` for
    /// `REEL_PG_URL`); it outlives this process by design and stops the server.
    _watchdog: Option<std::process::Child>,
}

static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);
/// Whether a cluster started by [`cluster`] fsyncs (tests: no, they kill processes
/// rather than machines; the benchmark: yes, it measures commits).
pub static DURABLE: AtomicBool = AtomicBool::new(false);

/// The shared cluster, started on first use.
pub fn cluster() -> &'static PgCluster {
    CLUSTER.get_or_init(|| match std::env::var("REEL_PG_URL") {
        Ok(url) if !url.is_empty() => PgCluster {
            base: strip_database(&url),
            _watchdog: None,
        },
        // Off the test's runtime: starting waits with a runtime of its own.
        _ => std::thread::spawn(PgCluster::start)
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e)),
    })
}

/// A URL's server part: everything before the database path.
fn strip_database(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    match url[scheme_end..].find('/') {
        Some(i) => url[..scheme_end + i].to_owned(),
        None => url.to_owned(),
    }
}

/// The directory holding `initdb` and `postgres`: `PATH`, then Debian's
/// `/usr/lib/postgresql/<version>/bin` (newest first).
pub fn bin_dir() -> Option<PathBuf> {
    let has = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has(&dir) {
                return Some(dir);
            }
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| has(d))
        .collect();
    versions.sort();
    versions.pop()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The prefix that runs a server binary: they refuse to run as root, so as root
/// they run as the `postgres` user the package creates.
fn as_server_user() -> Vec<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if root {
        [
            "setpriv",
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
        ]
        .map(str::to_owned)
        .to_vec()
    } else {
        Vec::new()
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl PgCluster {
    fn start() -> PgCluster {
        let Some(bin) = bin_dir() else {
            panic!(
                "PostgreSQL server binaries (initdb, postgres) not found on PATH or under \
                 /usr/lib/postgresql/*/bin. Install them with `{INSTALL}`, run \
                 `scripts/test`, or set REEL_PG_URL to a server whose user may create databases"
            );
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("reel-pg-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("cluster directory");
        let prefix = as_server_user();
        if !prefix.is_empty() {
            let ok = Command::new("chown")
                .args(["postgres:postgres", dir.to_str().expect("utf-8 temp dir")])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown of {} to the postgres user failed", dir.display());
        }
        let data = dir.join("data");
        let mut initdb = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin.join("initdb"));
                c
            }
            None => Command::new(bin.join("initdb")),
        };
        let out = initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--no-locale",
            ])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let server = prefix
            .iter()
            .map(|p| shell_quote(p))
            .chain([
                shell_quote(&bin.join("postgres").to_string_lossy()),
                "-D".into(),
                shell_quote(&data.to_string_lossy()),
                "-p".into(),
                port.to_string(),
                "-k".into(),
                shell_quote(&dir.to_string_lossy()),
                format!(
                    "-c listen_addresses=127.0.0.1 -c fsync={} -c max_connections=200",
                    if DURABLE.load(Ordering::SeqCst) {
                        "on"
                    } else {
                        "off"
                    }
                ),
            ])
            .collect::<Vec<_>>()
            .join(" ");
        // The watchdog: serves until the test process is gone, then stops the server
        // (SIGINT: fast shutdown) and removes its directory.
        let script = format!(
            "{server} >{log} 2>&1 & pg=$!; \
             while kill -0 {pid} 2>/dev/null && kill -0 $pg 2>/dev/null; do sleep 0.2; done; \
             kill -INT $pg 2>/dev/null; wait $pg; rm -rf {dir}",
            log = shell_quote(&dir.join("server.log").to_string_lossy()),
            pid = std::process::id(),
            dir = shell_quote(&dir.to_string_lossy()),
        );
        let watchdog = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        let base = format!("postgres://postgres@127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && ready(&base) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept connections within 60 s; its log: {}",
                std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        PgCluster {
            base,
            _watchdog: Some(watchdog),
        }
    }
}

/// Whether the server answers a query (it accepts TCP before it accepts logins).
fn ready(base: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        match tokio_postgres::connect(&format!("{base}/postgres"), tokio_postgres::NoTls).await {
            Ok((client, conn)) => {
                tokio::spawn(conn);
                client.simple_query("SELECT 1").await.is_ok()
            }
            Err(_) => false,
        }
    })
}

/// Runs `sql` on the server's `postgres` database.
pub async fn admin(sql: &str) {
    let base = cluster().base.clone();
    let (client, conn) =
        tokio_postgres::connect(&format!("{base}/postgres"), tokio_postgres::NoTls)
            .await
            .expect("connect to the server");
    let task = tokio::spawn(conn);
    client.batch_execute(sql).await.expect(sql);
    drop(client);
    let _ = task.await;
}

/// A new, empty database; returns its URL.
pub async fn database(hint: &str) -> String {
    let name = format!(
        "reel_{}_{}_{}",
        hint.chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<String>(),
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::SeqCst)
    );
    admin(&format!("CREATE DATABASE {name}")).await;
    format!("{}/{name}", cluster().base)
}

/// Runs `sql` on the database at `url`.
pub async fn execute(url: &str, sql: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    client.batch_execute(sql).await.expect(sql);
    drop(client);
    let _ = task.await;
}

/// Waits (a minute at most) until `hosts` hosts named `<prefix><index>` each lease
/// at least `min_each` of the partitions of the database at `url`; then returns,
/// for each partition, the index of the host that owns it. Panics past the minute.
pub async fn spread_leases(url: &str, prefix: &str, hosts: usize, min_each: i64) -> Vec<usize> {
    leases_where(url, prefix, hosts, |counts| {
        counts.iter().all(|&count| count >= min_each)
    })
    .await
}

/// Waits (a minute at most) until `hosts` hosts named `<prefix><index>` lease all the
/// partitions and none holds more than its share, so that no partition moves again
/// while those hosts live; then returns, for each partition, the index of its owner.
/// Processes that each pick runs by owner from this agree on the same owners, which
/// [`spread_leases`] does not promise while shares are still evening out.
pub async fn settled_leases(url: &str, prefix: &str, hosts: usize) -> Vec<usize> {
    let share = i64::try_from(256_usize.div_ceil(hosts)).expect("share");
    leases_where(url, prefix, hosts, |counts| {
        counts.iter().sum::<i64>() == 256 && counts.iter().all(|&count| count <= share)
    })
    .await
}

async fn leases_where(
    url: &str,
    prefix: &str,
    hosts: usize,
    done: impl Fn(&[i64]) -> bool,
) -> Vec<usize> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let counts: Vec<i64> = client
            .query(
                "SELECT count(*) FROM reel_leases WHERE owner IS NOT NULL GROUP BY owner",
                &[],
            )
            .await
            .expect("leases")
            .iter()
            .map(|row| row.get(0))
            .collect();
        if counts.len() == hosts && done(&counts) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the hosts never shared the partitions out"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut owners = vec![0; 256];
    for row in client
        .query("SELECT part, owner FROM reel_leases", &[])
        .await
        .expect("leases")
    {
        let (part, owner): (i16, Option<String>) = (row.get(0), row.get(1));
        owners[part as usize] = owner
            .and_then(|o| o.strip_prefix(prefix).and_then(|i| i.parse().ok()))
            .unwrap_or(0);
    }
    drop(client);
    let _ = task.await;
    owners
}

/// The lease the cluster tests give their hosts: short, so a host that stops is
/// replaced within seconds.
pub const TEST_LEASE: Duration = Duration::from_millis(1500);

/// Joins the database at `url` as the host `name`, with [`TEST_LEASE`].
pub async fn join(url: &str, name: &str) -> anyhow::Result<std::sync::Arc<reel_postgres::PgStore>> {
    Ok(reel_postgres::PgStore::join(
        url,
        reel_postgres::ClusterConfig::new(name).lease_ttl(TEST_LEASE),
    )
    .await?)
}
