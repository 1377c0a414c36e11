//! The workloads on memable (redb backend).

use super::*;
use memable::{Context, Engine, EngineError, WorkflowState};

async fn steps(ctx: Context) -> Result<(), EngineError> {
    let n: u32 = ctx.input::<u32>()?.unwrap_or(0);
    for i in 0..n {
        // memable memoises by key: each step of a run needs its own.
        let key = format!("noop-{i}");
        let () = ctx.step(&key).run(async || Ok(())).await?;
    }
    Ok(())
}

pub(crate) struct Memable {
    _dir: TempDir,
    engine: Engine,
}

fn check(state: WorkflowState) -> BenchResult<()> {
    match state {
        WorkflowState::Completed(_) => Ok(()),
        other => Err(format!("memable workflow ended {other:?}").into()),
    }
}

impl Memable {
    pub(crate) async fn open() -> BenchResult<Memable> {
        let dir = temp_dir();
        let mut engine = Engine::builder()
            .open(dir.path().join("memable.redb"))?
            .build();
        engine.register("steps", steps);
        engine.start().await?;
        let mut me = Memable { _dir: dir, engine };
        me.sequential(10).await?; // warm-up
        Ok(me)
    }

    pub(crate) async fn sequential(&mut self, n: u32) -> BenchResult<Duration> {
        let start = Instant::now();
        let inv = self.engine.invoke("steps").input(n).await?;
        check(inv.wait().await)?;
        Ok(start.elapsed() / n)
    }

    pub(crate) async fn throughput(&mut self, runs: usize) -> BenchResult<Throughput> {
        let start = Instant::now();
        let mut invocations = Vec::with_capacity(runs);
        for _ in 0..runs {
            invocations.push(self.engine.invoke("steps").input(STEPS_PER_RUN).await?);
        }
        for inv in invocations {
            check(inv.wait().await)?;
        }
        Ok(Throughput {
            runs,
            elapsed: start.elapsed(),
        })
    }

    pub(crate) async fn close(self) -> BenchResult<()> {
        self.engine.stop().await;
        Ok(())
    }
}
