//! Hosts built with `Host::builder().postgres(url)` on one database share its
//! runs, as DESIGN.md has it ("several hosts share one database"): each joins as
//! a host of its own and leases a share of the partitions. Runs started through
//! either host are signalled through the other and finish, each step body run
//! once; when one host shuts down, the other takes its partitions over and
//! finishes the runs that waited there (their timers fire on it, and their
//! signals reach them), again with no step body run twice.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reel::{Ctx, Host, RunStatus, Workflow};

/// A step, a signal, a step; counts each step body per run.
#[derive(Clone, Default)]
struct Ticket {
    bodies: Arc<Mutex<HashMap<String, u32>>>,
}

impl Ticket {
    fn ran(&self, key: String) {
        *self.bodies.lock().expect("bodies").entry(key).or_default() += 1;
    }
}

impl Workflow for Ticket {
    const NAME: &'static str = "ticket";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let first = ctx
            .step("open", |s| async move {
                self.ran(s.idempotency_key().to_owned());
                Ok::<_, String>(n)
            })
            .await?;
        let add: u32 = ctx.wait_for_signal("add").await?;
        ctx.step("close", |s| async move {
            self.ran(s.idempotency_key().to_owned());
            Ok::<_, String>(first + add)
        })
        .await
    }
}

/// A step, a timer, a step.
#[derive(Clone, Default)]
struct Nap {
    ticket: Ticket,
}

impl Workflow for Nap {
    const NAME: &'static str = "nap";
    type Input = u32;
    type Output = u32;
    async fn run(&self, ctx: Ctx, n: u32) -> reel::Result<u32> {
        let first = ctx
            .step("before", |s| async move {
                self.ticket.ran(s.idempotency_key().to_owned());
                Ok::<_, String>(n)
            })
            .await?;
        ctx.sleep(Duration::from_millis(500)).await?;
        ctx.step("after", |s| async move {
            self.ticket.ran(s.idempotency_key().to_owned());
            Ok::<_, String>(first + 1)
        })
        .await
    }
}

async fn host(url: &str, ticket: &Ticket) -> Host {
    Host::builder()
        .postgres(url)
        .register(ticket.clone())
        .register(Nap {
            ticket: ticket.clone(),
        })
        .build()
        .await
        .expect("a host built from the URL")
}

/// Waits until the run waits for its signal, asked through `host`.
async fn until_waiting(host: &Host, id: &str) {
    let run = host.handle::<Ticket>(id);
    loop {
        match run
            .wait_until_suspended()
            .await
            .expect("wait_until_suspended")
        {
            RunStatus::Suspended { waiting_on } if waiting_on.contains("add") => return,
            _ => tokio::task::yield_now().await,
        }
    }
}

fn assert_each_body_ran_once(ticket: &Ticket, runs: usize) {
    let bodies = ticket.bodies.lock().expect("bodies");
    assert_eq!(
        bodies.len(),
        runs * 2,
        "two step bodies per run: {bodies:?}"
    );
    let twice: Vec<_> = bodies.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        twice.is_empty(),
        "step bodies run more than once: {twice:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_started_on_either_host_finish_when_signalled_through_the_other() {
    let url = support::database("share").await;
    let ticket = Ticket::default();
    let a = host(&url, &ticket).await;
    let b = host(&url, &ticket).await;
    let ids: Vec<String> = (0..24).map(|i| format!("share-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let (on, _) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        on.start::<Ticket>(id, i as u32).await.expect("start");
    }
    for (i, id) in ids.iter().enumerate() {
        let (_, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        until_waiting(other, id).await;
        other
            .handle::<Ticket>(id)
            .signal("add", &100u32, &format!("add-{id}"))
            .await
            .expect("signal through the other host");
    }
    for (i, id) in ids.iter().enumerate() {
        let on = if i % 2 == 0 { &a } else { &b };
        let out = on.handle::<Ticket>(id).result().await.expect("result");
        assert_eq!(out, i as u32 + 100, "{id}");
    }
    assert_each_body_ran_once(&ticket, ids.len());
    a.shutdown().await.expect("shutdown a");
    b.shutdown().await.expect("shutdown b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_shuts_down_leaves_its_runs_to_the_other() {
    let url = support::database("leave").await;
    let ticket = Ticket::default();
    let a = host(&url, &ticket).await;
    let b = host(&url, &ticket).await;
    // Half wait for a signal, half for a timer, all started (and their timers
    // set) on `a` after `b` was up.
    let ids: Vec<String> = (0..24).map(|i| format!("leave-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        if i % 2 == 0 {
            a.start::<Ticket>(id, i as u32).await.expect("start");
        } else {
            a.start::<Nap>(id, i as u32).await.expect("start");
        }
    }
    for (i, id) in ids.iter().enumerate() {
        if i % 2 == 0 {
            until_waiting(&a, id).await;
        } else {
            let s = a
                .handle::<Nap>(id)
                .wait_until_suspended()
                .await
                .expect("wait");
            assert!(matches!(s, RunStatus::Suspended { .. }), "{id}: {s:?}");
        }
    }
    a.shutdown().await.expect("shutdown a");
    // Every run now waits on a partition nobody leases until `b` takes it over.
    for id in ids.iter().step_by(2) {
        b.handle::<Ticket>(id)
            .signal("add", &1u32, &format!("add-{id}"))
            .await
            .expect("signal after the first host left");
    }
    for (i, id) in ids.iter().enumerate() {
        let result = async {
            if i % 2 == 0 {
                b.handle::<Ticket>(id).result().await
            } else {
                b.handle::<Nap>(id).result().await
            }
        };
        let out = tokio::time::timeout(Duration::from_secs(60), result)
            .await
            .unwrap_or_else(|_| panic!("{id} did not finish on the host left"))
            .expect("result");
        assert_eq!(out, i as u32 + 1, "{id}");
    }
    assert_each_body_ran_once(&ticket, ids.len());
    b.shutdown().await.expect("shutdown b");
}
