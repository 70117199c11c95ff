//! The service's router in process (tower's `oneshot`, no sockets) against a fresh data
//! dir: a sequence of calls (`switchyard_fuzz::api`) never answered 500, never a panic,
//! an error always the documented `{"error": {"kind", "message"}}`; and afterwards the
//! data dir opens again, with every tenant's policies, versions and classes as they were.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arbitrary::Unstructured;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use switchyard::selection::wire::ErrorBody;
use switchyard::{GuardConfig, Limits};
use switchyard_fuzz::api::{ADMIN, Token, call, encode};
use switchyard_service::config::ServiceConfig;
use switchyard_service::{Service, ServiceLimits, http};
use tower::ServiceExt;

/// Small pools: each run opens its own service.
fn open(dir: &Path) -> Arc<Service> {
    let config = ServiceConfig {
        max_inflight_selections: 4,
        max_idle_instances: 8,
        load_on_start: false,
        ..ServiceConfig::default()
    };
    let limits = ServiceLimits::try_from(config).expect("valid limits");
    // Compiled components outlive the run (content-addressed): only the first upload of
    // each component pays for Cranelift.
    let cache = std::env::temp_dir().join("switchyard-fuzz-api-cache");
    let engine = Limits { max_instances: 16, ..Limits::default() };
    Service::open(dir, None, &cache, limits, GuardConfig::default(), engine.into(), Some(ADMIN.into()))
        .expect("the data dir opens")
}

/// A fresh, empty data dir for one run.
fn data_dir() -> PathBuf {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let n = RUN.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("switchyard-fuzz-api-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Sends one request; `None` when the generated method, path or headers are not HTTP.
async fn send(
    router: &axum::Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> Option<(StatusCode, Vec<u8>)> {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        builder = builder.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let request = builder.body(Body::from(body)).ok()?;
    let response = router.clone().oneshot(request).await.expect("the router is infallible");
    let status = response.status();
    let bytes = response.into_body().collect().await.expect("a body").to_bytes();
    Some((status, bytes.to_vec()))
}

/// A tenant's listing without what a restart resets (counters, breakers, load state).
async fn listing(router: &axum::Router, tenant: &str) -> Value {
    let path = format!("/v1/tenants/{}/policies", encode(tenant));
    let (status, body) = send(router, "GET", &path, Some(ADMIN), &[], Vec::new()).await.unwrap();
    assert_eq!(status, StatusCode::OK, "listing {tenant}: {}", String::from_utf8_lossy(&body));
    let mut value: Value = serde_json::from_slice(&body).unwrap();
    for policy in value["policies"].as_array_mut().unwrap() {
        let p = policy.as_object_mut().unwrap();
        p.remove("selections");
        p.remove("faults");
        for version in p["versions"].as_array_mut().unwrap() {
            let v = version.as_object_mut().unwrap();
            v.remove("breaker");
            v.remove("unavailable");
        }
    }
    value
}

async fn run(u: &mut Unstructured<'_>, dir: &Path) -> arbitrary::Result<()> {
    let router = http::router(open(dir));
    let (mut tenants, mut router_token, mut versions) = (Vec::<(String, String)>::new(), None, Vec::new());
    let mut tables = Vec::new();
    for _ in 0..u.int_in_range(1..=12)? {
        let c = call(u, &versions, &tables)?;
        let token = match c.token {
            Token::Admin => Some(ADMIN.to_string()),
            Token::Tenant(i) if !tenants.is_empty() => {
                Some(tenants[usize::from(i) % tenants.len()].1.clone())
            }
            Token::Router => router_token.clone(),
            Token::Unknown => Some("sy_0123456789abcdef".into()),
            _ => None,
        };
        let Some((status, body)) =
            send(&router, c.method, &c.path, token.as_deref(), &c.headers, c.body).await
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&body);
        assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{} {}: {text}", c.method, c.path);
        // A HEAD answer has no body by definition.
        if status.as_u16() >= 400 && c.method != "HEAD" {
            assert!(
                serde_json::from_slice::<ErrorBody>(&body).is_ok(),
                "{} {} answered {status} without an error body: {text}",
                c.method,
                c.path
            );
        }
        // A table's put, delta or state (JSON): its version, for the next delta to name.
        if status == StatusCode::OK
            && let Ok(v) = serde_json::from_slice::<Value>(&body)
            && let (Value::String(_), Some(version)) = (&v["table"], v["version"].as_u64())
        {
            tables.push(version);
        }
        if status == StatusCode::CREATED {
            let v: Value = serde_json::from_slice(&body).expect("a JSON answer");
            match (&v["tenant"], &v["router"], &v["token"], &v["version"]) {
                (Value::String(t), _, Value::String(k), _) => tenants.push((t.clone(), k.clone())),
                (_, Value::String(_), Value::String(k), _) => router_token = Some(k.clone()),
                (_, _, _, Value::String(version)) => versions.push(version.clone()),
                _ => {}
            }
        }
    }
    // The data dir reopens, and says what the service said before.
    let mut before = Vec::new();
    for (t, _) in &tenants {
        before.push(listing(&router, t).await);
    }
    drop(router);
    let router = http::router(open(dir));
    for ((t, _), was) in tenants.iter().zip(before) {
        assert_eq!(listing(&router, t).await, was, "tenant {t} after a restart");
    }
    Ok(())
}

/// One runtime for the whole run: multi-threaded, as `serve`'s (the service's writes
/// block in place, which a current-thread runtime refuses).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = data_dir();
    let _ = runtime().block_on(run(&mut Unstructured::new(data), &dir));
    let _ = std::fs::remove_dir_all(&dir);
});
