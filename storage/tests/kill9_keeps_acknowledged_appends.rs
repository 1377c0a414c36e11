//! kill -9 loses nothing that was acknowledged (invariants 1 and 7).
//!
//! The test binary re-executes itself as a child process (selected by the
//! `REEL_STORAGE_CHILD` environment variable) that appends durable events to several
//! runs from a few concurrent tasks and prints `ack <run> <seq>` after each
//! acknowledged append. The parent SIGKILLs it after a number of acks, reopens the
//! store and checks that every acknowledged record is there, that each run's log is
//! contiguous and decodes, and that each run's metadata and timer index match its
//! log (they were written in the same batches).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use reel_storage::{
    Append, Event, FjallStore, LogReader, LogWriter, MetaReader, Payload, RunMeta, RunState,
    TimerEntry, TimerReader,
};

const CHILD_ENV: &str = "REEL_STORAGE_CHILD";
const TEST_NAME: &str = "kill9_keeps_acknowledged_appends";
const TASKS: usize = 4;
const RUNS_PER_TASK: usize = 2;
const KILL_AFTER_ACKS: usize = 300;
/// The child stops by itself after this many appends per run, should the parent
/// never kill it.
const CHILD_CAP: u64 = 100_000;

fn run_name(task: usize, i: usize) -> String {
    format!("run-{task}-{i}")
}

fn event(run: &str, seq: u64) -> Event {
    if seq == 0 {
        return Event::RunStarted {
            workflow: "wf".into(),
            version: 1,
            input: Payload(run.as_bytes().to_vec()),
        };
    }
    Event::StepCompleted {
        id: format!("step#{seq}"),
        output: Payload(
            std::iter::repeat_n(seq.to_le_bytes(), 12)
                .flatten()
                .collect(),
        ),
    }
}

fn meta(run: &str, seq: u64) -> RunMeta {
    RunMeta {
        run_id: run.into(),
        workflow: "wf".into(),
        version: 1,
        state: RunState::Running,
        created_at: 0,
        updated_at: seq,
        parent: None,
        segment_start: 0,
        segment: 0,
        queue: None,
    }
}

fn timer(run: &str, seq: u64) -> TimerEntry {
    TimerEntry {
        fire_at: seq,
        run_id: run.into(),
        timer_id: "next".into(),
    }
}

fn append(run: &str, seq: u64) -> Append {
    Append {
        writer: None,
        at: None,
        run_id: run.into(),
        expected_seq: Some(seq),
        events: vec![event(run, seq)],
        meta: Some(meta(run, seq)),
        add_timers: vec![timer(run, seq)],
        remove_timers: seq
            .checked_sub(1)
            .map(|p| timer(run, p))
            .into_iter()
            .collect(),
        durable: true,
        mail: None,
        letters: Vec::new(),
    }
}

/// The child: appends until killed (or until stdout is gone).
fn child(dir: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = FjallStore::open(dir).expect("child: open");
        let mut tasks = Vec::new();
        for task in 0..TASKS {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let runs: Vec<String> = (0..RUNS_PER_TASK).map(|i| run_name(task, i)).collect();
                for seq in 0..CHILD_CAP {
                    for run in &runs {
                        store
                            .submit(append(run, seq))
                            .await
                            .unwrap_or_else(|e| panic!("child: {run}/{seq}: {e}"));
                        let mut out = std::io::stdout().lock();
                        if writeln!(out, "ack {run} {seq}")
                            .and_then(|()| out.flush())
                            .is_err()
                        {
                            // The parent is gone.
                            std::process::exit(0);
                        }
                    }
                }
            }));
        }
        for t in tasks {
            t.await.expect("child task");
        }
    });
}

/// Kills the child if the parent panics before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn record_ack(line: &str, acked: &mut HashMap<String, u64>) -> bool {
    let Some(rest) = line.strip_prefix("ack ") else {
        return false; // the test harness's own output
    };
    let (run, seq) = rest.split_once(' ').expect("ack line: `ack <run> <seq>`");
    let seq: u64 = seq.parse().expect("ack seq");
    let max = acked.entry(run.to_owned()).or_insert(seq);
    *max = (*max).max(seq);
    true
}

#[test]
fn kill9_keeps_acknowledged_appends() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = KillOnDrop(
        Command::new(exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child"),
    );
    let mut lines = BufReader::new(child.0.stdout.take().expect("child stdout")).lines();

    let mut acked: HashMap<String, u64> = HashMap::new();
    let mut acks = 0;
    while acks < KILL_AFTER_ACKS {
        match lines.next() {
            Some(line) => {
                if record_ack(&line.expect("read child stdout"), &mut acked) {
                    acks += 1;
                }
            }
            None => panic!(
                "child exited after {acks} acks: {:?}",
                child.0.wait().expect("wait")
            ),
        }
    }

    // SIGKILL on Unix: no destructors, no close, no final persist.
    child.0.kill().expect("kill child");
    let status = child.0.wait().expect("wait for child");
    assert!(!status.success(), "the child was killed: {status:?}");
    // Acks still in the pipe were printed after their appends were acknowledged too.
    for line in lines {
        let Ok(line) = line else { break };
        if record_ack(&line, &mut acked) {
            acks += 1;
        }
    }
    assert!(acks >= KILL_AFTER_ACKS);
    assert_eq!(
        acked.len(),
        TASKS * RUNS_PER_TASK,
        "every run was acknowledged at least once"
    );

    let store = FjallStore::open(dir.path()).expect("reopen after kill -9");
    let mut lens: Vec<(String, usize)> = acked
        .keys()
        .map(|run| (run.clone(), store.read_log(run).map_or(0, |l| l.len())))
        .collect();
    lens.sort();
    eprintln!("killed the child after {acks} acks; log lengths after reopen: {lens:?}");
    let timers = store.timers().expect("timers").items;
    for task in 0..TASKS {
        for i in 0..RUNS_PER_TASK {
            let run = run_name(task, i);
            let max_acked = acked[&run];
            let log = store
                .read_log(&run)
                .unwrap_or_else(|e| panic!("{run}: log must be contiguous and decode: {e}"));
            assert!(
                log.len() as u64 > max_acked,
                "{run}: acknowledged seq {max_acked} lost (log has {} events)",
                log.len()
            );
            for (seq, e) in log.iter().enumerate() {
                assert_eq!(e, &event(&run, seq as u64), "{run}/{seq}");
            }
            let last = log.len() as u64 - 1;
            // Metadata and timers were written in the same batches as the events.
            assert_eq!(
                store.get_run(&run).expect("get_run"),
                Some(meta(&run, last)),
                "{run}: metadata matches the log"
            );
            let mine: Vec<&TimerEntry> = timers.iter().filter(|t| t.run_id == run).collect();
            assert_eq!(
                mine,
                [&timer(&run, last)],
                "{run}: timer index matches the log"
            );
        }
    }
    assert_eq!(
        store.unfinished_runs().expect("unfinished").items.len(),
        TASKS * RUNS_PER_TASK
    );
}
