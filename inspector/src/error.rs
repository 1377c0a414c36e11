//! [`ApiError`]: every failure of a route as a status code and a JSON message
//! (`{"error": "..."}`). Errors of user input are 4xx; only the host's own
//! failures (storage, shutdown) are 5xx.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A route's failure: a status and a sentence.
#[derive(Debug)]
pub(crate) struct ApiError {
    /// The HTTP status.
    pub(crate) status: StatusCode,
    /// What went wrong, for a person.
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<reel::Error> for ApiError {
    fn from(e: reel::Error) -> ApiError {
        use reel::Error as E;
        let status = match &e {
            E::UnknownRun(_) | E::UnknownWorkflow(_) => StatusCode::NOT_FOUND,
            E::InvalidState { .. } | E::RunFinished(_) | E::RunExists { .. } => {
                StatusCode::CONFLICT
            }
            // The run's code, or its queue (a fork's), is not registered on this
            // host: its state, not the request, is what stands in the way.
            E::InvalidCut { .. } | E::VersionMismatch { .. } | E::UnknownQueue(_) => {
                StatusCode::CONFLICT
            }
            E::InvalidArgument(_)
            | E::ReservedName(_)
            | E::Codec(_)
            | E::WorkflowMismatch { .. } => StatusCode::BAD_REQUEST,
            E::Shutdown | E::StoreLocked { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}
