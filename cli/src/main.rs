//! `reel`: list, inspect and operate the runs of a reel host from a shell.
//!
//! Against a host's admin endpoint (the router of `reel-inspector`, mounted by the
//! service): `reel --url http://host:port/admin runs`. Every command works there.
//! Read-only against a store directory no host holds: `reel --store DIR runs`
//! (`runs`, `show`, `events`); a store a host holds answers a clear error.
//! Tables for people; `--json` prints JSON for scripts. `reel copy FROM TO`
//! copies a whole store (a directory or a `postgres://` URL) into an empty one,
//! offline.
//!
//! Layout: `main.rs` the commands, `http.rs` the admin endpoint client, `store.rs`
//! the store reader, `copy.rs` the store copy, `table.rs` the human output.

mod copy;
mod http;
mod store;
mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::{Value, json};

/// Inspect and operate reel runs.
#[derive(Parser)]
#[command(name = "reel", version, about)]
struct Cli {
    /// The admin endpoint of a host (where the service mounted reel-inspector's
    /// router), e.g. http://127.0.0.1:8080/admin. Default: $REEL_URL, unless
    /// --store is given.
    #[arg(long, global = true, conflicts_with = "store")]
    url: Option<String>,
    /// A store directory to read (read-only; no host may hold it). Default:
    /// $REEL_STORE, unless --url is given.
    #[arg(long, global = true)]
    store: Option<std::path::PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One page of runs (newest first with a host; by run id for a store).
    Runs(RunsArgs),
    /// One run: status, error, parent and children.
    Show { run: String },
    /// A run's log, one record a line, payloads as JSON.
    Events { run: String },
    /// A run's records as they are appended, until it ends.
    Watch { run: String },
    /// Sends a signal with a JSON payload.
    Signal {
        run: String,
        name: String,
        /// The payload, as JSON (default `null`).
        payload: Option<String>,
        /// A signal id (repeating a send with the same id is dropped).
        #[arg(long)]
        id: Option<String>,
    },
    /// Asks the run to cancel (its handler may clean up).
    Cancel {
        run: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Ends the run at once.
    Terminate {
        run: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Pauses the run.
    Pause { run: String },
    /// Resumes a paused run.
    Resume { run: String },
    /// Activates a parked run again now, with the code registered now (a failed
    /// run is final: fork it from before its failed step instead).
    Retry { run: String },
    /// Starts a new run from a run's log up to a sequence number.
    Fork {
        run: String,
        /// The last sequence number the new run keeps.
        #[arg(long)]
        at: u64,
        /// The new run's id.
        #[arg(long = "new-id")]
        new_id: String,
    },
    /// Deletes a finished run and its log.
    Delete { run: String },
    /// Copies a whole store into an empty one, offline (no host may use either):
    /// runs with their records and append times, timers, schedules. FROM and TO
    /// are store directories or PostgreSQL URLs (postgres://user@host/db).
    Copy { from: String, to: String },
}

/// Filters and paging of `runs`.
#[derive(clap::Args)]
struct RunsArgs {
    /// Only runs in these states (comma-separated: running, suspended, completed,
    /// failed, cancelled, parked, paused, enqueued).
    #[arg(long)]
    status: Option<String>,
    /// Only runs of this workflow.
    #[arg(long)]
    workflow: Option<String>,
    /// Only children of this run.
    #[arg(long)]
    parent: Option<String>,
    /// Runs per page.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// The cursor a previous page printed as `next`.
    #[arg(long)]
    cursor: Option<String>,
    /// `asc` or `desc`.
    #[arg(long)]
    order: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reel: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<(), String> {
    if let Command::Copy { from, to } = &cli.command {
        return copy::copy(from, to, cli.json);
    }
    // A flag names the source; the environment only fills in when neither does,
    // so a user who exports one variable can still name the other source.
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (url, store) = match (&cli.url, &cli.store) {
        (None, None) => (env("REEL_URL"), env("REEL_STORE").map(Into::into)),
        (url, store) => (url.clone(), store.clone()),
    };
    match (url, store) {
        (Some(url), None) => remote(cli, &http::Admin::new(&url)),
        (None, Some(dir)) => local(cli, &dir),
        (Some(_), Some(_)) => Err(
            "REEL_URL and REEL_STORE are both set: say which to use with --url or --store".into(),
        ),
        (None, None) => {
            Err("say where the runs are: --url <admin endpoint> or --store <dir>".into())
        }
    }
}

fn remote(cli: &Cli, admin: &http::Admin) -> Result<(), String> {
    let out = |v: &Value| print(cli.json, v);
    let act = |run: &str, action: &str, body: Value| {
        out(&admin.post(run, action, &body)?);
        Ok(())
    };
    match &cli.command {
        Command::Runs(a) => {
            let mut q: Vec<(&str, String)> = vec![("limit", a.limit.to_string())];
            for (k, v) in [
                ("status", &a.status),
                ("workflow", &a.workflow),
                ("parent", &a.parent),
                ("cursor", &a.cursor),
                ("order", &a.order),
            ] {
                if let Some(v) = v {
                    q.push((k, v.clone()));
                }
            }
            let page = admin.get("api/runs", &q)?;
            if cli.json {
                println!("{page}");
            } else {
                table::runs(&page);
            }
            Ok(())
        }
        Command::Show { run } => {
            out(&admin.get(&format!("api/runs/{}", http::seg(run)), &[])?);
            Ok(())
        }
        Command::Events { run } => {
            let v = admin.get(&format!("api/runs/{}/records", http::seg(run)), &[])?;
            table::records(
                cli.json,
                v["records"].as_array().map_or(&[][..], Vec::as_slice),
            );
            Ok(())
        }
        Command::Watch { run } => {
            admin.watch(run, |r| table::records(cli.json, std::slice::from_ref(r)))
        }
        Command::Signal {
            run,
            name,
            payload,
            id,
        } => {
            let payload: Value = match payload {
                Some(p) => {
                    serde_json::from_str(p).map_err(|e| format!("the payload is not JSON: {e}"))?
                }
                None => Value::Null,
            };
            let mut body = json!({ "name": name, "payload": payload });
            if let Some(id) = id {
                body["signal_id"] = id.clone().into();
            }
            out(&admin.post(run, "signal", &body)?);
            Ok(())
        }
        Command::Cancel { run, reason } => act(run, "cancel", json!({ "reason": reason })),
        Command::Terminate { run, reason } => act(run, "terminate", json!({ "reason": reason })),
        Command::Pause { run } => act(run, "pause", json!({})),
        Command::Resume { run } => act(run, "resume", json!({})),
        Command::Retry { run } => act(run, "retry", json!({})),
        Command::Delete { run } => act(run, "delete", json!({})),
        Command::Fork { run, at, new_id } => {
            act(run, "fork", json!({ "at_seq": at, "new_run_id": new_id }))
        }
        Command::Copy { .. } => Err("`copy` takes no --url: it works on stores, offline".into()),
    }
}

fn local(cli: &Cli, dir: &std::path::Path) -> Result<(), String> {
    let store = store::Reader::open(dir)?;
    match &cli.command {
        Command::Runs(a) => {
            let page = store.runs(
                a.status.as_deref(),
                a.workflow.as_deref(),
                a.parent.as_deref(),
                a.limit,
                a.cursor.as_deref(),
            )?;
            if cli.json {
                println!("{page}");
            } else {
                table::runs(&page);
            }
            Ok(())
        }
        Command::Show { run } => {
            print(cli.json, &store.show(run)?);
            Ok(())
        }
        Command::Events { run } => {
            table::records(cli.json, &store.records(run)?);
            Ok(())
        }
        _ => Err(
            "a store directory is read-only: `runs`, `show` and `events` only; \
                  operate runs with --url <the host's admin endpoint>"
                .into(),
        ),
    }
}

/// One JSON value: as JSON, or as `key: value` lines.
fn print(json: bool, v: &Value) {
    if json {
        println!("{v}");
    } else {
        table::object(v);
    }
}
