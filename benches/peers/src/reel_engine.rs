//! The workloads on reel: a no-op step workflow on a host over a temporary directory.

use super::*;
use reel::{Ctx, Host, Workflow};

struct Steps;
impl Workflow for Steps {
    const NAME: &'static str = "steps";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        for _ in 0..n {
            ctx.step("noop", |_| async { Ok::<_, String>(()) }).await?;
        }
        Ok(n)
    }
}

pub(crate) struct Reel {
    _dir: TempDir,
    host: Arc<Host>,
    next: usize,
}

impl Reel {
    pub(crate) async fn open() -> BenchResult<Reel> {
        let dir = temp_dir();
        let host = Host::builder()
            .path(dir.path())
            .register(Steps)
            .build()
            .await?;
        let mut me = Reel {
            _dir: dir,
            host: Arc::new(host),
            next: 0,
        };
        me.sequential(10).await?; // warm-up
        Ok(me)
    }

    /// Per-step time of one run of `n` steps (start -> result).
    pub(crate) async fn sequential(&mut self, n: u32) -> BenchResult<Duration> {
        self.next += 1;
        let id = format!("seq-{}", self.next);
        let start = Instant::now();
        let run = self.host.start::<Steps>(&id, n).await?;
        let out = within(LIMIT, "reel result()", run.result()).await?;
        let elapsed = start.elapsed();
        if out != n {
            return Err(format!("reel run returned {out}").into());
        }
        Ok(elapsed / n)
    }

    pub(crate) async fn throughput(&mut self, runs: usize) -> BenchResult<Throughput> {
        let start = Instant::now();
        let tasks: Vec<_> = (0..runs)
            .map(|i| {
                let host = self.host.clone();
                tokio::spawn(async move {
                    let run = host
                        .start::<Steps>(&format!("tp-{i:06}"), STEPS_PER_RUN)
                        .await?;
                    within(LIMIT, "reel result()", run.result()).await
                })
            })
            .collect();
        for t in tasks {
            let out = t.await??;
            if out != STEPS_PER_RUN {
                return Err(format!("reel run returned {out}").into());
            }
        }
        Ok(Throughput {
            runs,
            elapsed: start.elapsed(),
        })
    }

    pub(crate) async fn close(self) -> BenchResult<()> {
        let host = Arc::try_unwrap(self.host).map_err(|_| "reel host still shared")?;
        host.shutdown().await?;
        Ok(())
    }
}
