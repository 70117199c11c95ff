//! Bounded per-tenant state in `switchyard serve` (a real server on loopback): a
//! compile's permit held until Cranelift really returns (503 `compile-busy` meanwhile).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::server::{ADMIN, Body, Client, Server, temp_dir, variant};
use crate::support::DEFAULT_POLICY;

/// A data dir and config under a fresh temp dir; the server runs on loopback.
fn start(name: &str, config: &str) -> (Server, std::path::PathBuf, std::path::PathBuf) {
    let dir = temp_dir(name);
    let cfg = dir.join("switchyard.toml");
    std::fs::write(&cfg, config).unwrap();
    let data = dir.join("data");
    (Server::start(&data, Some(&cfg), Some(ADMIN)), data, cfg)
}

/// The error kind of an answer; "<no error>" for a success, so an assertion shows it.
fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or("<no error>")
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or("<no error>")
}

/// `PUT` of acme's (or `tenant`'s) policy `name`, with URL-encoded `params`.
fn upload(
    c: &Client,
    token: &str,
    tenant: &str,
    name: &str,
    bytes: &[u8],
    params: Option<&str>,
) -> (u16, Value) {
    let query = params.map(|p| format!("?params={p}")).unwrap_or_default();
    c.call("PUT", &format!("/v1/tenants/{tenant}/policies/{name}{query}"), Some(token), Body::Bytes(bytes))
}

/// Polls `done` every 50 ms for up to a minute (generous: the machine may be loaded).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn service_state_a_timed_out_compile_keeps_its_permit_until_cranelift_returns() {
    // One compile at a time, and 1 ms to compile: every real component times out, and
    // its compile (hundreds of ms) goes on after the upload was answered.
    let (server, _, _) = start(
        "state-compile-permit",
        "[limits]\ncompile_timeout_ms = 1\n[service]\ncompile_concurrency = 1\n",
    );
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let abandoned = |c: &Client| c.metric("switchyard_compiles_abandoned");
    let mut busy = None;
    // Normally the first round shows it; a few rounds in case a compile ended between the
    // two requests (a loaded machine). Distinct bytes each time: nothing is reused.
    for round in 0..5u32 {
        eventually("no abandoned compile", || abandoned(&c) == 0.0);
        let (status, v) = upload(&c, &token, "acme", "slow", &variant(DEFAULT_POLICY, 100 + round), None);
        assert_eq!((status, kind(&v)), (400, "compile-timeout"), "the permit was free: {v}");
        let (status, v) = upload(&c, &token, "acme", "slow", &variant(DEFAULT_POLICY, 200 + round), None);
        match kind(&v) {
            "compile-busy" => {
                assert_eq!(status, 503, "{v}");
                busy = Some(v);
                break;
            }
            // The first compile had already ended: this one got the permit, and timed out.
            other => assert_eq!((status, other), (400, "compile-timeout"), "{v}"),
        }
    }
    let busy = busy.expect("an upload while the timed-out compile still ran is refused compile-busy");
    assert!(message(&busy).contains("compile_concurrency"), "names the limit: {busy}");
    assert!(
        message(&busy).contains("1 by compiles that outlived"),
        "the holder is the abandoned compile: {busy}"
    );
    assert!(c.metric("switchyard_compile_busy_total") >= 1.0);
    // When Cranelift returns, the permit is free again: the next upload is compiled (and,
    // at 1 ms, times out again) instead of refused.
    eventually("the abandoned compile to end", || abandoned(&c) == 0.0);
    let (status, v) = upload(&c, &token, "acme", "slow", &variant(DEFAULT_POLICY, 300), None);
    assert_eq!((status, kind(&v)), (400, "compile-timeout"), "{v}");
    eventually("that compile to end too", || abandoned(&c) == 0.0);
    assert_eq!(c.call("GET", "/healthz", None, Body::None).0, 200);
}
