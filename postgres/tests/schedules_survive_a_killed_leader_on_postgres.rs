//! Schedules whose leader (a child process, `host-0`, leasing the schedules' ids'
//! partitions) is SIGKILLed while it fires them; the host of this process takes
//! its partitions over and goes on firing. Both hosts follow one test clock (the
//! child through a file). Each firing starts the run `<id>/<fire time ms>`:
//! - `AllowAll` with `CatchUp::All`: the clock jumps three fire times and the
//!   leader is killed as soon as the first of their runs exists (often between
//!   starting the runs and moving the schedule on); the taker starts the rest,
//!   without moving the clock, and none twice;
//! - `BufferOne`: the firing the leader held back behind a running run stays
//!   held across the kill (later ones are dropped) and across an update made on
//!   the taker, and starts there, with the update's input, once that run ends;
//! - `Skip` with `CatchUp::Last`: only the latest of the jumped fire times starts;
//! - after the takeover, a pause and a delete made on the taker hold, and the
//!   resume follows the catch-up policy.
//!
//! Failed before the fix in `src/schedule/scheduler.rs`: a host looked again at
//! the schedules it leads (leases move) on the host's clock, so under a test
//! clock the taker never fired a firing that was due when it took the schedule
//! over until the clock moved again.
//!
//! The runs that exist are exactly the expected firings, each completed, and each
//! firing's step recorded its last execution.
//!
//! Then the same again, in rounds, each with a new leader process killed at a
//! different point of a batch of `CatchUp::All` firings.

mod procs;
mod support;

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use procs::{Proc, epoch_ms};
use reel::testing::TestClock;
use reel::{CatchUp, Ctx, Host, Overlap, RunStatus, ScheduleSpec, Workflow};
use support::shared_clock;

const CHILD_ENV: &str = "REEL_PG_SCHEDULE_KILL_CHILD_DIR";
const TEST: &str = "schedules_survive_a_killed_leader_on_postgres";
const ROUNDS_ENV: &str = "REEL_PG_SCHEDULE_KILLS_CHILD_DIR";
const ROUNDS_TEST: &str = "schedules_survive_repeated_leader_kills_on_postgres";
const ROUNDS: u32 = 4;
/// Fire times a round jumps over at once.
const BATCH: u32 = 3;
const LIMIT: Duration = Duration::from_secs(60);
const MINUTE: Duration = Duration::from_secs(60);

fn start() -> SystemTime {
    // A multiple of a minute: fire times are T0 + k minutes.
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn at(k: u32) -> SystemTime {
    start() + k * MINUTE
}

fn run_of(id: &str, k: u32) -> String {
    let ms = at(k).duration_since(UNIX_EPOCH).expect("ms").as_millis();
    format!("{id}/{ms}")
}

/// One step that logs its execution (procs' side-file format) and returns a
/// fresh token; then, if `gated`, waits for the signal `go`.
#[derive(Clone)]
struct Fire {
    side: std::path::PathBuf,
    tag: String,
}

impl Workflow for Fire {
    const NAME: &'static str = "fire";
    type Input = bool;
    type Output = String;
    async fn run(&self, ctx: Ctx, gated: bool) -> reel::Result<String> {
        let (side, tag, run) = (self.side.clone(), self.tag.clone(), ctx.run_id().to_owned());
        let token = ctx
            .step("fire", move |s| {
                let (side, tag, run) = (side.clone(), tag.clone(), run.clone());
                async move {
                    let begin = epoch_ms();
                    let token = format!("{tag}|{}|{}", s.idempotency_key(), reel::Uuid::new_v4());
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
                    Ok::<_, std::io::Error>(token)
                }
            })
            .await?;
        if gated {
            let _: u32 = ctx.wait_for_signal("go").await?;
        }
        Ok(token)
    }
}

async fn open(dir: &Path, name: &str, clock: &TestClock) -> anyhow::Result<Host> {
    let url = std::fs::read_to_string(dir.join("url"))?;
    let store = support::join(&url, name).await?;
    Ok(Host::builder()
        .store(store)
        .clock(clock.clone())
        .register(Fire {
            side: dir.join("executions.log"),
            tag: name.to_owned(),
        })
        .build()
        .await?)
}

fn child(dir: &Path) {
    procs::runtime().block_on(async {
        let clock = TestClock::new(start());
        shared_clock::follow(clock.clone(), dir);
        let _host = open(dir, "host-0", &clock).await.expect("open");
        println!("joined");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
    });
}

/// Waits until the run exists and `check` holds of its status.
async fn until_run(host: &Host, id: &str, what: &str, check: impl Fn(&RunStatus) -> bool) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let status = host.run(id).status().await;
        if let Ok(s) = &status
            && check(s)
        {
            return;
        }
        assert!(Instant::now() < deadline, "{id} never {what}: {status:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn completed(s: &RunStatus) -> bool {
    matches!(s, RunStatus::Completed)
}

fn waiting(s: &RunStatus) -> bool {
    matches!(s, RunStatus::Suspended { .. })
}

/// Waits until the schedule's next fire time, as listed, is `k`.
async fn until_next_fire(host: &Host, id: &str, k: u32) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let info = host.schedules().await.expect("schedules");
        let next = info.iter().find(|i| i.id == id).and_then(|i| i.next_fire);
        if next == Some(at(k)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id}: next fire time stayed {next:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The runs (ids) of the database whose id starts with `<id>/`.
async fn runs_of(url: &str, id: &str) -> BTreeSet<String> {
    procs::query(
        url,
        &format!("SELECT run_id FROM reel_runs WHERE run_id LIKE '{id}/%'"),
    )
    .await
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[test]
fn schedules_survive_a_killed_leader_on_postgres() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let (rt, dir, url, leader) = procs::joined_process(TEST, CHILD_ENV, "sched_kill");
    let dir = dir.path();
    let clock = TestClock::new(start());
    let host = rt.block_on(async {
        let host = open(dir, "host-1", &clock).await.expect("host 1");
        let owners = support::spread_leases(&url, "host-", 2, 100).await;
        // Every schedule is led by the child; created here, by the other host.
        let id = |p: &str| procs::ids_on(&owners, 0, p, 1).remove(0);
        let (all, buf, skip) = (id("all"), id("buf"), id("skip"));
        let every = || ScheduleSpec::every(MINUTE);
        let within = CatchUp::All {
            within: Duration::from_secs(3600),
        };
        host.schedule::<Fire>(
            &all,
            every().overlap(Overlap::AllowAll).catch_up(within),
            false,
        )
        .await
        .expect("schedule all");
        host.schedule::<Fire>(&buf, every().overlap(Overlap::BufferOne), true)
            .await
            .expect("schedule buf");
        host.schedule::<Fire>(&skip, every().overlap(Overlap::Skip), false)
            .await
            .expect("schedule skip");
        (host, all, buf, skip)
    });
    let (host, all, buf, skip) = host;
    rt.block_on(async {
        // Two firings on the leader; the second of `buf` is held back behind its
        // first run (which waits for `go`).
        for k in 1..=2 {
            shared_clock::set(&clock, dir, at(k));
            until_run(&host, &run_of(&all, k), "completed", completed).await;
            until_run(&host, &run_of(&skip, k), "completed", completed).await;
        }
        until_run(&host, &run_of(&buf, 1), "waited", waiting).await;
        until_next_fire(&host, &buf, 3).await;
        // Three fire times at once; the leader dies once the first run exists.
        shared_clock::set(&clock, dir, at(5));
        let third = run_of(&all, 3);
        let deadline = Instant::now() + LIMIT;
        while procs::query(
            &url,
            &format!("SELECT 1 FROM reel_runs WHERE run_id = '{third}'"),
        )
        .await
        .is_empty()
        {
            assert!(Instant::now() < deadline, "the leader never fired at 5");
        }
    });
    leader.kill();
    rt.block_on(async {
        let started = runs_of(&url, &all).await.len();
        println!("killed with {started} runs of `all` started");
        // The taker goes on, the clock unmoved.
        for k in 3..=5 {
            until_run(&host, &run_of(&all, k), "completed", completed).await;
        }
        until_run(&host, &run_of(&skip, 5), "completed", completed).await;
        // Updated on the taker (no gate now): the held firing is kept, and
        // starts, with the new input, once the run before it ends.
        host.update_schedule::<Fire>(
            &buf,
            ScheduleSpec::every(MINUTE).overlap(Overlap::BufferOne),
            false,
        )
        .await
        .expect("update");
        host.run(&run_of(&buf, 1))
            .signal("go", &1u32, "go")
            .await
            .expect("go 1");
        until_run(&host, &run_of(&buf, 2), "completed", completed).await;
        until_next_fire(&host, &buf, 6).await;

        // Changes made on the taker, which now leads.
        host.pause_schedule(&skip).await.expect("pause");
        host.delete_schedule(&all).await.expect("delete");
        shared_clock::set(&clock, dir, at(6));
        until_run(&host, &run_of(&buf, 6), "completed", completed).await;
        host.resume_schedule(&skip).await.expect("resume");
        until_run(&host, &run_of(&skip, 6), "completed", completed).await;

        let expected = |id: &str, ks: &[u32]| -> BTreeSet<String> {
            ks.iter().map(|k| run_of(id, *k)).collect()
        };
        assert_eq!(runs_of(&url, &all).await, expected(&all, &[1, 2, 3, 4, 5]));
        assert_eq!(runs_of(&url, &buf).await, expected(&buf, &[1, 2, 6]));
        assert_eq!(runs_of(&url, &skip).await, expected(&skip, &[1, 2, 5, 6]));

        let mut recorded = HashMap::new();
        for id in [&all, &buf, &skip] {
            for run in runs_of(&url, id).await {
                let token: String = host.handle::<Fire>(&run).result().await.expect("result");
                recorded.insert(run, vec![token]);
            }
        }
        let problems = procs::not_last(&dir.join("executions.log"), &recorded);
        assert!(problems.is_empty(), "{problems:#?}");
        host.shutdown().await.expect("shutdown");
    });
}

#[test]
fn schedules_survive_repeated_leader_kills_on_postgres() {
    if let Ok(dir) = std::env::var(ROUNDS_ENV) {
        child(Path::new(&dir));
        return;
    }
    let rt = procs::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let url = rt.block_on(support::database("sched_kills"));
    std::fs::write(dir.join("url"), &url).expect("url file");
    let clock = TestClock::new(start());
    shared_clock::set(&clock, dir, start());
    let host = rt.block_on(open(dir, "host-1", &clock)).expect("host 1");
    let (mut k, mut runs) = (0, Vec::new());
    for round in 0..ROUNDS {
        let leader = Proc::spawn(ROUNDS_TEST, ROUNDS_ENV, dir, &[]);
        leader.until(LIMIT, |l| l.ends_with("joined"));
        let id = rt.block_on(async {
            let owners = support::spread_leases(&url, "host-", 2, 100).await;
            let id = procs::ids_on(&owners, 0, &format!("r{round}"), 1).remove(0);
            let spec = ScheduleSpec::every(MINUTE)
                .overlap(Overlap::AllowAll)
                .catch_up(CatchUp::All {
                    within: Duration::from_secs(3600),
                });
            host.schedule::<Fire>(&id, spec, false)
                .await
                .expect("schedule");
            // One firing on the leader, then a batch, killed once the
            // `round % BATCH`-th of its runs exists.
            shared_clock::set(&clock, dir, at(k + 1));
            until_run(&host, &run_of(&id, k + 1), "completed", completed).await;
            shared_clock::set(&clock, dir, at(k + 1 + BATCH));
            let kill_at = run_of(&id, k + 2 + round % BATCH);
            let deadline = Instant::now() + LIMIT;
            while procs::query(
                &url,
                &format!("SELECT 1 FROM reel_runs WHERE run_id = '{kill_at}'"),
            )
            .await
            .is_empty()
            {
                assert!(Instant::now() < deadline, "{kill_at} never started");
            }
            id
        });
        leader.kill();
        rt.block_on(async {
            let before = runs_of(&url, &id).await.len();
            for j in k + 2..=k + 1 + BATCH {
                until_run(&host, &run_of(&id, j), "completed", completed).await;
            }
            let want: BTreeSet<String> = (k + 1..=k + 1 + BATCH).map(|j| run_of(&id, j)).collect();
            assert_eq!(runs_of(&url, &id).await, want, "round {round}");
            println!("round {round}: killed with {before} of {} runs", want.len());
            host.delete_schedule(&id).await.expect("delete");
            runs.extend(want);
        });
        k += 1 + BATCH;
    }
    rt.block_on(async {
        let mut recorded = HashMap::new();
        for run in runs {
            let token: String = host.handle::<Fire>(&run).result().await.expect("result");
            recorded.insert(run, vec![token]);
        }
        let problems = procs::not_last(&dir.join("executions.log"), &recorded);
        assert!(problems.is_empty(), "{problems:#?}");
        host.shutdown().await.expect("shutdown");
    });
}
