//! The workloads on duroxide (SQLite provider).

use super::*;
use duroxide::providers::Provider;
use duroxide::providers::sqlite::SqliteProvider;
use duroxide::runtime::registry::ActivityRegistry;
use duroxide::runtime::{Runtime, RuntimeOptions};
use duroxide::{
    ActivityContext, Client, OrchestrationContext, OrchestrationRegistry, OrchestrationStatus,
};

pub(crate) struct Duroxide {
    _dir: TempDir,
    runtime: Arc<Runtime>,
    client: Client,
    next: usize,
}

impl Duroxide {
    pub(crate) async fn open(concurrency: usize) -> BenchResult<Duroxide> {
        let dir = temp_dir();
        let db = dir.path().join("duroxide.db");
        std::fs::File::create(&db)?;
        let store: Arc<dyn Provider> =
            Arc::new(SqliteProvider::new(&format!("sqlite:{}", db.display()), None).await?);
        let activities = ActivityRegistry::builder()
            .register("Noop", |_ctx: ActivityContext, _input: String| async move {
                Ok(String::new())
            })
            .build();
        let orchestrations = OrchestrationRegistry::builder()
            .register(
                "Steps",
                |ctx: OrchestrationContext, input: String| async move {
                    let n: u32 = input.parse().map_err(|e| format!("bad input: {e}"))?;
                    for _ in 0..n {
                        ctx.schedule_activity("Noop", "").await?;
                    }
                    Ok(n.to_string())
                },
            )
            .build();
        let options = RuntimeOptions {
            dispatcher_min_poll_interval: Duration::from_millis(1),
            orchestration_concurrency: concurrency,
            worker_concurrency: concurrency,
            ..RuntimeOptions::default()
        };
        let runtime =
            Runtime::start_with_options(store.clone(), activities, orchestrations, options).await;
        let mut me = Duroxide {
            _dir: dir,
            runtime,
            client: Client::new(store),
            next: 0,
        };
        me.sequential(3).await?; // warm-up
        Ok(me)
    }

    async fn wait(&self, instance: &str, n: u32) -> BenchResult<()> {
        match self
            .client
            .wait_for_orchestration(instance, LIMIT)
            .await
            .map_err(|e| format!("duroxide wait {instance}: {e:?}"))?
        {
            OrchestrationStatus::Completed { output, .. } if output == n.to_string() => Ok(()),
            other => Err(format!("duroxide {instance} ended {other:?}").into()),
        }
    }

    pub(crate) async fn sequential(&mut self, n: u32) -> BenchResult<Duration> {
        self.next += 1;
        let id = format!("seq-{}", self.next);
        let start = Instant::now();
        self.client
            .start_orchestration(id.as_str(), "Steps", n.to_string())
            .await
            .map_err(|e| format!("duroxide start: {e:?}"))?;
        self.wait(&id, n).await?;
        Ok(start.elapsed() / n)
    }

    pub(crate) async fn throughput(&mut self, runs: usize) -> BenchResult<Throughput> {
        let start = Instant::now();
        let ids: Vec<String> = (0..runs).map(|i| format!("tp-{i:06}")).collect();
        for id in &ids {
            self.client
                .start_orchestration(id.as_str(), "Steps", STEPS_PER_RUN.to_string())
                .await
                .map_err(|e| format!("duroxide start: {e:?}"))?;
        }
        // wait_for_orchestration polls with a backoff capped at 100 ms: the last
        // completion may be seen up to ~100 ms late.
        for id in &ids {
            self.wait(id, STEPS_PER_RUN).await?;
        }
        Ok(Throughput {
            runs,
            elapsed: start.elapsed(),
        })
    }

    pub(crate) async fn close(self) -> BenchResult<()> {
        self.runtime.shutdown(None).await;
        Ok(())
    }
}
