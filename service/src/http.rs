//! The HTTP surface: routes, authentication, bounded bodies. Handlers are thin: the
//! work is in `manage` and `select`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::auth::{Principal, identify};
use crate::error::ApiError;
use crate::state::Service;

type Svc = State<Arc<Service>>;
type Answer = Result<Response, ApiError>;

/// Every route of the service.
pub fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .route("/v1/tenants", post(add_tenant))
        .route("/v1/routers", post(add_router))
        .route("/v1/tenants/{tenant}/policies", get(list))
        .route("/v1/tenants/{tenant}/policies/{name}", put(upload))
        .route("/v1/tenants/{tenant}/policies/{name}/rollback", post(rollback))
        .route("/v1/tenants/{tenant}/classes/{class}", put(assign))
        .route("/v1/select", post(select))
        .fallback(|| async { ApiError::not_found("not-found", "no such endpoint") })
        .with_state(service)
}

/// Reads at most `limit` bytes. A larger body is read to its end (up to 4× the limit)
/// and discarded, so the client gets its 413 instead of a reset connection.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            format!("the body is larger than {limit} bytes (`max_body_bytes`)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit.saturating_mul(4)) {
        return Err(too_large());
    }
    let mut body = body;
    let mut bytes = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::bad_request("invalid-body", format!("reading the body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            if seen > limit.saturating_mul(4) {
                break;
            }
            if seen <= limit {
                bytes.extend_from_slice(&data);
            }
        }
    }
    if seen > limit { Err(too_large()) } else { Ok(bytes) }
}

fn who(service: &Service, headers: &HeaderMap) -> Result<Principal, ApiError> {
    identify(headers, &service.admin_sha256, service.snapshot().manifest())
}

fn json(status: StatusCode, value: Value) -> Response {
    (status, axum::Json(value)).into_response()
}

async fn metrics(State(service): Svc) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], service.render_metrics()).into_response()
}

async fn add_tenant(State(service): Svc, headers: HeaderMap, body: Body) -> Answer {
    let body = read_body(&headers, body, service.limits.max_body_bytes).await?;
    let who = who(&service, &headers)?;
    Ok(json(StatusCode::CREATED, service.add_tenant(&who, &body).await?))
}

async fn add_router(State(service): Svc, headers: HeaderMap, body: Body) -> Answer {
    let body = read_body(&headers, body, service.limits.max_body_bytes).await?;
    let who = who(&service, &headers)?;
    Ok(json(StatusCode::CREATED, service.add_router(&who, &body).await?))
}

async fn list(State(service): Svc, headers: HeaderMap, Path(tenant): Path<String>) -> Answer {
    let who = who(&service, &headers)?;
    Ok(json(StatusCode::OK, service.list(&who, &tenant)?))
}

async fn upload(
    State(service): Svc,
    headers: HeaderMap,
    Path((tenant, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    body: Body,
) -> Answer {
    // Authenticate before keeping a possibly large body; a refused body is still read
    // (and dropped) so the client sees the answer rather than a reset connection.
    let limit = service.limits.max_body_bytes;
    let who = match who(&service, &headers).and_then(|w| crate::auth::require_tenant(&w, &tenant).map(|()| w))
    {
        Ok(who) => who,
        Err(e) => {
            let _ = read_body(&headers, body, limit).await;
            return Err(e);
        }
    };
    let bytes = read_body(&headers, body, limit).await?;
    let params = query.get("params").cloned();
    Ok(json(StatusCode::CREATED, service.upload(&who, &tenant, &name, params, bytes).await?))
}

async fn rollback(
    State(service): Svc,
    headers: HeaderMap,
    Path((tenant, name)): Path<(String, String)>,
) -> Answer {
    let who = who(&service, &headers)?;
    Ok(json(StatusCode::OK, service.rollback(&who, &tenant, &name).await?))
}

async fn assign(
    State(service): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
    body: Body,
) -> Answer {
    let body = read_body(&headers, body, service.limits.max_body_bytes).await?;
    let who = who(&service, &headers)?;
    Ok(json(StatusCode::OK, service.assign(&who, &tenant, &class, &body).await?))
}

async fn select(State(service): Svc, headers: HeaderMap, body: Body) -> Answer {
    let body = read_body(&headers, body, service.limits.max_body_bytes).await?;
    let who = who(&service, &headers)?;
    // Guest calls are CPU work: keep them off the async workers.
    let answer = tokio::task::spawn_blocking(move || service.select(&who, &body))
        .await
        .map_err(|e| ApiError::internal(format!("the selection thread: {e}")))??;
    Ok(json(StatusCode::OK, answer))
}
