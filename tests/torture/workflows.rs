//! The torture's workflows: `mix` (every primitive) and `kid` (its child), the
//! logged step every body goes through, and the host builder.

use super::*;

/// Where step bodies log their executions, and the generation of this process.
#[derive(Clone)]
pub(crate) struct Side {
    pub(crate) path: Arc<PathBuf>,
    pub(crate) generation: u64,
}

/// Every step uses this: fail fast, retry fast (the backoffs are durable timers).
pub(crate) fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        initial_backoff: ms(2),
        max_backoff: ms(8),
        multiplier: 2.0,
    }
}

/// A step whose body logs `run step attempt token` to the side file, works for
/// `work_ms`, and returns the token; its first `fails` attempts fail.
pub(crate) fn logged_step(
    ctx: &Ctx,
    side: &Side,
    name: &str,
    fails: u32,
    work_ms: u64,
) -> impl Future<Output = reel::Result<String>> + Send + use<> {
    let side = side.clone();
    ctx.step_with(name, fast_retries(), move |s: StepCtx| {
        let side = side.clone();
        async move {
            // Run ids here contain no `/` or `%`, so the key is `run/step` verbatim.
            let key = s.idempotency_key().to_owned();
            let (run, step) = key.split_once('/').ok_or("no `/` in the key")?;
            let attempt = s.attempt();
            let fail = attempt <= fails;
            let token = format!(
                "{}g{}-{}",
                if fail { "fail-" } else { "" },
                side.generation,
                Uuid::new_v4().simple()
            );
            // Written synchronously, before the body can be dropped by a lost race.
            append_record(&side.path, &format!("{run} {step} {attempt} {token}"))
                .map_err(|e| format!("side file: {e}"))?;
            if work_ms > 0 {
                tokio::time::sleep(ms(work_ms)).await;
            }
            if fail {
                Err(format!("attempt {attempt} fails on purpose"))
            } else {
                Ok(token)
            }
        }
    })
}

pub(crate) fn epoch_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

pub(crate) fn epoch_ms(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// The main workflow: every primitive, concurrency included.
pub(crate) struct Mix {
    pub(crate) side: Side,
}

impl Workflow for Mix {
    const NAME: &'static str = "mix";
    type Input = u64;
    type Output = String;

    fn retry_policy(&self) -> RetryPolicy {
        fast_retries()
    }

    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<String> {
        let s = &self.side;
        let mut out = Vec::new();

        // Recorded values.
        let now = ctx.now().await?;
        let uuid = ctx.uuid().await?;
        let r = ctx.random_u64().await?;
        out.push(format!("t{} {uuid} {r:x}", epoch_ms(now)));

        // A plain step, then one that fails its first one or two attempts.
        out.push(logged_step(&ctx, s, "first", 0, 0).await?);
        out.push(logged_step(&ctx, s, "flaky", 1 + (n % 2) as u32, 0).await?);
        ctx.sleep(ms(1 + r % 12)).await?;

        // A join of branches that each make several calls, one of them a child run.
        let (left, right, kid) = futures::try_join!(
            async {
                let a = logged_step(&ctx, s, "left", 0, r % 3).await?;
                ctx.sleep(ms(2 + (r >> 4) % 5)).await?;
                let b = logged_step(&ctx, s, "left", 0, 0).await?;
                Ok::<_, reel::Error>(format!("{a}+{b}"))
            },
            async {
                let ping = ctx
                    .wait_for_signal_timeout::<String>("ping", ms(5 + (r >> 8) % 40))
                    .await?;
                let t = logged_step(&ctx, s, "right", 0, 0).await?;
                let v = ctx.random_u64().await?;
                Ok(format!("{ping:?}+{t}+{v:x}"))
            },
            // The kid's id comes from the input, not from `ctx.run_id()`:
            // `testing::replay` runs the handler under the run id `replay`.
            ctx.child::<Kid>(&kid_id(&mix_id(n)), n),
        )?;
        out.extend([left, right, kid]);

        // try_join_all over loops of steps.
        let fan = try_join_all((0..3u64).map(|k| {
            let ctx = ctx.clone();
            async move {
                let mut v = Vec::new();
                for _ in 0..2 {
                    v.push(logged_step(&ctx, s, "fan", 0, (r >> (12 + k)) % 3).await?);
                }
                v.push(ctx.uuid().await?.to_string());
                Ok::<_, reel::Error>(v.join("+"))
            }
        }))
        .await?;
        out.extend(fan);

        // FuturesUnordered: the completion order is part of the output.
        let mut unordered = FuturesUnordered::new();
        for k in 0..3u64 {
            let ctx = ctx.clone();
            unordered.push(async move {
                ctx.sleep(ms(1 + (r >> (20 + 3 * k)) % 6)).await?;
                let t = logged_step(&ctx, s, "unord", 0, 0).await?;
                Ok::<_, reel::Error>(format!("{k}:{t}"))
            });
        }
        while let Some(x) = unordered.try_next().await? {
            out.push(x);
        }

        // tokio::select!: a signal against a timer.
        let race = tokio::select! {
            sig = ctx.wait_for_signal::<String>("race") => format!("race:signal:{}", sig?),
            slept = ctx.sleep(ms(3 + (r >> 32) % 40)) => { slept?; "race:timer".to_owned() }
        };
        out.push(race);

        // futures::future::select: a running step against a timer. The loser is
        // dropped right away.
        let slow = Box::pin(logged_step(&ctx, s, "slow", 0, 1 + (r >> 40) % 12));
        let deadline = Box::pin(ctx.sleep(ms(6)));
        let slow = match select(slow, deadline).await {
            Either::Left((token, timer)) => {
                drop(timer);
                token?
            }
            Either::Right((slept, step)) => {
                drop(step);
                slept?;
                "slow:timed-out".to_owned()
            }
        };
        out.push(slow);
        out.push(logged_step(&ctx, s, "after-race", 0, 0).await?);

        // An untimed signal wait and an approval, both sent from outside.
        let pay: String = ctx.wait_for_signal("pay").await?;
        let decision = ctx.approval("ship").await?;
        out.push(format!("{pay} {:?}", decision.feedback));
        let last = if decision.approved { "ship" } else { "refund" };
        out.push(logged_step(&ctx, s, last, 0, 0).await?);

        // A loop of steps (ids loop, loop#2, ...).
        for k in 0..4 {
            out.push(logged_step(&ctx, s, "loop", 0, 0).await?);
            if k == 1 {
                ctx.sleep(ms(2)).await?;
            }
        }
        out.push(format!("end t{}", epoch_ms(ctx.now().await?)));
        Ok(out.join("|"))
    }
}

/// The child run of every `mix` run.
pub(crate) struct Kid {
    pub(crate) side: Side,
}

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = u64;
    type Output = String;

    fn retry_policy(&self) -> RetryPolicy {
        fast_retries()
    }

    async fn run(&self, ctx: Ctx, n: u64) -> reel::Result<String> {
        let s = &self.side;
        let mut out = Vec::new();
        for _ in 0..2 {
            out.push(logged_step(&ctx, s, "k", 0, 0).await?);
        }
        let kick = ctx
            .wait_for_signal_timeout::<String>("kick", ms(5 + n % 30))
            .await?;
        out.push(format!("{kick:?}"));
        ctx.sleep(ms(1 + n % 4)).await?;
        out.push(format!("{:x}", ctx.random_u64().await?));
        out.push(logged_step(&ctx, s, "k", (n % 3 == 0) as u32, 0).await?);
        Ok(out.join("+"))
    }
}

pub(crate) async fn builder(dir: &Path, side_file: &str, generation: u64) -> reel::HostBuilder {
    let side = Side {
        path: Arc::new(dir.join(side_file)),
        generation,
    };
    let builder = match backend().store {
        Some(open) => Host::builder().store(open(dir.to_owned()).await),
        None => Host::builder().path(dir.join("store")),
    };
    builder
        .register(Mix { side: side.clone() })
        .register(Kid { side })
}
