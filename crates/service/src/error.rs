//! The service's one error shape: an HTTP status, a stable kind, and a message, answered
//! as `{"error": {"kind": "...", "message": "..."}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use switchyard::LoadError;
use switchyard::selection::wire::{ErrorBody, ErrorKind};

/// A refusal or failure, as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    kind: ErrorKind,
    message: String,
}

impl ApiError {
    /// `status` with `kind`.
    pub fn new(status: StatusCode, kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { status, kind, message: message.into() }
    }

    /// 400 with `kind`.
    pub fn bad_request(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, kind, message)
    }

    /// 500: our fault, not the client's (storage, a panicked worker thread).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorKind::Internal, message)
    }

    /// 404 with `kind`.
    pub fn not_found(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, kind, message)
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What to fix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<LoadError> for ApiError {
    /// A refused component: 400 with the same kind `switchyard policy check` prints.
    fn from(e: LoadError) -> Self {
        Self::bad_request(e.kind.into(), e.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Every refusal is logged once, here (messages name the tenant, policy or limit).
        let status = self.status.as_u16();
        if self.status.is_server_error() {
            tracing::warn!(status, kind = %self.kind, message = %self.message, "request failed");
        } else {
            tracing::info!(status, kind = %self.kind, message = %self.message, "request refused");
        }
        (self.status, axum::Json(ErrorBody::new(self.kind, self.message))).into_response()
    }
}
