//! reel's host over `PgStore`, end to end: a run with steps, a timer, a signal and a
//! child completes; a run waiting when its host shuts down resumes on a new host
//! (and a new store) over the same database, with no recorded step run again. The
//! hosts are built both ways a service may: `.store(PgStore::connect(url).await?)`
//! and `Host::builder().postgres(url)`; a URL that does not parse is a typed error
//! from `build`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use reel::{Ctx, Host, RunStatus, Workflow};
use reel_postgres::PgStore;

#[derive(Clone, Default)]
struct Order {
    charges: Arc<AtomicU32>,
}

struct Ship;

impl Workflow for Ship {
    const NAME: &'static str = "ship";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<String> {
        ctx.step(
            "label",
            |_| async move { Ok::<_, String>(format!("label-{n}")) },
        )
        .await
    }
}

impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = u32;
    type Output = String;
    async fn run(&self, ctx: Ctx, cents: u32) -> reel::Result<String> {
        let charges = self.charges.clone();
        let charged = ctx
            .step("charge", |_| {
                let charges = charges.clone();
                async move {
                    charges.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(cents)
                }
            })
            .await?;
        ctx.sleep(Duration::from_millis(20)).await?;
        let paid: String = ctx.wait_for_signal("payment").await?;
        let label = ctx
            .child::<Ship>(&format!("{}-ship", ctx.run_id()), 7)
            .await?;
        Ok(format!("{charged}|{paid}|{label}"))
    }
}

async fn host(url: &str, order: &Order) -> anyhow::Result<Host> {
    let store = PgStore::connect(url).await?;
    Ok(Host::builder()
        .store(store)
        .register(order.clone())
        .register(Ship)
        .build()
        .await?)
}

/// The same host through the builder's own entry point.
async fn host_by_url(url: &str, order: &Order) -> anyhow::Result<Host> {
    Ok(Host::builder()
        .postgres(url)
        .register(order.clone())
        .register(Ship)
        .build()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_step_timer_signal_and_child_completes_on_postgres() -> anyhow::Result<()> {
    let url = support::database("e2e").await;
    let order = Order::default();
    let host = host(&url, &order).await?;
    let run = host.start::<Order>("order-1", 1999).await?;
    run.signal("payment", "paid", "evt-1").await?;
    assert_eq!(run.result().await?, "1999|paid|label-7");
    assert_eq!(order.charges.load(Ordering::SeqCst), 1);
    assert_eq!(run.status().await?, RunStatus::Completed);
    let runs = host.runs().await?;
    assert_eq!(runs.len(), 2, "the run and its child");
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_run_resumes_after_a_host_restart_on_postgres() -> anyhow::Result<()> {
    let url = support::database("restart").await;
    let order = Order::default();
    let host1 = host(&url, &order).await?;
    let run = host1.start::<Order>("order-2", 5).await?;
    let s = run.wait_until_suspended().await?;
    assert!(matches!(s, RunStatus::Suspended { .. }), "{s:?}");
    host1.shutdown().await?;

    // A new host and a new store on the same database: the timer fires (it came
    // due while the host was down), the run waits for its signal.
    let host2 = host_by_url(&url, &order).await?;
    let run = host2.handle::<Order>("order-2");
    loop {
        match run.wait_until_suspended().await? {
            RunStatus::Suspended { waiting_on } if waiting_on.contains("payment") => break,
            _ => tokio::task::yield_now().await,
        }
    }
    host2.shutdown().await?;

    let host3 = host(&url, &order).await?;
    let run = host3.handle::<Order>("order-2");
    run.signal("payment", "late", "evt-1").await?;
    assert_eq!(run.result().await?, "5|late|label-7");
    assert_eq!(
        order.charges.load(Ordering::SeqCst),
        1,
        "the recorded step never ran again"
    );
    host3.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_postgres_url_is_a_typed_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let built = Host::builder()
        .path(dir.path())
        .postgres("postgres://reel@localhost:not-a-port/reel")
        .register(Ship)
        .build()
        .await;
    match built {
        Err(reel::Error::Storage(message)) => {
            assert!(message.contains("postgres URL"), "{message}");
        }
        Err(e) => panic!("expected Error::Storage, got {e:?}"),
        Ok(_) => panic!("a URL that does not parse built a host"),
    }
    assert_eq!(
        std::fs::read_dir(dir.path())?.count(),
        0,
        "no fjall store was created beside the refused database"
    );
    Ok(())
}
