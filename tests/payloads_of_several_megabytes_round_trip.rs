//! Inputs, step outputs, signal payloads, published values, continue-as-new inputs
//! and outputs of several MB are recorded and read back byte for byte, live, after
//! a restart (replayed from the store) and through `signal_with_start`; a run with
//! several of them in its log replays in `reel::testing::replay`.

mod common;

use std::time::Duration;

use common::within;
use reel::{Ctx, Workflow};

const LIMIT: Duration = Duration::from_secs(30);
const MB: usize = 1024 * 1024;

/// `len` bytes that do not compress, as a `String` (the store compresses blocks).
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

fn digest(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Input: (segment, big text). A step makes 4 MB, a signal brings some MB, the
/// run publishes 3 MB, continues as new once with a 5 MB input, and returns a
/// digest of everything plus 6 MB.
struct Big;
impl Workflow for Big {
    const NAME: &'static str = "big";
    type Input = (u32, String);
    type Output = (u64, String);
    async fn run(&self, ctx: Ctx, (segment, text): (u32, String)) -> reel::Result<(u64, String)> {
        let made: String = ctx
            .step("make", move |_| async move {
                Ok::<_, String>(noise(u64::from(segment) + 7, 4 * MB))
            })
            .await?;
        let sig: String = ctx.wait_for_signal("blob").await?;
        ctx.publish("progress", &noise(3, 3 * MB)).await?;
        if segment == 0 {
            return ctx.continue_as_new::<Big>((1, noise(11, 5 * MB))).await;
        }
        let d = digest(&text) ^ digest(&made).rotate_left(1) ^ digest(&sig).rotate_left(2);
        Ok((d, noise(99, 6 * MB)))
    }
}

fn expected(sig1: &str) -> u64 {
    digest(&noise(11, 5 * MB))
        ^ digest(&noise(8, 4 * MB)).rotate_left(1)
        ^ digest(sig1).rotate_left(2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn megabyte_payloads_survive_live_restart_and_replay() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Big).await?;
    let run = host.start::<Big>("big", (0, noise(1, 8 * MB))).await?;
    let sig0 = noise(21, 7 * MB);
    let sig1 = noise(22, 2 * MB);
    run.signal("blob", &sig0, "s0").await?;
    run.signal("blob", &sig1, "s1").await?;
    let (d, tail) = within(LIMIT, "the run", run.result()).await??;
    assert_eq!(d, expected(&sig1));
    assert_eq!(tail, noise(99, 6 * MB));
    let published: Option<String> = run.published("progress").await?;
    assert_eq!(published.as_deref(), Some(noise(3, 3 * MB).as_str()));
    let events = run.events().await?;

    // Read back from the store by a new host.
    host.shutdown().await?;
    let host = common::hosts::open(dir.path(), Big).await?;
    let run = host.handle::<Big>("big");
    let (d2, tail2) = within(LIMIT, "the result after a restart", run.result()).await??;
    assert_eq!((d2, tail2.len()), (d, tail.len()));
    assert_eq!(run.events().await?, events);

    // The saved log replays to the same result.
    let replayed = reel::testing::replay(Big, &events).await?;
    assert_eq!(replayed, reel::testing::Replayed::Completed((d, tail)));
    host.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_with_megabytes_in_its_log_resumes_after_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = common::hosts::open(dir.path(), Big).await?;
    let run = host.start::<Big>("big", (1, noise(11, 5 * MB))).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    host.shutdown().await?;

    let host = common::hosts::open(dir.path(), Big).await?;
    let run = host.handle::<Big>("big");
    let sig = noise(30, 9 * MB);
    run.signal("blob", &sig, "s").await?;
    let (d, tail) = within(LIMIT, "the run", run.result()).await??;
    assert_eq!(d, expected(&sig));
    assert_eq!(tail.len(), 6 * MB);
    host.shutdown().await?;
    Ok(())
}
