//! The JSON routes: listing, counts, one run, its records, its watch (server-sent
//! events) and the actions. Every input error is a 4xx with a message.

use std::convert::Infallible;
use std::time::{Duration, UNIX_EPOCH};

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream, StreamExt};
use reel::{RunInfo, RunStatus, StatusKind, Uuid};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::event_json::{record_to_json, unix_ms};
use crate::{AppState, ops};

type Params = Result<Query<Vec<(String, String)>>, QueryRejection>;

fn params(q: Params) -> Result<Vec<(String, String)>, ApiError> {
    q.map(|Query(v)| v)
        .map_err(|e| ApiError::bad_request(format!("malformed query: {e}")))
}

fn number<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, ApiError> {
    v.parse()
        .map_err(|_| ApiError::bad_request(format!("`{name}` must be a number, not `{v}`")))
}

fn status_kind(s: &str) -> Result<StatusKind, ApiError> {
    StatusKind::ALL
        .into_iter()
        .find(|k| k.as_str().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            let all: Vec<&str> = StatusKind::ALL.iter().map(|k| k.as_str()).collect();
            ApiError::bad_request(format!("unknown status `{s}` (one of: {})", all.join(", ")))
        })
}

/// A run's summary as JSON, as the listing and the CLI show it: `{"run_id",
/// "workflow", "version", "status", "waiting_on", "error", "parent", "segment",
/// "queue", "log"}`.
pub fn run_info_to_json(r: &RunInfo) -> Value {
    let (waiting_on, error) = match &r.status {
        RunStatus::Suspended { waiting_on } => (Some(waiting_on.clone()), None),
        RunStatus::Failed { error } | RunStatus::Parked { error } => (None, Some(error.clone())),
        _ => (None, None),
    };
    json!({
        "run_id": r.run_id,
        "workflow": r.workflow,
        "version": r.version,
        "status": r.status.kind().as_str(),
        "waiting_on": waiting_on,
        "error": error,
        "parent": r.parent,
        "segment": r.segment,
        "queue": r.queue,
        "created_at": unix_ms(r.created_at),
        "updated_at": unix_ms(r.updated_at),
        "log": r.log.map(|l| json!({ "events": l.events, "bytes": l.bytes })),
    })
}

pub(crate) async fn list(State(s): State<AppState>, q: Params) -> Result<Json<Value>, ApiError> {
    let mut f = ops::Filter {
        limit: 50,
        ..ops::Filter::default()
    };
    for (k, v) in params(q)? {
        match k.as_str() {
            "status" => {
                for part in v.split(',').filter(|p| !p.is_empty()) {
                    f.status.push(status_kind(part)?);
                }
            }
            "workflow" => f.workflow = Some(v).filter(|v| !v.is_empty()),
            "version" => f.version = Some(number(&k, &v)?),
            "parent" => f.parent = Some(v).filter(|v| !v.is_empty()),
            "created_after" => {
                f.created_after = Some(UNIX_EPOCH + Duration::from_millis(number(&k, &v)?));
            }
            "created_before" => {
                f.created_before = Some(UNIX_EPOCH + Duration::from_millis(number(&k, &v)?));
            }
            "limit" => f.limit = number(&k, &v)?,
            "cursor" => f.cursor = Some(v).filter(|v| !v.is_empty()),
            "order" => {
                f.ascending = match v.as_str() {
                    "asc" => true,
                    "desc" => false,
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "`order` is `asc` or `desc`, not `{v}`"
                        )));
                    }
                }
            }
            // A typo (`stauts=failed`) would otherwise list every run.
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown parameter `{other}` (the listing takes status, workflow, \
                     version, parent, created_after, created_before, limit, cursor, order)"
                )));
            }
        }
    }
    if f.limit == 0 || f.limit > s.opts.max_page {
        return Err(ApiError::bad_request(format!(
            "`limit` must be between 1 and {}",
            s.opts.max_page
        )));
    }
    let page = ops::list(&s.host, &f).await?;
    let runs: Vec<Value> = page.runs.iter().map(run_info_to_json).collect();
    Ok(Json(json!({ "runs": runs, "next": page.next })))
}

pub(crate) async fn count(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let counts = ops::count(&s.host).await?;
    let total: u64 = counts.values().sum();
    let by: serde_json::Map<String, Value> = counts
        .into_iter()
        .map(|(k, n)| (k.as_str().to_owned(), n.into()))
        .collect();
    Ok(Json(json!({ "total": total, "by_status": by })))
}

pub(crate) async fn get(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = s.host.run(&id);
    let info = run.info().await?;
    let mut v = run_info_to_json(&info);
    let children: Vec<Value> = run.children().await?.iter().map(run_info_to_json).collect();
    v["children"] = children.into();
    v["read_only"] = s.opts.read_only.into();
    Ok(Json(v))
}

pub(crate) async fn records(
    State(s): State<AppState>,
    Path(id): Path<String>,
    q: Params,
) -> Result<Json<Value>, ApiError> {
    let (mut after, mut limit) = (None::<u64>, usize::MAX);
    for (k, v) in params(q)? {
        match k.as_str() {
            "after" => after = Some(number(&k, &v)?),
            "limit" => limit = number(&k, &v)?,
            _ => {}
        }
    }
    // An empty page with no `next` reads as the end of the log.
    if limit == 0 {
        return Err(ApiError::bad_request("`limit` must be at least 1"));
    }
    let all = s.host.run(&id).records().await?;
    let mut fresh = all.iter().filter(|r| after.is_none_or(|a| r.seq > a));
    let page: Vec<Value> = fresh.by_ref().take(limit).map(record_to_json).collect();
    let next = match fresh.next() {
        Some(_) => page.last().and_then(|r| r["seq"].as_u64()),
        None => None,
    };
    Ok(Json(json!({ "records": page, "next": next })))
}

pub(crate) async fn watch(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    q: Params,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let (mut after, mut created_at) = (None, None);
    for (k, v) in params(q)? {
        match k.as_str() {
            "after" => after = Some(number(&k, &v)?),
            "created_at" => created_at = Some(number::<u64>(&k, &v)?),
            _ => {}
        }
    }
    // A reconnecting `EventSource` says where it got to; that beats the URL's `after`.
    if let Some(v) = headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        after = Some(number::<u64>("Last-Event-ID", v)?);
    }
    let records = ops::watch(&s.host, &id, after, created_at).await?;
    let first = stream::iter([Ok(SseEvent::default().retry(ops::WATCH_RETRY))]);
    let events = records.map(|r| {
        Ok(match r {
            Ok(r) => SseEvent::default()
                .event("record")
                .id(r.seq.to_string())
                .data(record_to_json(&r).to_string()),
            Err(e) => SseEvent::default().event("error").data(e.message),
        })
    });
    Ok(Sse::new(first.chain(events)))
}

/// Checks read-only mode, then decodes the body (empty reads as `{}`).
fn action<T: DeserializeOwned>(s: &AppState, body: &Bytes) -> Result<T, ApiError> {
    if s.opts.read_only {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "the inspector is read-only: actions are turned off",
        ));
    }
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))
}

fn accepted(run_id: &str, action: &str) -> Response {
    (
        StatusCode::ACCEPTED,
        Json(json!({ "ok": true, "run_id": run_id, "action": action })),
    )
        .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignalBody {
    name: String,
    #[serde(default)]
    payload: Value,
    signal_id: Option<String>,
}

pub(crate) async fn signal(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let b: SignalBody = action(&s, &body)?;
    if b.name.is_empty() {
        return Err(ApiError::bad_request("the signal `name` is empty"));
    }
    let signal_id = b.signal_id.unwrap_or_else(|| Uuid::new_v4().to_string());
    s.host
        .run(&id)
        .signal(&b.name, &b.payload, &signal_id)
        .await?;
    Ok(accepted(&id, "signal"))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReasonBody {
    reason: Option<String>,
}

pub(crate) async fn cancel(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let b: ReasonBody = action(&s, &body)?;
    let reason = b
        .reason
        .unwrap_or_else(|| "cancelled from the inspector".into());
    s.host.run(&id).request_cancel(&reason).await?;
    Ok(accepted(&id, "cancel"))
}

pub(crate) async fn terminate(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let b: ReasonBody = action(&s, &body)?;
    let reason = b
        .reason
        .unwrap_or_else(|| "terminated from the inspector".into());
    s.host.run(&id).terminate(&reason).await?;
    Ok(accepted(&id, "terminate"))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Empty {}

macro_rules! simple_action {
    ($name:ident, $label:literal) => {
        pub(crate) async fn $name(
            State(s): State<AppState>,
            Path(id): Path<String>,
            body: Bytes,
        ) -> Result<Response, ApiError> {
            let _: Empty = action(&s, &body)?;
            ops::$name(&s.host, &id).await?;
            Ok(accepted(&id, $label))
        }
    };
}

simple_action!(pause, "pause");
simple_action!(resume, "resume");
simple_action!(retry, "retry");
simple_action!(delete, "delete");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkBody {
    at_seq: u64,
    new_run_id: String,
}

pub(crate) async fn fork(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let b: ForkBody = action(&s, &body)?;
    ops::fork(&s.host, &id, b.at_seq, &b.new_run_id).await?;
    Ok(accepted(&id, "fork"))
}
