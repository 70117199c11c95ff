//! The HTTP surface: the accept loop, routes, authentication, bounded bodies. Handlers
//! are thin: the work is in `manage` and `select`.
//!
//! What a client can make the server hold is bounded before it is held:
//! - connections: at most `max_connections` open (one more is answered 503 `overloaded`
//!   and closed); headers must arrive within `header_read_timeout_ms`, which is also the
//!   longest a kept-alive connection may idle; at most [`MAX_HEADER_BUFFER`] of them;
//! - bodies: every route authenticates from the headers first, so a refused caller never
//!   gets a byte of its body buffered; then each route reads at most its own limit
//!   (`max_body_bytes` for uploads, `max_select_body_bytes`, `max_management_body_bytes`)
//!   within `body_read_timeout_ms`;
//! - selections: at most `max_inflight_selections` from authentication to answer, each
//!   on a blocking thread (one more is answered 503 `overloaded`); of those, a tenant's
//!   own at most `max_in_flight_per_tenant` (429 `tenant-busy`), counted before the
//!   server-wide cap when the tenant's token calls, so no tenant can hold every slot.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use switchyard::selection::wire::{ErrorBody, ErrorKind};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::auth::{Principal, identify, require_admin, require_tenant};
use crate::config::ServiceLimits;
use crate::error::ApiError;
use crate::metrics;
use crate::state::Service;

/// The most a connection buffers while reading a request's headers (hyper's read
/// buffer): a request whose headers are larger is refused. Our requests' headers are a
/// few hundred bytes.
pub const MAX_HEADER_BUFFER: usize = 64 << 10;

/// The longest a refused request's body is read (and dropped) so that a client still
/// sending it sees the answer rather than a reset connection. Never buffered.
const REFUSAL_DRAIN: Duration = Duration::from_secs(1);

/// The label of a refusal counter: the cap that was reached, by its setting's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CapLabels {
    limit: &'static str,
}

/// Server-wide caps and what they refused.
pub struct Gate {
    connections: Arc<Semaphore>,
    max_connections: usize,
    selections: Arc<Semaphore>,
    max_selections: usize,
    /// Refusals by cap: what a scrape encodes. Counted through the two handles below,
    /// taken once, so a refusal never looks into the family.
    refused: Family<CapLabels, Counter>,
    refused_connections: Counter,
    refused_selections: Counter,
}

impl Gate {
    /// The caps `limits` sets, none of them in use yet.
    pub fn new(limits: &ServiceLimits) -> Self {
        let refused = Family::<CapLabels, Counter>::default();
        let refused_connections = refused.get_or_create_owned(&CapLabels { limit: "max_connections" });
        let refused_selections = refused.get_or_create_owned(&CapLabels { limit: "max_inflight_selections" });
        Self {
            connections: Arc::new(Semaphore::new(limits.max_connections)),
            max_connections: limits.max_connections,
            selections: Arc::new(Semaphore::new(limits.max_inflight_selections)),
            max_selections: limits.max_inflight_selections,
            refused,
            refused_connections,
            refused_selections,
        }
    }

    /// Selections between authentication and answer now.
    pub fn selections_in_flight(&self) -> usize {
        self.max_selections - self.selections.available_permits()
    }

    /// Connections open now.
    pub fn connections_open(&self) -> usize {
        self.max_connections - self.connections.available_permits()
    }

    /// Registers the refusals and what is in use now, for one scrape.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "switchyard_overloaded",
            "Requests refused because a server-wide cap was reached, by the cap",
            self.refused.clone(),
        );
        registry.register(
            "switchyard_selections_in_flight",
            "Selections between authentication and answer",
            ConstGauge::new(self.selections_in_flight()),
        );
        registry.register(
            "switchyard_connections_open",
            "Open client connections",
            ConstGauge::new(self.connections_open()),
        );
    }
}

/// What every handler sees.
pub struct Http {
    service: Arc<Service>,
    gate: Arc<Gate>,
}

type Svc = State<Arc<Http>>;
type Answer = Result<Response, ApiError>;

/// Every route of the service, behind `gate`'s caps.
fn app(service: Arc<Service>, gate: Arc<Gate>) -> Router {
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
        .fallback(|| async { ApiError::not_found(ErrorKind::NotFound, "no such endpoint") })
        .with_state(Arc::new(Http { service, gate }))
}

/// Every route of the service with server-wide caps of its own, for in-process use
/// (tower's `oneshot`, no socket): what [`serve`] runs behind its accept loop, so its
/// connection cap and header timeout do not apply. Like `serve`, it needs a
/// multi-threaded tokio runtime (writes block in place). The `api` fuzz target drives it.
pub fn router(service: Arc<Service>) -> Router {
    let gate = Arc::new(Gate::new(&service.limits));
    app(service, gate)
}

/// Serves HTTP/1.1 on `listener` until `shutdown` completes, then lets open connections
/// finish (at most 10 s). At most `max_connections` are served at once; one more is
/// answered 503 `overloaded` and closed. An accept error (e.g. out of file descriptors)
/// is waited out, never fatal.
pub async fn serve(
    listener: TcpListener,
    service: Arc<Service>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let limits = service.limits.clone();
    let gate = Arc::new(Gate::new(&limits));
    let app = app(service, gate.clone());
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms))
        .max_buf_size(MAX_HEADER_BUFFER);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = gate.connections.clone().try_acquire_owned() else {
            gate.refused_connections.inc();
            tokio::spawn(refuse_connection(stream, gate.max_connections));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = stopped.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    let _ = stop.send(true);
    let all = u32::try_from(gate.max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(Duration::from_secs(10), gate.connections.acquire_many(all)).await;
    Ok(())
}

/// Answers a connection over `max_connections` with 503 `overloaded` and closes it,
/// after reading (and dropping) briefly what the client sent, so it sees the answer.
async fn refuse_connection(mut stream: TcpStream, max: usize) {
    let body = ErrorBody::new(
        ErrorKind::Overloaded,
        format!("the server has {max} connections open, the most `max_connections` allows; retry"),
    );
    let body = serde_json::to_string(&body).expect("an error body always serialises");
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut budget = 64 << 10;
        while budget > 0 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => budget -= n.min(budget),
            }
        }
        std::io::Result::Ok(())
    })
    .await;
}

/// A route's body limit: its bytes and the setting's name (for the 413's message).
#[derive(Clone, Copy)]
enum Limit {
    Upload,
    Select,
    Management,
}

impl Limit {
    fn bytes(self, limits: &ServiceLimits) -> usize {
        match self {
            Limit::Upload => limits.max_body_bytes,
            Limit::Select => limits.max_select_body_bytes,
            Limit::Management => limits.max_management_body_bytes,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Limit::Upload => "max_body_bytes",
            Limit::Select => "max_select_body_bytes",
            Limit::Management => "max_management_body_bytes",
        }
    }
}

/// Reads `body` to its end, or until more than `cap` bytes have arrived, keeping its
/// bytes only while they are at most `keep` in all: (what was kept, how many arrived).
async fn drain(mut body: Body, keep: usize, cap: usize) -> Result<(Vec<u8>, usize), axum::Error> {
    let mut bytes = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            seen = seen.saturating_add(data.len());
            if seen > cap {
                break;
            }
            if seen <= keep {
                bytes.extend_from_slice(&data);
            }
        }
    }
    Ok((bytes, seen))
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
}

impl Http {
    fn limits(&self) -> &ServiceLimits {
        &self.service.limits
    }

    fn who(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        identify(headers, &self.service.admin_sha256, self.service.snapshot().tokens())
    }

    /// Reads the body, at most `limit`'s bytes, within `body_read_timeout_ms`. A body
    /// over the limit is refused 413 `body-too-large` naming the limit: when it declares
    /// a length over 4× the limit at once, unread; otherwise after reading it to its end
    /// (dropping what is over the limit), so the client sees the answer rather than a
    /// reset connection. A body not received in time is 408 `body-timeout`.
    async fn read_body(&self, headers: &HeaderMap, body: Body, limit: Limit) -> Result<Vec<u8>, ApiError> {
        let max = limit.bytes(self.limits());
        let too_large = || {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorKind::BodyTooLarge,
                format!("the body is larger than {max} bytes (`{}`)", limit.name()),
            )
        };
        let drain_cap = max.saturating_mul(4);
        if declared_length(headers).is_some_and(|n| n > drain_cap as u64) {
            return Err(too_large());
        }
        let timeout = Duration::from_millis(self.limits().body_read_timeout_ms);
        let read = async {
            let (bytes, seen) = drain(body, max, drain_cap).await.map_err(|e| {
                ApiError::bad_request(ErrorKind::InvalidBody, format!("reading the body: {e}"))
            })?;
            if seen > max { Err(too_large()) } else { Ok(bytes) }
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(result) => result,
            Err(_) => Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                ErrorKind::BodyTimeout,
                format!("the body did not arrive within {} ms (`body_read_timeout_ms`)", timeout.as_millis()),
            )),
        }
    }

    /// `refusal`, after reading and dropping at most `limit`'s bytes of the body for at
    /// most [`REFUSAL_DRAIN`] (nothing is kept), so a client still sending sees the
    /// answer. A body declared over the limit is not read at all.
    async fn refuse(&self, refusal: ApiError, headers: &HeaderMap, body: Body, limit: Limit) -> ApiError {
        let max = limit.bytes(self.limits());
        if declared_length(headers).is_none_or(|n| n <= max as u64) {
            let within = REFUSAL_DRAIN.min(Duration::from_millis(self.limits().body_read_timeout_ms));
            let _ = tokio::time::timeout(within, drain(body, 0, max)).await;
        }
        refusal
    }

    /// The caller, if `allowed`; else the refusal, without buffering the body.
    async fn authorize(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: Limit,
        allowed: impl FnOnce(&Principal) -> Result<(), ApiError>,
    ) -> Result<(Principal, Body), ApiError> {
        match self.who(headers).and_then(|who| allowed(&who).map(|()| who)) {
            Ok(who) => Ok((who, body)),
            Err(refusal) => Err(self.refuse(refusal, headers, body, limit).await),
        }
    }
}

fn json_answer(status: StatusCode, value: impl serde::Serialize) -> Response {
    (status, axum::Json(value)).into_response()
}

/// `/metrics`: the service's metrics, then the gate's and the artifact cache's, as one
/// Prometheus text.
async fn metrics(State(http): Svc) -> Response {
    let mut registry = Registry::default();
    http.service.register_metrics(&mut registry);
    http.gate.register_metrics(&mut registry);
    let cache = http.service.loader.engine.artifact_cache();
    registry.register(
        "switchyard_artifacts_rejected",
        "Cached compiled artifacts refused (digest, owner, mode or symlink check) and recompiled instead",
        ConstCounter::new(cache.map_or(0, |cache| cache.rejected())),
    );
    registry.register(
        "switchyard_artifact_load_digests",
        "Digests of compiled artifacts computed on a load's path (none for an artifact checked before and unchanged: by an earlier load, or by the eviction pass after it was written)",
        ConstCounter::new(cache.map_or(0, |cache| cache.digests_checked())),
    );
    registry.register(
        "switchyard_artifacts_checked_ahead",
        "Compiled artifacts this server wrote, checked once settled ahead of any load (by the eviction pass, or just after a tier-up)",
        ConstCounter::new(cache.map_or(0, |cache| cache.checked_ahead())),
    );
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], metrics::encode(&registry)).into_response()
}

async fn add_tenant(State(http): Svc, headers: HeaderMap, body: Body) -> Answer {
    let (who, body) = http.authorize(&headers, body, Limit::Management, require_admin).await?;
    let body = http.read_body(&headers, body, Limit::Management).await?;
    Ok(json_answer(StatusCode::CREATED, http.service.add_tenant(&who, &body).await?))
}

async fn add_router(State(http): Svc, headers: HeaderMap, body: Body) -> Answer {
    let (who, body) = http.authorize(&headers, body, Limit::Management, require_admin).await?;
    let body = http.read_body(&headers, body, Limit::Management).await?;
    Ok(json_answer(StatusCode::CREATED, http.service.add_router(&who, &body).await?))
}

async fn list(State(http): Svc, headers: HeaderMap, Path(tenant): Path<String>) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.list(&who, &tenant)?))
}

async fn upload(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    body: Body,
) -> Answer {
    let params = query.get("params").cloned();
    // Whatever the body holds, an upload this refuses (the caller, the name, the
    // parameters' size, the tenant's policy count and write rates) is refused unread.
    let precheck = |w: &Principal| http.service.precheck_upload(w, &tenant, &name, params.as_deref());
    let (who, body) = http.authorize(&headers, body, Limit::Upload, precheck).await?;
    let bytes = http.read_body(&headers, body, Limit::Upload).await?;
    Ok(json_answer(StatusCode::CREATED, http.service.upload(&who, &tenant, &name, params, bytes).await?))
}

async fn rollback(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, name)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.rollback(&who, &tenant, &name).await?))
}

async fn assign(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
    body: Body,
) -> Answer {
    let (who, body) =
        http.authorize(&headers, body, Limit::Management, |w| require_tenant(w, &tenant)).await?;
    let body = http.read_body(&headers, body, Limit::Management).await?;
    Ok(json_answer(StatusCode::OK, http.service.assign(&who, &tenant, &class, &body).await?))
}

async fn select(State(http): Svc, headers: HeaderMap, body: Body) -> Answer {
    // Who may select for which tenant is in the body; whether the caller is anyone at
    // all is in the headers, and is settled first.
    let (who, body) = http.authorize(&headers, body, Limit::Select, |_| Ok(())).await?;
    // A tenant's own share first, before any server-wide slot: its selections in flight,
    // bodies still arriving included, are at most `max_in_flight_per_tenant` (429 beyond),
    // so it can never hold every slot. A router or the admin names the tenant in the
    // body: that tenant's share is taken once the body is read (`Service::select`).
    let share = match &who {
        Principal::Tenant(tenant) => match http.service.enter(tenant) {
            Ok(share) => Some(share),
            Err(refusal) => return Err(http.refuse(refusal, &headers, body, Limit::Select).await),
        },
        Principal::Admin | Principal::Router(_) => None,
    };
    let Ok(permit) = http.gate.selections.clone().try_acquire_owned() else {
        drop(share);
        http.gate.refused_selections.inc();
        let refusal = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Overloaded,
            format!(
                "{} selections are in flight, the most `max_inflight_selections` allows; retry",
                http.gate.max_selections
            ),
        );
        let refusal = http.refuse(refusal, &headers, body, Limit::Select).await;
        let mut response = refusal.into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return Ok(response);
    };
    let body = http.read_body(&headers, body, Limit::Select).await?;
    let service = http.service.clone();
    // Guest calls are CPU work: keep them off the async workers. The permit is held until
    // the selection is done, even if the client has gone.
    let answer = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        service.select(&who, share, &body)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the selection thread: {e}")))??;
    Ok(json_answer(StatusCode::OK, answer))
}
