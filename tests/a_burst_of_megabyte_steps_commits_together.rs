//! Many runs finishing steps of several MB at once: their appends share group
//! commits whose total (well past the store's 64 MiB journal bound) must still be
//! written, read back and replayed intact, also after a restart.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Workflow};

const LIMIT: Duration = Duration::from_secs(60);
const MB: usize = 1024 * 1024;
const RUNS: u64 = 12;

/// `len` bytes that do not compress.
fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 90) as u8)
        })
        .collect()
}

/// One step of 6 MB, then a wait, then the length and a checksum of what the step
/// returned.
struct Blob;
impl Workflow for Blob {
    const NAME: &'static str = "blob";
    type Input = u64;
    type Output = (usize, u64);
    async fn run(&self, ctx: Ctx, seed: u64) -> reel::Result<(usize, u64)> {
        let text: String = ctx
            .step("make", move |_| async move {
                Ok::<_, String>(noise(seed, 6 * MB))
            })
            .await?;
        ctx.wait_for_signal::<()>("go").await?;
        let sum = text
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        Ok((text.len(), sum))
    }
}

fn expected(seed: u64) -> (usize, u64) {
    let text = noise(seed, 6 * MB);
    let sum = text
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    (text.len(), sum)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn megabyte_steps_of_many_runs_at_once_survive_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Blob).await?;
    let mut runs = Vec::new();
    for seed in 0..RUNS {
        runs.push(host.start::<Blob>(&format!("b{seed}"), seed).await?);
    }
    for run in &runs {
        within(LIMIT, "each wait", run.wait_until_suspended()).await??;
    }
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), Blob).await?;
    for seed in 0..RUNS {
        let run = host.handle::<Blob>(&format!("b{seed}"));
        run.signal("go", &(), "g").await?;
    }
    for seed in 0..RUNS {
        let run = host.handle::<Blob>(&format!("b{seed}"));
        let got = within(LIMIT, "each run", run.result()).await??;
        assert_eq!(got, expected(seed), "run b{seed}");
    }
    host.shutdown().await?;
    Ok(())
}
