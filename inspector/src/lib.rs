//! The run inspector of [reel](https://docs.rs/reel): an [`axum::Router`] a
//! service mounts next to its own routes, serving a web page and JSON endpoints to
//! list, inspect and operate runs. Nothing is exposed unless the service mounts it,
//! and the service puts its own auth in front with a layer:
//!
//! ```no_run
//! use axum::{Router, extract::Request, http::StatusCode, middleware::{self, Next}, response::Response};
//! use reel_inspector::InspectorOptions;
//!
//! async fn admins_only(req: Request, next: Next) -> Result<Response, StatusCode> {
//!     match req.headers().get("authorization") {
//!         Some(v) if v == "Bearer secret" => Ok(next.run(req).await),
//!         _ => Err(StatusCode::UNAUTHORIZED),
//!     }
//! }
//!
//! # async fn serve(host: reel::Host) -> std::io::Result<()> {
//! let admin = reel_inspector::router(host, InspectorOptions::default())
//!     .layer(middleware::from_fn(admins_only));
//! let app = Router::new().nest("/admin", admin);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! Routes (relative to where it is mounted):
//!
//! | route | what |
//! | --- | --- |
//! | `GET /` | the web page (runs table; `#/run/ID` a run's timeline); nested at `/admin` it is `GET /admin` (axum does not route `/admin/` to it) |
//! | `GET /api/runs?status=failed,parked&workflow=&version=&parent=&created_after=&created_before=&limit=&cursor=&order=asc\|desc` | one page of runs, `{"runs", "next"}` (`next`: the cursor of the next page); another parameter is a 400 |
//! | `GET /api/count` | `{"total", "by_status"}` |
//! | `GET /api/runs/{id}` | the run: status, children, creation time |
//! | `GET /api/runs/{id}/records?after=&limit=` | its log, payloads decoded to JSON ([`event_to_json`]); `{"records", "next"}` (`next`: the `after` of the next page; `limit` at least 1) |
//! | `GET /api/runs/{id}/watch` | its records as server-sent events (`id` = sequence number; a resume with `Last-Event-ID` goes on from that position; `created_at` (ms, as in the run's info) keeps the watch and its resumes to that run: none of a later run under its id) |
//! | `POST /api/runs/{id}/{signal,cancel,terminate,pause,resume,retry,fork,delete}` | the actions; 403 in read-only mode; a signal's JSON payload is sent as MessagePack as it is (an object's keys are strings: a wait on a map keyed by numbers cannot take it) |
//!
//! Errors are JSON `{"error": "..."}`: 400 malformed input, 403 read-only, 404
//! unknown run, 409 the run's state does not allow it (or a fork's cut).
//!
//! # Layout
//!
//! - `api.rs`: the JSON routes and the actions.
//! - `ops.rs`: the operating calls the routes make, one function per operation
//!   (an adapter until issue 12's operating API is merged; see its doc).
//! - `event_json.rs`: records and events as JSON, payloads decoded.
//! - `error.rs`: failures as status codes and messages.
//! - `page.rs`, `assets/`: the web page (HTML, CSS, vanilla JS; no build step).

pub(crate) mod api;
mod error;
mod event_json;
mod ops;
mod page;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use reel::Host;

pub use api::run_info_to_json;
pub use event_json::{event_to_json, failure_to_json, payload_to_json, record_to_json, unix_ms};

/// How the inspector behaves.
#[derive(Debug, Clone)]
pub struct InspectorOptions {
    /// Turns the actions off: every action answers 403 and the page hides them.
    pub read_only: bool,
    /// The largest page of runs a listing returns (`limit`).
    pub max_page: usize,
}

impl Default for InspectorOptions {
    fn default() -> Self {
        InspectorOptions {
            read_only: false,
            max_page: 1000,
        }
    }
}

#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) host: Host,
    pub(crate) opts: Arc<InspectorOptions>,
}

/// The inspector's routes for `host`, to mount with
/// `Router::new().nest("/admin", reel_inspector::router(host, options))`.
pub fn router(host: Host, options: InspectorOptions) -> Router {
    let state = AppState {
        host,
        opts: Arc::new(options),
    };
    Router::new()
        .route("/", get(page::index))
        .route("/api/runs", get(api::list))
        .route("/api/count", get(api::count))
        .route("/api/runs/{id}", get(api::get))
        .route("/api/runs/{id}/records", get(api::records))
        .route("/api/runs/{id}/watch", get(api::watch))
        .route("/api/runs/{id}/signal", post(api::signal))
        .route("/api/runs/{id}/cancel", post(api::cancel))
        .route("/api/runs/{id}/terminate", post(api::terminate))
        .route("/api/runs/{id}/pause", post(api::pause))
        .route("/api/runs/{id}/resume", post(api::resume))
        .route("/api/runs/{id}/retry", post(api::retry))
        .route("/api/runs/{id}/fork", post(api::fork))
        .route("/api/runs/{id}/delete", post(api::delete))
        .with_state(state)
}
