//! One tenant's policy state cannot be observed from another's: each instance has its own
//! Store and linear memory, and a pooled memory slot is wiped before it is reused.

use serde_json::Value;
use switchyard::{GuestScorer, Limits, PolicyComponent, SelectError, Selector};

use switchyard_test_util::fixtures::{engine_with, hostile, sample};

/// Runs the secret guest once; returns its report (`own`, `found`).
fn report(guest: GuestScorer) -> Value {
    let (table, request) = sample();
    match Selector::new(Box::new(guest)).select(&table, &request) {
        Err(SelectError::Fault { fault, .. }) => {
            let json = fault.message.strip_prefix("internal error: ").expect("the guest's report");
            serde_json::from_str(json).expect("JSON")
        }
        other => panic!("the secret guest always reports, got {other:?}"),
    }
}

#[test]
fn a_tenants_secret_is_invisible_to_another_tenant() {
    // Scanning all of linear memory byte by byte takes more than a selection's fuel.
    let engine = engine_with(Limits { fuel_base: 2_000_000_000, ..Limits::default() });
    let component = PolicyComponent::load(&engine, hostile::SECRET).unwrap();
    let tenant_a = || GuestScorer::new("a", component.clone(), r#"{"secret": "tenant-a-7f3e91"}"#).unwrap();
    let tenant_b = || GuestScorer::new("b", component.clone(), "{}").unwrap();

    // The scan works: A finds its own secret in its own memory.
    let a = report(tenant_a());
    assert_eq!(a["own"], "tenant-a-7f3e91");
    assert_eq!(a["found"], serde_json::json!(["tenant-a-7f3e91"]));

    // B, live at the same time as A, sees nothing of it.
    let a_live = tenant_a();
    let b = report(tenant_b());
    assert_eq!(b["own"], Value::Null);
    assert_eq!(b["found"], serde_json::json!([]));
    drop(a_live);

    // Nor after A's instances are gone and their pooled memory slots are reused.
    for _ in 0..8 {
        drop(tenant_a());
        let b = report(tenant_b());
        assert_eq!(b["found"], serde_json::json!([]), "a reused slot leaked A's memory");
    }
}
