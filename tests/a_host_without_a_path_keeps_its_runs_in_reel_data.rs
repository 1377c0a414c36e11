//! `Host::builder()` with no `.path()` keeps its runs in `./reel-data`, the
//! default DESIGN.md names: the directory appears in the working directory, and a
//! second host built the same way finds the run the first one finished there.
//! (One test in this binary: it changes the process's working directory.)

use reel::{Ctx, Host, Workflow};

struct Double;

impl Workflow for Double {
    const NAME: &'static str = "double";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("double", |_| async move { Ok::<_, String>(n * 2) })
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_a_path_keeps_its_runs_in_reel_data() -> reel::Result<()> {
    let dir = tempfile::tempdir().expect("temp dir");
    std::env::set_current_dir(dir.path()).expect("cd into the temp dir");

    let host = Host::builder().register(Double).build().await?;
    assert_eq!(host.start::<Double>("d-1", 21).await?.result().await?, 42);
    host.shutdown().await?;
    assert!(
        dir.path().join("reel-data").is_dir(),
        "no ./reel-data in {}",
        dir.path().display()
    );

    let again = Host::builder().register(Double).build().await?;
    assert_eq!(again.handle::<Double>("d-1").result().await?, 42);
    assert_eq!(again.handle::<Double>("d-1").events().await?.len(), 4);
    again.shutdown().await?;
    Ok(())
}
