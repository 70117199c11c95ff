//! The provider checks every field at start-up, and each refusal names it.

use crate::common::{component_file, resolve};

fn refusal(name: &str, parameters: &str) -> String {
    match resolve(name, parameters) {
        Ok(_) => panic!("{name}: accepted"),
        Err(e) => e,
    }
}

#[test]
fn each_bad_field_is_refused_by_name() {
    let good = component_file("config-default", switchyard_test_util::DEFAULT_POLICY);
    let policy = format!("        policy: {{file: {}}}\n", good.display());
    // A registry nothing answers at: refused at start-up, naming the field.
    let down = format!("nats://127.0.0.1:{}", switchyard_test_util::nats::free_port());
    let down_refusal = format!("policy.store.registry: {down}: the registry is unavailable");
    let cases = [
        ("no-policy", "        on_fault: open".to_string(), "missing field `policy`"),
        ("unknown-field", format!("{policy}        tempreature: 1"), "unknown field `tempreature`"),
        (
            "compile-worker",
            format!("{policy}        compile_worker: /nonexistent/switchyard"),
            "compile_worker: /nonexistent/switchyard: not a file (the `switchyard` binary)",
        ),
        ("source", "        policy: {registry: acme}".to_string(), "policy: unknown variant `registry`"),
        ("store-type", "        policy: {store: acme}".to_string(), "policy.store: invalid type"),
        (
            "store-missing",
            "        policy: {store: {data_dir: /nonexistent, tenant: a, class: c}}".to_string(),
            "policy.store.data_dir: /nonexistent: No such file",
        ),
        (
            "store-both-places",
            "        policy: {store: {data_dir: /tmp, registry: 'nats://127.0.0.1:4222', tenant: a, class: c}}"
                .to_string(),
            "policy.store.registry: give either `data_dir` (a data directory) or `registry` (a fleet's NATS registry), not both",
        ),
        (
            "store-no-place",
            "        policy: {store: {tenant: a, class: c}}".to_string(),
            "policy.store: missing `data_dir` (a data directory) or `registry` (nats://HOST:PORT)",
        ),
        (
            "store-registry-empty",
            "        policy: {store: {registry: '', tenant_from: routing_group, class: c}}".to_string(),
            "policy.store.registry: empty",
        ),
        (
            "store-registry-address",
            "        policy: {store: {registry: 'nats://127.0.0.1:notaport', tenant: a, class: c}}".to_string(),
            "policy.store.registry: nats://127.0.0.1:notaport: not a NATS server address",
        ),
        (
            "store-registry-down",
            format!(
                "        policy: {{store: {{registry: '{down}', tenant_from: routing_group, class: c}}}}"
            ),
            down_refusal.as_str(),
        ),
        (
            "store-tenant",
            "        policy: {store: {data_dir: /tmp, tenant: '', class: c}}".to_string(),
            "policy.store.tenant: empty",
        ),
        (
            "store-both",
            "        policy: {store: {data_dir: /tmp, tenant: a, tenant_from: routing_group, class: c}}"
                .to_string(),
            "policy.store.tenant_from: give either `tenant` (one tenant) or `tenant_from` (each partition's), not both",
        ),
        (
            "store-neither",
            "        policy: {store: {data_dir: /tmp, class: c}}".to_string(),
            "policy.store: missing `tenant` (one tenant) or `tenant_from` (routing_group or model_name)",
        ),
        (
            "store-map-named",
            "        policy: {store: {data_dir: /tmp, tenant: a, tenants: {g: a}, class: c}}".to_string(),
            "policy.store.tenants: maps partitions to tenants, so it goes with `tenant_from`",
        ),
        (
            "store-tenant-from",
            "        policy: {store: {data_dir: /tmp, tenant_from: lora, class: c}}".to_string(),
            "policy.store.tenant_from: unknown variant `lora`, expected `routing_group` or `model_name`",
        ),
        (
            "store-map-empty",
            "        policy: {store: {data_dir: /tmp, tenant_from: model_name, tenants: {g: ''}, class: c}}"
                .to_string(),
            "policy.store.tenants.g: partition keys and tenant names must not be empty",
        ),
        (
            "store-max-tenants",
            "        policy: {store: {data_dir: /tmp, tenant_from: model_name, class: c, max_tenants: 0}}"
                .to_string(),
            "policy.store.max_tenants: must be 1 to 1000000, got 0",
        ),
        (
            "store-poll",
            "        policy: {store: {data_dir: /tmp, tenant: a, class: c, poll_ms: 0}}".to_string(),
            "policy.store.poll_ms: must be 10 to 60000 (ms), got 0",
        ),
        (
            "store-params",
            "        policy: {store: {data_dir: /tmp, tenant: a, class: c}}\n        params: {a: 1}"
                .to_string(),
            "params: a store source runs each version with the parameters it was uploaded with",
        ),
        (
            "store-on-fault",
            "        policy: {store: {data_dir: /tmp, tenant: a, class: c}}\n        on_fault: open"
                .to_string(),
            "on_fault: a store source takes what a fault does from the class's assignment",
        ),
        (
            "missing-file",
            "        policy: {file: /nonexistent/p.wasm}".to_string(),
            "policy.file: cannot read /nonexistent/p.wasm",
        ),
        ("on-fault", format!("{policy}        on_fault: sometimes"), "on_fault: unknown variant `sometimes`"),
        (
            "temperature",
            format!("{policy}        temperature: -1"),
            "temperature: must be finite and ≥ 0, got -1",
        ),
        ("temperature-type", format!("{policy}        temperature: hot"), "temperature: invalid type"),
        (
            "limits-field",
            format!("{policy}        limits: {{fuel_bas: 1}}"),
            "limits.fuel_bas: unknown field `fuel_bas`",
        ),
        (
            "limits-zero",
            format!("{policy}        limits: {{call_deadline_ms: 0}}"),
            "limits.call_deadline_ms: must be at least 1",
        ),
        (
            "limits-small",
            format!("{policy}        limits: {{max_component_bytes: 1000}}"),
            "policy.file: too-large",
        ),
        (
            "guard",
            format!("{policy}        guard: {{quarantine_after: many}}"),
            "guard.quarantine_after: invalid type",
        ),
        (
            "params",
            format!("{policy}        params: {{overlap_score_credit: 7}}"),
            "params: configure-failed",
        ),
        ("params-unknown", format!("{policy}        params: {{overlap: 1}}"), "params: configure-failed"),
    ];
    for (name, parameters, expected) in cases {
        let e = refusal(&format!("config-{name}"), &parameters);
        assert!(e.contains("\"switchyard\""), "{name}: Dynamo names the type: {e}");
        assert!(e.contains(expected), "{name}: expected `{expected}` in: {e}");
    }
    let not_wasm = component_file("config-not-wasm", b"hello");
    let e = refusal("config-not-wasm", &format!("        policy: {{file: {}}}", not_wasm.display()));
    assert!(e.contains("policy.file: not-wasm"), "{e}");
    let core = component_file("config-core", switchyard_test_util::hostile::CORE_MODULE);
    let e = refusal("config-core", &format!("        policy: {{file: {}}}", core.display()));
    assert!(e.contains("policy.file: core-module"), "{e}");
}

#[test]
fn good_parameters_resolve() {
    let good = component_file("config-good", switchyard_test_util::DEFAULT_POLICY);
    let parameters = format!(
        "        policy: {{file: {}}}\n        params: {{overlap_score_credit: 0.5}}\n        on_fault: closed\n        temperature: 0.25\n        limits: {{fuel_base: 3000000}}\n        guard: {{quarantine_after: 5}}",
        good.display()
    );
    let factory = resolve("config-good", &parameters).expect("valid parameters resolve");
    // And they take effect: the instance selects (a bad field would have been refused).
    let fixture = crate::common::random_fixture(&mut crate::common::Rng::new(5));
    let ours = crate::common::policy(&factory, fixture.worker_type);
    let picked = fixture.select(&ours).expect("the configured policy answers");
    assert!(fixture.workers.contains_key(&picked.worker_id));
}

#[test]
fn registering_twice_is_refused() {
    let mut registry = dynamo_kv_router::plugins::RouterPluginRegistry::default();
    switchyard_dynamo::register(&mut registry).unwrap();
    assert!(
        switchyard_dynamo::register(&mut registry).unwrap_err().to_string().contains("already registered")
    );
}
