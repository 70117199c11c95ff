//! `switchyard serve`'s limits holding whatever the requests say (a real server on
//! loopback): idle-instance slots given back whichever way a version leaves its pool.

use serde_json::{Value, json};

use crate::server::{ADMIN, Body, Client, Server, select_body, temp_dir, variant};
use crate::support::DEFAULT_POLICY;

/// A server on a fresh data dir with `config` as its `switchyard.toml`.
fn start(name: &str, config: &str) -> Server {
    let dir = temp_dir(name);
    let cfg = dir.join("switchyard.toml");
    std::fs::write(&cfg, config).unwrap();
    Server::start(&dir.join("data"), Some(&cfg), Some(ADMIN))
}

fn ok(what: &str, (status, v): (u16, Value), expected: u16) -> Value {
    assert_eq!(status, expected, "{what}: {v}");
    v
}

#[test]
fn service_limits_idle_slots_come_back_when_a_routed_version_is_collected() {
    // Two idle slots in all, one per version. Each round routes a new version, selects on
    // it (its instance kept idle), then rolls back: the replaced version, routed until
    // that commit, is collected. Its idle instance must give its slot back, or after two
    // rounds no version could keep an idle instance again.
    let server =
        start("service-limits-idle", "[service]\nmax_idle_instances = 2\nidle_instances_per_version = 1\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let select = || {
        let v = ok(
            "select",
            c.call("POST", "/v1/select", Some(&token), Body::Json(select_body("acme", Some("gold")))),
            200,
        );
        v["version"].as_str().map(str::to_string)
    };
    let first = ok("upload", c.upload(&token, "acme", "p", DEFAULT_POLICY), 201)["version"]
        .as_str()
        .unwrap()
        .to_string();
    let assign = json!({ "policy": "p" });
    ok("assign", c.call("PUT", "/v1/tenants/acme/classes/gold", Some(&token), Body::Json(assign)), 200);
    assert_eq!(select().as_deref(), Some(first.as_str()));
    assert_eq!(c.metric("switchyard_idle_instances"), 1.0, "the selection's instance is kept");
    for round in 0..4 {
        let v = ok("upload", c.upload(&token, "acme", "p", &variant(DEFAULT_POLICY, round)), 201);
        let version = v["version"].as_str().unwrap().to_string();
        assert_eq!(select().as_deref(), Some(version.as_str()), "round {round}");
        let path = "/v1/tenants/acme/policies/p/rollback";
        let v = ok("rollback", c.call("POST", path, Some(&token), Body::None), 200);
        assert_eq!(v["replaced"].as_str(), Some(version.as_str()));
        assert_eq!(c.metric("switchyard_idle_instances"), 0.0, "round {round}: nothing idle is routed");
        assert_eq!(select().as_deref(), Some(first.as_str()), "round {round}");
        assert_eq!(c.metric("switchyard_idle_instances"), 1.0, "round {round}: the first version keeps one");
    }
    // Off every guest: its idle instance goes.
    let builtin = json!({ "policy": "default" });
    ok("assign", c.call("PUT", "/v1/tenants/acme/classes/gold", Some(&token), Body::Json(builtin)), 200);
    assert_eq!(c.metric("switchyard_idle_instances"), 0.0);
}
