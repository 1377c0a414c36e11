//! The tests of `acceptance_pg_restarts` on partitions moving while runs
//! restart, continue-as-new right after a restart, and a step recorded beside a
//! panic (its helpers stay in the test file).

use crate::*;

/// Steps `tick` of 20 ms until one returns that it is done; the handler panics
/// once after every tick. Returns the tags (`<host>@<leaving>@<uuid>`) its ticks
/// recorded.
#[derive(Clone)]
struct Ticker(Marks);

impl Workflow for Ticker {
    const NAME: &'static str = "ticker";
    type Input = ();
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<Vec<String>> {
        let mut tags = Vec::new();
        loop {
            let (done, tag) = ctx
                .step("tick", |s| async move {
                    let leaving = LEAVING.load(Ordering::SeqCst);
                    let tag = format!("{}@{leaving}@{}", self.0.host, reel::Uuid::new_v4());
                    self.0.ran(s.idempotency_key().to_owned(), tag.clone());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok::<_, String>((TICKERS_DONE.load(Ordering::SeqCst), tag))
                })
                .await?;
            tags.push(tag);
            if self.0.first(format!("{}/{}", ctx.run_id(), tags.len())) {
                panic!("handler bug after tick {}", tags.len());
            }
            if done {
                return Ok(tags);
            }
        }
    }
}

/// Runs that panic after every step, on host-a alone; host-b joins and takes half
/// of the partitions (handed back with the bodies under way recorded), then
/// host-a shuts down and host-b takes the rest, all while the runs keep
/// restarting. No body ran twice across the hand-back; across the shutdown only a
/// body it interrupted ran again (documented on `Host::shutdown`), and every
/// recorded tick is its body's last execution. Ports duroxide's multi-worker
/// tests and Temporal's worker restarts with several pollers. (It found a bug:
/// an actor restarted by its supervisor during the hand-back forgot its
/// partition was being given back and began a step body, which the hand-back
/// then cut, and host-b ran again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitions_move_both_ways_while_runs_restart() -> anyhow::Result<()> {
    let url = support::database("restarts_rebalance").await;
    let marks = Marks::default();
    let a = open(&url, "host-a", Ticker(marks.on("host-a"))).await?;
    support::spread_leases(&url, "host-", 1, 256).await;
    const RUNS: usize = 12;
    let ids: Vec<String> = (0..RUNS).map(|i| format!("tick-{i}")).collect();
    for id in &ids {
        a.start::<Ticker>(id, ()).await?;
    }
    let b = open(&url, "host-b", Ticker(marks.on("host-b"))).await?;
    support::spread_leases(&url, "host-", 2, 100).await;
    let ticks_of_b = async |more: usize| {
        let want = marks.ran_by("host-b") + more;
        let ticked = || async { marks.ran_by("host-b") >= want };
        until("host-b ticks", Duration::from_secs(60), ticked).await;
    };
    ticks_of_b(2 * RUNS).await;
    LEAVING.store(1, Ordering::SeqCst);
    a.shutdown().await?;
    ticks_of_b(2 * RUNS).await;
    TICKERS_DONE.store(true, Ordering::SeqCst);
    let mut moved = 0;
    for id in &ids {
        let tags = result_of::<Ticker>(&b, id).await??;
        let ev = b.run(id).events().await?;
        assert_eq!(done(&ev, "tick"), tags.len(), "{id}: {ev:?}");
        let bodies = marks.bodies.lock().expect("bodies");
        let mine: Vec<_> = bodies
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{id}/")))
            .collect();
        assert_eq!(tags.len(), mine.len(), "{id}: ticks and tick bodies");
        for (key, ran) in &mine {
            // Run twice only when host-a's shutdown interrupted it; the last recorded.
            let interrupted = matches!(&ran[..], [first, again]
                if first.starts_with("host-a@") && again.starts_with("host-b@1"));
            let recorded = ran.last().is_some_and(|t| tags.contains(t));
            assert!(
                recorded && (ran.len() == 1 || interrupted),
                "{key}: {ran:?}"
            );
        }
        let on = |host: &str| tags.iter().any(|t| t.starts_with(host));
        moved += usize::from(on("host-a") && on("host-b@0"));
    }
    let twice = marks.bodies().1.len();
    println!("{moved} of {RUNS} runs moved at the hand-back; {twice} bodies cut by the shutdown");
    assert!(moved > 0, "no run moved at the hand-back");
    b.shutdown().await?;
    Ok(())
}

const SEGMENTS: u32 = 8;

/// One signal `s` per segment after a step `note`; the handler panics once per
/// segment right after taking the signal, so each continue-as-new comes straight
/// after a restart.
#[derive(Clone)]
struct Relay(Marks);

impl Workflow for Relay {
    const NAME: &'static str = "relay";
    type Input = (u32, Vec<u32>);
    type Output = (u32, Vec<u32>);
    async fn run(&self, ctx: Ctx, (seg, mut got): (u32, Vec<u32>)) -> reel::Result<Self::Output> {
        let key = format!("{}/{seg}", ctx.run_id());
        let body = || async {
            self.0.ran(key.clone(), self.0.host.clone());
            Ok::<_, String>(())
        };
        ctx.step("note", |_| body()).await?;
        got.push(ctx.wait_for_signal::<u32>("s").await?);
        if self.0.first(key.clone()) {
            panic!("handler bug before continuing {key} as new");
        }
        if (got.len() as u32) < SEGMENTS {
            return ctx.continue_as_new::<Relay>((seg + 1, got)).await;
        }
        Ok((seg + 1, got))
    }
}

/// Runs on host-1 that continue as new right after every supervisor restart,
/// fed a burst of signals through host-0 and host-2 by turn: the signals sent
/// ahead carry over from segment to segment, each is taken once and in order, and
/// each segment's step ran once. Ports Temporal's continue-as-new after a
/// workflow task failure with buffered signals (sdk-core `continue_as_new` integ
/// tests, several workers).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn continue_as_new_right_after_a_restart_keeps_letters() -> anyhow::Result<()> {
    let url = support::database("restarts_can").await;
    let marks = Marks::default();
    let (hosts, owners) = spread::<3>(&url, 80, async |url, name| {
        open(url, name, Relay(marks.on(name))).await
    })
    .await?;
    let ids = owned_by(&owners, 1, "relay", 3);
    for id in &ids {
        hosts[2].start::<Relay>(id, (0, Vec::new())).await?;
    }
    burst(&[&hosts[0], &hosts[2]], &ids, "s", SEGMENTS).await?;
    let n = SEGMENTS as usize;
    for id in &ids {
        let (segments, got) = result_of::<Relay>(&hosts[0], id).await??;
        assert_eq!((segments, got), (SEGMENTS, (0..SEGMENTS).collect()), "{id}");
        let ev = hosts[0].run(id).events().await?;
        let segments = (kinds(&ev, "RunStarted"), kinds(&ev, "ContinuedAsNew"));
        assert_eq!(segments, (n, n - 1), "{id}: {ev:?}");
        assert_eq!(done(&ev, "note"), n, "{id}: {ev:?}");
        assert_eq!(signals::<HashSet<_>>(&ev).len(), n, "{id}: {ev:?}");
        assert!(completed(&ev), "{id}: {ev:?}");
    }
    assert_eq!(
        marks.bodies(),
        (ids.len() * n, vec![]),
        "bodies, and those not run once"
    );
    shutdown_all(hosts).await
}

/// Per signal `msg`: a step `pay` joined with a branch that panics (once per
/// round) as soon as the body has returned, while its completion is written. The body's tag is
/// `<idempotency key>|<uuid>`.
#[derive(Clone)]
struct Beside(Marks);

impl Workflow for Beside {
    const NAME: &'static str = "beside";
    type Input = u32;
    type Output = Vec<(u32, String)>;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<Self::Output> {
        let mut out = Vec::new();
        for k in 0..n {
            let m: u32 = ctx.wait_for_signal("msg").await?;
            let crash = self.0.first(format!("{}/{k}", ctx.run_id()));
            let paid = tokio::sync::Notify::new();
            let pay = ctx.step("pay", |s| {
                let paid = &paid;
                async move {
                    let tag = format!("{}|{}", s.idempotency_key(), reel::Uuid::new_v4());
                    self.0.ran(s.idempotency_key().to_owned(), tag.clone());
                    paid.notify_one();
                    Ok::<_, String>(tag)
                }
            });
            // Right after the body returned: its completion is being written.
            let bug = async {
                if crash {
                    paid.notified().await;
                    panic!("handler bug beside pay {k}");
                }
            };
            let (tag, ()) = tokio::join!(pay, bug);
            out.push((m, tag?));
        }
        Ok(out)
    }
}

/// Runs on host-0 take signals sent through host-1; on each, a step completes
/// while a concurrent branch panics, so the supervisor restarts the run with the
/// step's completion possibly still in the writer's batch (the race of fix 1, on
/// the Postgres writer). The restart reads behind the crashed execution's last
/// append: each recorded tag is its step's only execution, and the results carry
/// the signals in order. Ports sdk-core's workflow task failing while a local
/// activity completes and DBOS `test_failures.py` step recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_recorded_beside_a_panic_is_not_run_again() -> anyhow::Result<()> {
    let url = support::database("restarts_beside").await;
    let marks = Marks::default();
    let (hosts, owners) = spread::<2>(&url, 100, async |url, name| {
        open(url, name, Beside(marks.on(name))).await
    })
    .await?;
    const N: u32 = 8;
    let ids = owned_by(&owners, 0, "beside", 6);
    for id in &ids {
        hosts[1].start::<Beside>(id, N).await?;
    }
    burst(&[&hosts[1]], &ids, "msg", N).await?;
    let mut problems = Vec::new();
    for id in &ids {
        let out = result_of::<Beside>(&hosts[1], id).await??;
        assert_eq!(
            out.iter().map(|o| o.0).collect::<Vec<_>>(),
            (0..N).collect::<Vec<_>>()
        );
        for (_, tag) in &out {
            let key = tag.split('|').next().unwrap_or_default();
            let ran = marks.bodies.lock().expect("bodies").get(key).cloned();
            if ran.as_ref().and_then(|r| r.last()) != Some(tag) {
                problems.push(format!("{id}: {key} recorded {tag}, ran {ran:?}"));
            }
        }
        let ev = hosts[1].run(id).events().await?;
        assert_eq!(done(&ev, "pay"), N as usize, "{id}: {ev:?}");
        assert!(completed(&ev), "{id}: {ev:?}");
    }
    let (bodies, again) = marks.bodies();
    assert_eq!(bodies, ids.len() * N as usize);
    assert_eq!(marks.crashed.lock().expect("crashed").len(), bodies);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(again, vec![], "pay bodies run again");
    shutdown_all(hosts).await
}
