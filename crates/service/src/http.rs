//! The HTTP surface: the accept loop, routes, authentication, bounded bodies. Handlers
//! are thin: the work is in `manage` and `select`.
//!
//! Whatever one tenant or one unauthenticated peer sends, every other tenant's uploads
//! and selections go on: what a client can make the server hold is bounded before it is
//! held, and no one caller can hold all of anything.
//! - connections: at most `max_connections` open. One that sends nothing is closed after
//!   `first_byte_timeout_ms`; at the cap, the one idle longest (no request in progress)
//!   is closed to make room, and only when every one has a request in progress is a new
//!   one answered 503 `overloaded` and closed. Headers must arrive within
//!   `header_read_timeout_ms`, which is also the longest a kept-alive connection may
//!   idle; at most [`MAX_HEADER_BUFFER`] of them (431 beyond);
//! - bodies: every route authenticates from the headers first, so a refused caller never
//!   gets a byte of its body buffered; then each route reads at most its own limit
//!   (`max_body_bytes` for uploads, `max_select_body_bytes`, `max_management_body_bytes`)
//!   within `body_read_timeout_ms`;
//! - uploads: before a byte of the body is read, a tenant's share
//!   (`max_uploads_per_tenant`, 429 `tenant-busy`), then the body's declared length in
//!   the server-wide budget (`max_buffered_upload_bytes`, 503 `overloaded`), then its
//!   charge to the tenant's write rates (429 `rate-limited`);
//! - selections: at most `max_inflight_selections` from authentication to answer, each
//!   on a blocking thread (one more is answered 503 `overloaded`); before that cap, a
//!   tenant's own token at most `max_in_flight_per_tenant` (429 `tenant-busy`) and a
//!   router's at most `max_in_flight_per_router` (429 `router-busy`), bodies still
//!   arriving included, so no tenant and no router can hold every slot.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use switchyard::selection::wire::{ErrorBody, ErrorKind};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};

use crate::auth::{Principal, identify, require_admin, require_selector, require_tenant};
use crate::config::ServiceLimits;
use crate::error::ApiError;
use crate::metrics;
use crate::rates::WriteKind;
use crate::select::{Encoding, InFlight};
use crate::state::Service;
use switchyard::selection::wire::{TableDelta, TableJson};

/// The most a connection buffers while reading a request's headers (hyper's read
/// buffer), and the largest head (request line and headers) a request may have: a
/// larger one is answered 431 and the connection closed. Our requests' headers are a
/// few hundred bytes.
pub const MAX_HEADER_BUFFER: usize = 64 << 10;

/// The longest a refused request's body is read (and dropped) so that a client still
/// sending it sees the answer rather than a reset connection. Never buffered.
const REFUSAL_DRAIN: Duration = Duration::from_secs(1);

/// How long a connection closed to make room may still finish writing an answer it was
/// sending (it had no request in progress) before it is dropped.
const EVICTION_GRACE: Duration = Duration::from_millis(500);

/// How long open connections may finish their requests once the server stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A mutex's contents, whether or not a thread panicked holding it (every value kept
/// behind these is a count, valid at any point).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The label of a refusal counter: the cap that was reached, by its setting's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CapLabels {
    limit: &'static str,
}

/// Requests in flight per name (a tenant's uploads, a router's selections), at most
/// `max` each. A name has an entry only while it has one in flight, so the map never
/// outgrows the callers of the moment.
struct Shares {
    max: usize,
    held: Mutex<HashMap<String, usize>>,
}

/// One request counted in its name's share; uncounted when dropped, however the request
/// ends.
struct Share {
    shares: Arc<Shares>,
    name: String,
}

impl Shares {
    fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { max, held: Mutex::default() })
    }

    /// One more request of `name`, or how many it has in flight already (all of its share).
    fn enter(self: &Arc<Self>, name: &str) -> Result<Share, usize> {
        let mut held = lock(&self.held);
        let n = held.get(name).copied().unwrap_or(0);
        if n >= self.max {
            return Err(n);
        }
        held.insert(name.to_string(), n + 1);
        Ok(Share { shares: Arc::clone(self), name: name.to_string() })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = lock(&self.shares.held);
        if let Some(n) = held.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.name);
            }
        }
    }
}

/// Bytes that may be held at once, all callers together (`max_buffered_upload_bytes`).
struct Budget {
    max: usize,
    used: AtomicUsize,
}

/// Bytes reserved in a [`Budget`]; given back when dropped.
struct Reserved {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Budget {
    /// `bytes` more, or how many are reserved already when they do not fit.
    fn reserve(self: &Arc<Self>, bytes: usize) -> Result<Reserved, usize> {
        let fits = |used: usize| used.checked_add(bytes).filter(|&total| total <= self.max);
        match self.used.try_update(Ordering::AcqRel, Ordering::Acquire, fits) {
            Ok(_) => Ok(Reserved { budget: Arc::clone(self), bytes }),
            Err(used) => Err(used),
        }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// What a connection is doing, as the cap sees it.
#[derive(Clone, Copy)]
enum Activity {
    /// No request in progress since this instant (accepted then, or its last answer
    /// written then): it may be closed to make room.
    Idle(Instant),
    /// This many requests in progress (HTTP/1.1 serves one at a time; a count keeps the
    /// bookkeeping right whatever hyper overlaps).
    Busy(usize),
    /// Closed to make room: it takes no more requests.
    Closed,
}

/// One open connection: what it is doing, and how to tell its task to close it.
struct Connection {
    id: u64,
    activity: Mutex<Activity>,
    close: Notify,
}

impl Connection {
    /// A request starts: the connection is busy until the returned guard drops (once its
    /// answer is written). `None` if it was closed to make room meanwhile.
    fn begin(self: &Arc<Self>) -> Option<InProgress> {
        let mut activity = lock(&self.activity);
        *activity = match *activity {
            Activity::Closed => return None,
            Activity::Idle(_) => Activity::Busy(1),
            Activity::Busy(n) => Activity::Busy(n + 1),
        };
        Some(InProgress(Arc::clone(self)))
    }
}

/// A request in progress on a connection: its answer is still being made or written.
struct InProgress(Arc<Connection>);

impl Drop for InProgress {
    fn drop(&mut self) {
        let mut activity = lock(&self.0.activity);
        *activity = match *activity {
            Activity::Busy(1) => Activity::Idle(Instant::now()),
            Activity::Busy(n) => Activity::Busy(n - 1),
            other => other,
        };
    }
}

/// The open connections (`max_connections`), each with what it is doing.
struct Connections {
    max: usize,
    open: Mutex<HashMap<u64, Arc<Connection>>>,
    next_id: AtomicU64,
}

/// A connection's place among the open ones; given back when its task ends.
struct Slot {
    connections: Arc<Connections>,
    connection: Arc<Connection>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.connections.open).remove(&self.connection.id);
    }
}

impl Connections {
    /// A place for a new connection, and whether an idle one was closed to make it;
    /// `None` when all `max` have a request in progress.
    fn admit(self: &Arc<Self>) -> Option<(Slot, bool)> {
        let mut open = lock(&self.open);
        let evicted = open.len() >= self.max;
        if evicted {
            let idlest = open.values().filter_map(|c| match *lock(&c.activity) {
                Activity::Idle(since) => Some((since, c.id)),
                Activity::Busy(_) | Activity::Closed => None,
            });
            // The one idle longest may have started a request since the scan: its state
            // is read again and changed under its lock, which `begin` takes too, and a
            // connection busy by then is left alone (the new one is refused).
            let (_, id) = idlest.min()?;
            let idlest = Arc::clone(&open[&id]);
            let mut activity = lock(&idlest.activity);
            if !matches!(*activity, Activity::Idle(_)) {
                return None;
            }
            *activity = Activity::Closed;
            drop(activity);
            open.remove(&id);
            idlest.close.notify_one();
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Mutex::new(Activity::Idle(Instant::now()));
        let connection = Arc::new(Connection { id, activity, close: Notify::new() });
        open.insert(id, Arc::clone(&connection));
        Some((Slot { connections: Arc::clone(self), connection }, evicted))
    }

    fn len(&self) -> usize {
        lock(&self.open).len()
    }
}

/// Server-wide caps and what they refused.
pub struct Gate {
    connections: Arc<Connections>,
    selections: Arc<Semaphore>,
    max_selections: usize,
    /// Each router's selections in flight (`max_in_flight_per_router`).
    routers: Arc<Shares>,
    /// Each tenant's uploads in flight (`max_uploads_per_tenant`).
    uploads: Arc<Shares>,
    /// Upload body bytes reserved (`max_buffered_upload_bytes`).
    upload_bytes: Arc<Budget>,
    /// Refusals by cap: what a scrape encodes. Counted through the handles below, taken
    /// once, so a refusal never looks into the family.
    refused: Family<CapLabels, Counter>,
    refused_connections: Counter,
    refused_selections: Counter,
    refused_upload_bytes: Counter,
    /// Idle connections closed at `max_connections` to make room for a new one.
    evicted: Counter,
}

impl Gate {
    /// The caps `limits` sets, none of them in use yet.
    pub fn new(limits: &ServiceLimits) -> Self {
        let refused = Family::<CapLabels, Counter>::default();
        let cap = |limit| refused.get_or_create_owned(&CapLabels { limit });
        let (refused_connections, refused_selections, refused_upload_bytes) =
            (cap("max_connections"), cap("max_inflight_selections"), cap("max_buffered_upload_bytes"));
        let connections =
            Connections { max: limits.max_connections, open: Mutex::default(), next_id: AtomicU64::new(0) };
        let upload_bytes = Budget { max: limits.max_buffered_upload_bytes, used: AtomicUsize::new(0) };
        Self {
            connections: Arc::new(connections),
            selections: Arc::new(Semaphore::new(limits.max_inflight_selections)),
            max_selections: limits.max_inflight_selections,
            routers: Shares::new(limits.router_share()),
            uploads: Shares::new(limits.max_uploads_per_tenant),
            upload_bytes: Arc::new(upload_bytes),
            refused,
            refused_connections,
            refused_selections,
            refused_upload_bytes,
            evicted: Counter::default(),
        }
    }

    /// Selections between authentication and answer now.
    pub fn selections_in_flight(&self) -> usize {
        self.max_selections - self.selections.available_permits()
    }

    /// Connections open now.
    pub fn connections_open(&self) -> usize {
        self.connections.len()
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
        registry.register(
            "switchyard_connections_evicted",
            "Idle connections closed at max_connections to make room for a new one",
            self.evicted.clone(),
        );
        registry.register(
            "switchyard_upload_bytes_reserved",
            "Upload body bytes reserved by uploads in progress (at most max_buffered_upload_bytes)",
            ConstGauge::new(self.upload_bytes.used.load(Ordering::Acquire)),
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
        .route("/v1/tenants/{tenant}/policies/{name}/rollforward", post(rollforward))
        .route("/v1/tenants/{tenant}/classes/{class}", put(assign))
        .route(
            "/v1/tenants/{tenant}/classes/{class}/shadow",
            put(set_shadow).get(shadow_report).delete(clear_shadow),
        )
        .route("/v1/tenants/{tenant}/classes/{class}/canary", put(set_canary).get(canary_status))
        .route("/v1/tenants/{tenant}/classes/{class}/canary/promote", post(promote))
        .route("/v1/tenants/{tenant}/classes/{class}/canary/abort", post(abort))
        .route(
            "/v1/tenants/{tenant}/classes/{class}/capture",
            put(set_capture).get(captured).delete(clear_capture),
        )
        .route("/v1/tenants/{tenant}/tables/{table}", put(put_table).get(table_state).delete(delete_table))
        .route("/v1/tenants/{tenant}/tables/{table}/deltas", post(change_table))
        .route("/v1/select", post(select))
        .fallback(|| async { ApiError::not_found(ErrorKind::NotFound, "no such endpoint") })
        // Axum keeps its `Allow` header on this answer: it lists the methods the route has.
        .method_not_allowed_fallback(|method: Method| async move {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                ErrorKind::MethodNotAllowed,
                format!("this endpoint does not take {method} (`Allow` lists what it takes)"),
            )
        })
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
/// finish (at most 10 s). At most `max_connections` are open at once: at the cap, the
/// one idle longest is closed to make room; when none is idle, the new one is answered
/// 503 `overloaded` and closed. An accept error (e.g. out of file descriptors) is waited
/// out, never fatal.
pub async fn serve(
    listener: TcpListener,
    service: Arc<Service>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let limits = service.limits.clone();
    let gate = Arc::new(Gate::new(&limits));
    let app = TowerToHyperService::new(app(service, gate.clone()));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms))
        .max_buf_size(MAX_HEADER_BUFFER)
        // The buffer's size alone is checked only while a head is still arriving: one
        // read can bring in a whole head larger than it.
        .max_header_size(MAX_HEADER_BUFFER);
    let first_byte = Duration::from_millis(limits.first_byte_timeout_ms);
    let (stop, stopped) = watch::channel(false);
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
        let Some((slot, evicted)) = gate.connections.admit() else {
            gate.refused_connections.inc();
            tokio::spawn(refuse_connection(stream, gate.connections.max));
            continue;
        };
        if evicted {
            gate.evicted.inc();
        }
        let _ = stream.set_nodelay(true);
        let connection =
            ConnectionTask { slot, builder: builder.clone(), app: app.clone(), stopped: stopped.clone() };
        tokio::spawn(connection.run(stream, first_byte));
    }
    let _ = stop.send(true);
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    while gate.connections_open() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// One accepted connection, served until it ends, is closed to make room, or the server
/// stops.
struct ConnectionTask {
    slot: Slot,
    builder: hyper::server::conn::http1::Builder,
    app: TowerToHyperService<Router>,
    stopped: watch::Receiver<bool>,
}

impl ConnectionTask {
    async fn run(mut self, stream: TcpStream, first_byte: Duration) {
        let connection = Arc::clone(&self.slot.connection);
        // Nothing is allocated for a connection (hyper's buffers, its timers) until its
        // client sends something, and one that sends nothing in time is closed.
        let mut probe = [0u8; 1];
        let sent = tokio::select! {
            peeked = tokio::time::timeout(first_byte, stream.peek(&mut probe)) => {
                matches!(peeked, Ok(Ok(n)) if n > 0)
            }
            () = connection.close.notified() => false,
            _ = self.stopped.changed() => false,
        };
        if !sent {
            return;
        }
        let service = Tracked { app: self.app, connection: Arc::clone(&connection) };
        let served = self.builder.serve_connection(TokioIo::new(stream), service);
        let mut served = std::pin::pin!(served);
        let grace = tokio::select! {
            _ = served.as_mut() => return,
            () = connection.close.notified() => EVICTION_GRACE,
            _ = self.stopped.changed() => SHUTDOWN_GRACE,
        };
        served.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(grace, served).await;
    }
}

/// The routes, marking their connection busy from the moment a request is handed to
/// them (its body still to be read) until its answer has been written.
#[derive(Clone)]
struct Tracked {
    app: TowerToHyperService<Router>,
    connection: Arc<Connection>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = hyper::Response<HeldBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let Some(in_progress) = self.connection.begin() else {
            // Closed to make room just as this request arrived: the client retries on
            // another connection.
            let refusal = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorKind::Overloaded,
                "this connection was idle and was closed to make room for another (`max_connections`); retry",
            );
            let mut response = retry_later(refusal);
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Box::pin(std::future::ready(Ok(
                response.map(|body| HeldBody { body, _in_progress: None })
            )));
        };
        let answer = hyper::service::Service::call(&self.app, request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| HeldBody { body, _in_progress: Some(in_progress) }))
        })
    }
}

/// An answer's body, which keeps its connection busy until hyper has written it (and
/// drops it).
struct HeldBody {
    body: Body,
    _in_progress: Option<InProgress>,
}

impl hyper::body::Body for HeldBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Answers a connection over `max_connections` (every open one has a request in
/// progress) with 503 `overloaded` and closes it, after reading (and dropping) briefly
/// what the client sent, so it sees the answer.
async fn refuse_connection(mut stream: TcpStream, max: usize) {
    let body = ErrorBody::new(
        ErrorKind::Overloaded,
        format!(
            "the server has {max} connections open, each with a request in progress, the most \
             `max_connections` allows; retry"
        ),
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

/// `refusal` as an answer, with `Retry-After: 1` when it is a 503: a cap that frees up
/// as requests end.
fn retry_later(refusal: ApiError) -> Response {
    let unavailable = refusal.status() == StatusCode::SERVICE_UNAVAILABLE;
    let mut response = refusal.into_response();
    if unavailable {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
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
/// bytes only while they are at most `keep` in all (in a buffer of `capacity` to begin
/// with): (what was kept, how many arrived).
async fn drain(
    mut body: Body,
    keep: usize,
    cap: usize,
    capacity: usize,
) -> Result<(Vec<u8>, usize), axum::Error> {
    let mut bytes = Vec::with_capacity(capacity.min(keep));
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

/// An upload's place, taken before its body is read and held until it is answered: one
/// of its tenant's `max_uploads_per_tenant`, and its bytes of `max_buffered_upload_bytes`.
struct UploadPlace {
    _share: Share,
    reserved: Reserved,
}

impl Http {
    fn limits(&self) -> &ServiceLimits {
        &self.service.limits
    }

    fn who(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        identify(headers, &self.service.admin_sha256, self.service.snapshot().tokens())
    }

    /// Reads the body, at most `limit`'s bytes, within `body_read_timeout_ms`, into a
    /// buffer of `capacity` to begin with. A body over the limit is refused 413
    /// `body-too-large` naming the limit: when it declares a length over 4× the limit at
    /// once, unread; otherwise after reading it to its end (dropping what is over the
    /// limit), so the client sees the answer rather than a reset connection. A body not
    /// received in time is 408 `body-timeout`.
    async fn read_body(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: Limit,
        capacity: usize,
    ) -> Result<Vec<u8>, ApiError> {
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
            let (bytes, seen) = drain(body, max, drain_cap, capacity).await.map_err(|e| {
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
            let _ = tokio::time::timeout(within, drain(body, 0, max, 0)).await;
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

    /// An upload of `tenant` (which exists) takes its place before its body is read: one
    /// of the tenant's `max_uploads_per_tenant` (429 `tenant-busy`), then the body's
    /// declared length (`max_body_bytes` when it declares none, or more) of
    /// `max_buffered_upload_bytes` (503 `overloaded`), then its charge to the tenant's
    /// write rates (429 `rate-limited`). So stalled uploads hold at most that much memory
    /// whatever their number, and an upload that never finishes still counts.
    fn admit_upload(&self, tenant: &str, headers: &HeaderMap) -> Result<UploadPlace, ApiError> {
        let share = self.gate.uploads.enter(tenant).map_err(|n| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorKind::TenantBusy,
                format!(
                    "tenant `{tenant}` has {n} uploads in progress (max_uploads_per_tenant = {})",
                    self.gate.uploads.max
                ),
            )
        })?;
        let max = self.limits().max_body_bytes;
        let bytes = declared_length(headers).map_or(max, |n| usize::try_from(n).map_or(max, |n| n.min(max)));
        let reserved = self.gate.upload_bytes.reserve(bytes).map_err(|used| {
            self.gate.refused_upload_bytes.inc();
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorKind::Overloaded,
                format!(
                    "uploads in progress hold {used} bytes of body; {bytes} more would pass \
                     {} (`max_buffered_upload_bytes`); retry",
                    self.gate.upload_bytes.max
                ),
            )
        })?;
        self.service.rates.admit(tenant, self.limits(), WriteKind::Upload)?;
        Ok(UploadPlace { _share: share, reserved })
    }
}

fn json_answer(status: StatusCode, value: impl serde::Serialize) -> Response {
    (status, axum::Json(value)).into_response()
}

/// `/metrics`: the service's metrics, then the gate's and the artifact cache's, as one
/// Prometheus text. The admin's: its series name every tenant and policy. Without the
/// admin token, 401 (403 with another token), unless `public_metrics` is set: then the
/// server-wide series alone.
async fn metrics(State(http): Svc, headers: HeaderMap) -> Answer {
    let everything = match http.who(&headers) {
        Ok(Principal::Admin) => true,
        _ if http.limits().public_metrics => false,
        Ok(other) => return Err(require_admin(&other).expect_err("not the admin")),
        Err(refusal) => {
            return Err(ApiError::new(
                refusal.status(),
                refusal.kind(),
                format!(
                    "{}: `/metrics` needs the admin token (`[service] public_metrics = true` serves its \
                     server-wide series without one)",
                    refusal.message()
                ),
            ));
        }
    };
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
    let text = metrics::encode(&registry);
    let text = if everything { text } else { server_wide(&text) };
    Ok(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response())
}

/// The families of a Prometheus text that have samples and none with a `tenant` or
/// `policy` label: what `/metrics` serves without a token under `public_metrics`.
/// Filtered from the whole text, so a per-tenant series added later stays private.
fn server_wide(text: &str) -> String {
    // A label of a sample line: its label values here are names of limits, fault kinds
    // and bucket bounds, with no `,` or `}` in them.
    let private = |sample: &str| {
        sample.split_once('{').and_then(|(_, rest)| rest.split_once('}')).is_some_and(|(labels, _)| {
            labels.split(',').any(|l| l.starts_with("tenant=") || l.starts_with("policy="))
        })
    };
    let mut out = String::with_capacity(text.len());
    let mut family = String::new();
    let (mut samples, mut hidden) = (0usize, false);
    let mut flush = |family: &mut String, samples: usize, hidden: bool| {
        if samples > 0 && !hidden {
            out.push_str(family);
        }
        family.clear();
    };
    for line in text.lines() {
        if line.starts_with("# HELP ") {
            flush(&mut family, samples, hidden);
            (samples, hidden) = (0, false);
        } else if !line.starts_with('#') && !line.is_empty() {
            samples += 1;
            hidden |= private(line);
        }
        family.push_str(line);
        family.push('\n');
    }
    flush(&mut family, samples, hidden);
    out
}

async fn add_tenant(State(http): Svc, headers: HeaderMap, body: Body) -> Answer {
    let (who, body) = http.authorize(&headers, body, Limit::Management, require_admin).await?;
    let body = http.read_body(&headers, body, Limit::Management, 0).await?;
    Ok(json_answer(StatusCode::CREATED, http.service.add_tenant(&who, &body).await?))
}

async fn add_router(State(http): Svc, headers: HeaderMap, body: Body) -> Answer {
    let (who, body) = http.authorize(&headers, body, Limit::Management, require_admin).await?;
    let body = http.read_body(&headers, body, Limit::Management, 0).await?;
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
    // parameters' size, the tenant's policy count) is refused unread.
    let precheck = |w: &Principal| http.service.precheck_upload(w, &tenant, &name, params.as_deref());
    let (who, body) = http.authorize(&headers, body, Limit::Upload, precheck).await?;
    let place = match http.admit_upload(&tenant, &headers) {
        Ok(place) => place,
        Err(refusal) => return Ok(retry_later(http.refuse(refusal, &headers, body, Limit::Upload).await)),
    };
    let bytes = http.read_body(&headers, body, Limit::Upload, place.reserved.bytes).await?;
    // The place is held until the upload is answered: its bytes are in memory until then.
    let uploaded = http.service.upload(&who, &tenant, &name, params, bytes).await;
    drop(place);
    Ok(json_answer(StatusCode::CREATED, uploaded?))
}

async fn rollback(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, name)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.rollback(&who, &tenant, &name).await?))
}

async fn rollforward(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, name)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.rollforward(&who, &tenant, &name).await?))
}

async fn assign(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
    body: Body,
) -> Answer {
    let (who, body) =
        http.authorize(&headers, body, Limit::Management, |w| require_tenant(w, &tenant)).await?;
    let body = http.read_body(&headers, body, Limit::Management, 0).await?;
    Ok(json_answer(StatusCode::OK, http.service.assign(&who, &tenant, &class, &body).await?))
}

// A class's rollout (`rollout`): its shadow, canary and capture.

/// A rollout write's body, read once the caller may act for the tenant.
async fn rollout_body(
    http: &Http,
    headers: &HeaderMap,
    body: Body,
    tenant: &str,
) -> Result<(Principal, Vec<u8>), ApiError> {
    let (who, body) = http.authorize(headers, body, Limit::Management, |w| require_tenant(w, tenant)).await?;
    Ok((who, http.read_body(headers, body, Limit::Management, 0).await?))
}

async fn set_shadow(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
    body: Body,
) -> Answer {
    let (who, body) = rollout_body(&http, &headers, body, &tenant).await?;
    Ok(json_answer(StatusCode::OK, http.service.set_shadow(&who, &tenant, &class, &body).await?))
}

async fn clear_shadow(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.clear_shadow(&who, &tenant, &class).await?))
}

async fn shadow_report(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.shadow_report(&who, &tenant, &class)?))
}

async fn set_canary(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
    body: Body,
) -> Answer {
    let (who, body) = rollout_body(&http, &headers, body, &tenant).await?;
    Ok(json_answer(StatusCode::OK, http.service.set_canary(&who, &tenant, &class, &body).await?))
}

async fn canary_status(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.canary_status(&who, &tenant, &class)?))
}

async fn promote(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.promote(&who, &tenant, &class).await?))
}

async fn abort(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.abort(&who, &tenant, &class).await?))
}

async fn set_capture(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
    body: Body,
) -> Answer {
    let (who, body) = rollout_body(&http, &headers, body, &tenant).await?;
    Ok(json_answer(StatusCode::OK, http.service.set_capture(&who, &tenant, &class, &body).await?))
}

async fn clear_capture(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.clear_capture(&who, &tenant, &class).await?))
}

/// The captured selections as JSON Lines (a trace `switchyard replay` reads).
async fn captured(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, class)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    let lines = http.service.captured(&who, &tenant, &class)?;
    Ok(([(axum::http::header::CONTENT_TYPE, "application/jsonl")], lines).into_response())
}

async fn select(State(http): Svc, headers: HeaderMap, body: Body) -> Answer {
    // The tenant is in the body: only the token is checked before it is read.
    encoded(
        &http,
        &headers,
        body,
        INLINE_BODY_BYTES,
        |_| Ok(()),
        move |service, who, share, body, encoding| {
            let prepared = service.prepare(who, share, body, encoding)?;
            Ok(if prepared.inline() {
                Work::Done(prepared.run(service)?)
            } else {
                Work::Blocking(Box::new(move |service| prepared.run(service)))
            })
        },
    )
    .await
}

/// A hot path in either encoding: the body's by its `Content-Type` (another is refused
/// unread), the answer's by `Accept`; `work` is told the body's.
async fn encoded<T: serde::Serialize + Encode + Send + 'static>(
    http: &Http,
    headers: &HeaderMap,
    body: Body,
    inline_bytes: usize,
    allowed: impl FnOnce(&Principal) -> Result<(), ApiError>,
    work: impl FnOnce(&Service, &Principal, Option<InFlight>, &[u8], Encoding) -> Result<Work<T>, ApiError>
    + Send
    + 'static,
) -> Answer {
    let encoding = match body_encoding(headers) {
        Ok(encoding) => encoding,
        Err(refusal) => return Err(http.refuse(refusal, headers, body, Limit::Select).await),
    };
    let answer_encoding = answer_encoding(headers, encoding)?;
    let answer = hot_path(http, headers, body, inline_bytes, allowed, move |service, who, share, body| {
        work(service, who, share, body, encoding)
    })
    .await;
    Ok(answer.map_or_else(|refused| *refused, |answer| encoded_answer(answer_encoding, &answer)))
}

/// The select body's encoding, by its `Content-Type`: JSON when it names none.
fn body_encoding(headers: &HeaderMap) -> Result<Encoding, ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(Encoding::Json) };
    let media = value.to_str().ok().and_then(|v| v.split(';').next()).map(str::trim);
    match media.and_then(Encoding::of) {
        Some(encoding) => Ok(encoding),
        None => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::UnsupportedMediaType,
            format!(
                "`Content-Type: {}` is not one this route takes: {}",
                String::from_utf8_lossy(value.as_bytes()),
                Encoding::NAMES
            ),
        )),
    }
}

/// The answer's encoding: the first of `Accept`'s media types it speaks, else the
/// body's. Errors are JSON whatever is asked.
fn answer_encoding(headers: &HeaderMap, body: Encoding) -> Result<Encoding, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else { return Ok(body) };
    let mut any = false;
    for media in accept.split(',').map(|m| m.split(';').next().unwrap_or("").trim()) {
        if let Some(encoding) = Encoding::of(media) {
            return Ok(encoding);
        }
        any |= media == "*/*" || media == "application/*";
    }
    if any {
        return Ok(body);
    }
    Err(ApiError::new(
        StatusCode::NOT_ACCEPTABLE,
        ErrorKind::UnsupportedMediaType,
        format!("`Accept: {accept}` names no encoding this route answers in: {}", Encoding::NAMES),
    ))
}

fn encoded_answer<T: serde::Serialize + Encode>(encoding: Encoding, answer: &T) -> Response {
    match encoding {
        Encoding::Json => json_answer(StatusCode::OK, answer),
        Encoding::Protobuf => {
            ([(header::CONTENT_TYPE, switchyard_proto::CONTENT_TYPE)], answer.protobuf()).into_response()
        }
    }
}

/// A message the service answers in either encoding.
trait Encode {
    fn protobuf(&self) -> Vec<u8>;
}

impl Encode for switchyard::selection::wire::TenantAnswer {
    fn protobuf(&self) -> Vec<u8> {
        switchyard_proto::encode_answer(self)
    }
}

impl Encode for switchyard::selection::wire::TableVersion {
    fn protobuf(&self) -> Vec<u8> {
        switchyard_proto::encode_table_version(self)
    }
}

/// Select bodies at most this long are decoded on the connection's own thread (a held
/// table's request, a few KB, decodes in microseconds); longer ones, like a whole
/// 10,000-worker request, on a blocking thread.
const INLINE_BODY_BYTES: usize = 16 << 10;

/// What a hot path's first step did: answered, or left work for a blocking thread.
enum Work<T> {
    Done(T),
    Blocking(Rest<T>),
}

/// The rest of a hot path's work, for a blocking thread.
type Rest<T> = Box<dyn FnOnce(&Service) -> Result<T, ApiError> + Send>;

/// The path of selections and table changes: the caller's own share first, before any
/// server-wide slot (its calls in flight, bodies still arriving included, are at most
/// `max_in_flight_per_tenant` for a tenant's token, 429 `tenant-busy`, and
/// `max_in_flight_per_router` for a router's, 429 `router-busy`, so neither can hold
/// every slot); then one of `max_inflight_selections`; then the body, and `work`: on the
/// connection's thread when the body is at most `inline_bytes` long (sparing two thread
/// hand-offs, the larger part of a small selection's time), then whatever it leaves on a
/// blocking thread; a longer body's on a blocking thread from the start (CPU work: a
/// guest's call, a table of 10,000 rows). A router's call counts for the tenant it names
/// too, in `work` (`Service::enter`).
async fn hot_path<T: Send + 'static>(
    http: &Http,
    headers: &HeaderMap,
    body: Body,
    inline_bytes: usize,
    allowed: impl FnOnce(&Principal) -> Result<(), ApiError>,
    work: impl FnOnce(&Service, &Principal, Option<InFlight>, &[u8]) -> Result<Work<T>, ApiError> + Send + 'static,
) -> Result<T, Box<Response>> {
    // Who the caller is, and whether it may act for a tenant the path names, is in the
    // headers, and is settled before a byte of the body is read.
    let (who, body) = http.authorize(headers, body, Limit::Select, allowed).await.map_err(boxed)?;
    let (share, router_share) = match &who {
        Principal::Tenant(tenant) => match http.service.enter(tenant) {
            Ok(share) => (Some(share), None),
            Err(refusal) => {
                return Err(boxed(http.refuse(refusal, headers, body, Limit::Select).await));
            }
        },
        Principal::Router(router) => match http.gate.routers.enter(router) {
            Ok(share) => (None, Some(share)),
            Err(n) => {
                let refusal = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    ErrorKind::RouterBusy,
                    format!(
                        "router `{router}` has {n} selections in flight (max_in_flight_per_router = {})",
                        http.gate.routers.max
                    ),
                );
                return Err(boxed(http.refuse(refusal, headers, body, Limit::Select).await));
            }
        },
        Principal::Admin => (None, None),
    };
    let Ok(permit) = http.gate.selections.clone().try_acquire_owned() else {
        drop((share, router_share));
        http.gate.refused_selections.inc();
        let refusal = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Overloaded,
            format!(
                "{} selections are in flight, the most `max_inflight_selections` allows; retry",
                http.gate.max_selections
            ),
        );
        return Err(Box::new(retry_later(http.refuse(refusal, headers, body, Limit::Select).await)));
    };
    let body = http.read_body(headers, body, Limit::Select, 0).await.map_err(boxed)?;
    let service = http.service.clone();
    let blocking = if body.len() <= inline_bytes {
        match work(&service, &who, share, &body).map_err(boxed)? {
            Work::Done(answer) => return Ok(answer),
            Work::Blocking(rest) => rest,
        }
    } else {
        Box::new(move |service: &Service| match work(service, &who, share, &body)? {
            Work::Done(answer) => Ok(answer),
            Work::Blocking(rest) => rest(service),
        })
    };
    // The permit and the router's share are held until the work is done, even if the
    // client has gone.
    tokio::task::spawn_blocking(move || {
        let _held = (permit, router_share);
        blocking(&service)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the selection thread: {e}")))
    .and_then(|done| done)
    .map_err(boxed)
}

fn boxed(refusal: ApiError) -> Box<Response> {
    Box::new(refusal.into_response())
}

async fn put_table(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, table)): Path<(String, String)>,
    body: Body,
) -> Answer {
    let owner = tenant.clone();
    let allowed = move |w: &Principal| require_selector(w, &owner);
    encoded(&http, &headers, body, 0, allowed, move |service, who, share, body, encoding| {
        let _in_flight = entered(service, &tenant, share)?;
        let table_json = decode_table(body, encoding)?;
        service.put_table(who, &tenant, &table, table_json).map(Work::Done)
    })
    .await
}

async fn change_table(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, table)): Path<(String, String)>,
    body: Body,
) -> Answer {
    let owner = tenant.clone();
    let allowed = move |w: &Principal| require_selector(w, &owner);
    encoded(&http, &headers, body, 0, allowed, move |service, who, share, body, encoding| {
        let _in_flight = entered(service, &tenant, share)?;
        let delta = decode_delta(body, encoding)?;
        service.change_table(who, &tenant, &table, delta).map(Work::Done)
    })
    .await
}

async fn table_state(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, table)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.table_state(&who, &tenant, &table)?))
}

async fn delete_table(
    State(http): Svc,
    headers: HeaderMap,
    Path((tenant, table)): Path<(String, String)>,
) -> Answer {
    let who = http.who(&headers)?;
    Ok(json_answer(StatusCode::OK, http.service.delete_table(&who, &tenant, &table)?))
}

/// The caller's share when it is the tenant's own; else the share of `tenant`, taken
/// once the caller may act for it (a router's or the admin's call counts for the tenant).
fn entered(service: &Service, tenant: &str, share: Option<InFlight>) -> Result<InFlight, ApiError> {
    match share {
        Some(share) => Ok(share),
        None => {
            // Only a tenant that exists gets a counter.
            if service.snapshot().route(tenant, None).is_none() {
                return Err(ApiError::not_found(ErrorKind::UnknownTenant, format!("no tenant `{tenant}`")));
            }
            service.enter(tenant)
        }
    }
}

fn decode_table(body: &[u8], encoding: Encoding) -> Result<TableJson, ApiError> {
    match encoding {
        Encoding::Json => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(ErrorKind::InvalidInput, format!("table JSON: {e}"))),
        Encoding::Protobuf => switchyard_proto::decode_table(body)
            .map_err(|e| ApiError::bad_request(ErrorKind::InvalidInput, e.to_string())),
    }
}

fn decode_delta(body: &[u8], encoding: Encoding) -> Result<TableDelta, ApiError> {
    match encoding {
        Encoding::Json => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(ErrorKind::InvalidInput, format!("delta JSON: {e}"))),
        Encoding::Protobuf => switchyard_proto::decode_delta(body)
            .map_err(|e| ApiError::bad_request(ErrorKind::InvalidInput, e.to_string())),
    }
}
