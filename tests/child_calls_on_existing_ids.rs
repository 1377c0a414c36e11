//! Child calls on ids that exist already (idempotent on the child id: a finished
//! run of the same workflow gives its recorded result, another workflow's run is
//! an error the parent can handle), and odd step names (empty, or the name reel
//! gives a run-to-run signal's own step) keep their ids apart.

mod common;

use std::time::Duration;

use common::{Counter, within};
use reel::{Ctx, Error, Host, Workflow};

const LIMIT: Duration = Duration::from_secs(20);

#[derive(Clone)]
struct Kid {
    runs: Counter,
}
impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        ctx.step("work", |_| async {
            self.runs.bump();
            Ok::<_, String>(n * 10)
        })
        .await
    }
}

struct Stranger;
impl Workflow for Stranger {
    const NAME: &'static str = "stranger";
    type Input = ();
    type Output = ();
    async fn run(&self, _: Ctx, _: ()) -> reel::Result<()> {
        Ok(())
    }
}

/// Calls child `kid` on the id it is given, and reports what happened.
struct Parent;
impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = String;
    type Output = String;
    async fn run(&self, ctx: Ctx, id: String) -> reel::Result<String> {
        Ok(match ctx.child::<Kid>(&id, 7).await {
            Ok(n) => format!("ok {n}"),
            Err(Error::Cancelled(_)) => "cancelled".into(),
            Err(e) => format!("err {e}"),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_call_on_an_existing_id() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let kid = Kid {
        runs: Counter::default(),
    };
    let host = Host::builder()
        .path(dir.path())
        .register(kid.clone())
        .register(Stranger)
        .register(Parent)
        .build()
        .await?;
    // A kid run that finished before anyone called it as a child.
    assert_eq!(host.start::<Kid>("done-kid", 1).await?.result().await?, 10);
    let p = host.start::<Parent>("p1", "done-kid".into()).await?;
    assert_eq!(within(LIMIT, "p1", p.result()).await??, "ok 10");
    assert_eq!(kid.runs.get(), 1, "the finished kid did not run again");

    // Another workflow's run under that id: an error the parent handles.
    host.start::<Stranger>("strange", ())
        .await?
        .result()
        .await?;
    let p = host.start::<Parent>("p2", "strange".into()).await?;
    let said = within(LIMIT, "p2", p.result()).await??;
    assert!(
        said.starts_with("err ") && said.contains("stranger"),
        "{said}"
    );

    // Two parents calling the same new child id: one child run, both get it.
    let a = host.start::<Parent>("p3", "shared".into()).await?;
    let b = host.start::<Parent>("p4", "shared".into()).await?;
    assert_eq!(within(LIMIT, "p3", a.result()).await??, "ok 70");
    assert_eq!(within(LIMIT, "p4", b.result()).await??, "ok 70");
    assert_eq!(kid.runs.get(), 2);
    host.shutdown().await?;
    Ok(())
}

/// Steps with an empty name and with the name of the step a send records.
#[derive(Clone)]
struct Odd {
    bodies: Counter,
}
impl Workflow for Odd {
    const NAME: &'static str = "odd";
    type Input = ();
    type Output = (u32, u32, u32, u32);
    async fn run(&self, ctx: Ctx, _: ()) -> reel::Result<(u32, u32, u32, u32)> {
        let me = ctx.run_id().to_owned();
        let a = ctx
            .step("", |_| async {
                self.bodies.bump();
                Ok::<_, String>(1u32)
            })
            .await?;
        let b = ctx
            .step("", |_| async {
                self.bodies.bump();
                Ok::<_, String>(2u32)
            })
            .await?;
        let name = format!("signal note -> {me}");
        let c = ctx
            .step(&name, |_| async {
                self.bodies.bump();
                Ok::<_, String>(3u32)
            })
            .await?;
        ctx.signal(&me, "note", &4u32, "n").await?;
        let d: u32 = ctx.wait_for_signal("note").await?;
        // A wait so that the run replays after the restart.
        let _: () = ctx.wait_for_signal("end").await?;
        Ok((a, b, c, d))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_step_names_keep_their_ids_apart_across_replay() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let odd = Odd {
        bodies: Counter::default(),
    };
    let open = || common::hosts::open(dir.path(), odd.clone());
    let host = open().await?;
    let run = host.start::<Odd>("odd", ()).await?;
    within(LIMIT, "the wait", run.wait_until_suspended()).await??;
    host.shutdown().await?;
    let host = open().await?;
    let run = host.handle::<Odd>("odd");
    run.signal("end", &(), "e").await?;
    assert_eq!(within(LIMIT, "odd", run.result()).await??, (1, 2, 3, 4));
    assert_eq!(odd.bodies.get(), 3);
    host.shutdown().await?;
    Ok(())
}
